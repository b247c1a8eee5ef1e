"""Retention: KEEP_FINISHED, the pruning pass, its lease, the workers' pruner and
``manage.py sqlq_prune``. Both engines."""

from __future__ import annotations

import json
import signal
import threading
from collections import Counter
from datetime import timedelta
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import connections, transaction
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_sqlq import bulk_enqueue, enqueue, retention
from django_sqlq.conf import get_settings
from django_sqlq.db import ops_for
from django_sqlq.exceptions import ConfigurationError
from django_sqlq.models import Job, JobStatus, Maintenance, WorkerProcess
from tests.conftest import run_burst, wait_for

DAY = 86400
SQLQ = {"QUEUES": ["default", "emails", "reports"]}


def make(status: str, *, age: timedelta | None, queue: str = "default", n: int = 1) -> list[int]:
    """``n`` rows in ``status`` that finished ``age`` ago (None: no completed_at)."""
    finished = None if age is None else timezone.now() - age
    rows = Job.objects.bulk_create(
        [
            Job(type="tests.noop", status=status, queue=queue, completed_at=finished)
            for _ in range(n)
        ]
    )
    return [row.pk for row in rows]


def by_status() -> Counter[str]:
    return Counter(Job.objects.values_list("status", flat=True))


# -- settings ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (3600, {"completed": 3600, "failed": 3600, "cancelled": 3600}),
        (None, {"completed": None, "failed": None, "cancelled": None}),
        (timedelta(days=2), {"completed": 2 * DAY, "failed": 2 * DAY, "cancelled": 2 * DAY}),
        (
            {"completed": DAY, "failed": 30 * DAY, "cancelled": None},
            {"completed": DAY, "failed": 30 * DAY, "cancelled": None},
        ),
        # A status left out keeps the default (7 days).
        ({"completed": 0}, {"completed": 0, "failed": 7 * DAY, "cancelled": 7 * DAY}),
    ],
)
def test_keep_finished_accepts_seconds_none_and_a_dict_per_status(value, expected):
    with override_settings(SQLQ={**SQLQ, "KEEP_FINISHED": value}):
        assert dict(get_settings().KEEP_FINISHED) == expected
        assert get_settings().prunes == any(v is not None for v in expected.values())


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"pending": DAY}, r"KEEP_FINISHED'\] has the key 'pending'"),
        ({"completed": -1}, r"KEEP_FINISHED'\]\['completed'\] must be"),
        ({"failed": "30d"}, r"KEEP_FINISHED'\]\['failed'\] must be"),
        ({"cancelled": True}, r"KEEP_FINISHED'\]\['cancelled'\] must be"),
        ("7d", r"KEEP_FINISHED'\] must be"),
        (1.5, r"KEEP_FINISHED'\] must be"),
        ([DAY], r"KEEP_FINISHED'\] must be"),
    ],
)
def test_bad_keep_finished_names_the_key(value, message):
    with (
        override_settings(SQLQ={**SQLQ, "KEEP_FINISHED": value}),
        pytest.raises(ConfigurationError, match=message),
    ):
        get_settings()


def test_bad_prune_interval_is_refused():
    with (
        override_settings(SQLQ={**SQLQ, "PRUNE_INTERVAL": 0}),
        pytest.raises(ConfigurationError, match="PRUNE_INTERVAL"),
    ):
        get_settings()


# -- the pass ----------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_pass_deletes_only_finished_rows_past_their_status_keep():
    old, recent = timedelta(days=40), timedelta(hours=1)
    doomed = [
        *make("completed", age=timedelta(days=2), n=5),
        *make("failed", age=timedelta(days=31), n=3),
    ]
    kept = [
        *make("completed", age=recent, n=4),
        *make("failed", age=timedelta(days=29), n=2),
        *make("cancelled", age=old, n=2),  # kept for ever
        *make("completed", age=None),  # never finished by the book: no completed_at
        # Rows that have not finished, whatever their completed_at says.
        *make("pending", age=old, n=2),
        *make("scheduled", age=old),
        *make("processing", age=old),
    ]
    keep = {"completed": DAY, "failed": 30 * DAY, "cancelled": None}
    result = retention.prune("default", keep=keep, holder="t", batch_size=2)
    assert result.deleted == {"completed": 5, "failed": 3}
    assert result.complete
    left = set(Job.objects.values_list("pk", flat=True))
    assert left == set(kept)
    assert not left & set(doomed)
    record = retention.last_prune("default")
    assert record is not None
    assert (record.last_run_by, record.last_deleted) == ("t", 8)
    assert record.last_details == {"completed": 5, "failed": 3}
    assert record.holder == ""  # released
    # A second pass finds nothing; the totals add up.
    assert retention.prune("default", keep=keep, holder="t").total == 0
    assert Maintenance.objects.get(duty="prune").total_deleted == 8


@pytest.mark.django_db(transaction=True)
def test_a_pass_can_be_narrowed_to_queues():
    make("completed", age=timedelta(days=9), queue="emails", n=3)
    make("completed", age=timedelta(days=9), queue="reports", n=2)
    result = retention.prune("default", keep={"completed": DAY}, queues=["emails"], holder="t")
    assert result.total == 3
    assert set(Job.objects.values_list("queue", flat=True)) == {"reports"}


def test_only_finished_statuses_can_be_pruned():
    for status in ("pending", "scheduled", "processing", "x' OR 1=1 --"):
        with pytest.raises(ValueError, match="only finished jobs"):
            retention.prune("default", keep={status: 0}, holder="t")
        with pytest.raises(ValueError, match="only finished jobs"):
            ops_for("default").prune(status=status, keep_seconds=0)


@pytest.mark.django_db
def test_the_pruning_batch_reads_the_finished_index(engine):
    ops = ops_for("default")
    if engine == "mysql":
        _assert_mariadb_prunes_in_index_order(ops)
        return
    where, params = ops._finished_sql("completed", None)
    sql = f"SELECT id FROM sqlq_job WHERE {where} ORDER BY completed_at LIMIT 1000"
    params.update(now=None, back=-1.0)
    with connections["default"].cursor() as cursor:
        if engine == "postgresql":
            cursor.execute("SET LOCAL enable_seqscan = off")
            cursor.execute(f"EXPLAIN {sql}", params)
        else:
            cursor.execute(f"EXPLAIN QUERY PLAN {sql}", params)
        plan = " ".join(str(row) for row in cursor.fetchall())
    assert "sqlq_job_finished_idx" in plan, plan


def _assert_mariadb_prunes_in_index_order(ops: Any) -> None:
    """MariaDB's batch: its ids read off (status, completed_at) in order, stopping at the
    limit (no sort of every prunable row, no scan), then deleted by primary key. (A DELETE
    ... ORDER BY completed_at LIMIT read and sorted every prunable row of the status for
    each batch.) The statements prune() runs are EXPLAINed, on a table of rows to prune."""
    make("completed", age=timedelta(days=3), n=1500)
    connection = connections["default"]
    with CaptureQueriesContext(connection) as queries:
        assert ops.prune(status="completed", keep_seconds=DAY, limit=500) == 500
    reads = [q["sql"] for q in queries if q["sql"].startswith("SELECT id FROM sqlq_job")]
    # The ids read, then locked by primary key (db.mysql_path.by_id), then deleted by it.
    (read, lock) = reads
    (delete,) = [q["sql"] for q in queries if q["sql"].startswith("DELETE")]
    assert lock.startswith("SELECT id FROM sqlq_job FORCE INDEX (PRIMARY)"), lock
    for sql, key, kinds in (
        (read, "sqlq_job_finished_idx", ("range", "ref")),
        (lock, "PRIMARY", ("range",)),
        (delete, "PRIMARY", ("range",)),
    ):
        with connection.cursor() as cursor:
            cursor.execute(f"EXPLAIN {sql}")
            columns = [column[0] for column in cursor.description]
            steps = [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]
        jobs = [step for step in steps if step["table"] == "sqlq_job"]
        assert jobs, steps
        for step in jobs:
            assert step["key"] == key, steps
            assert step["type"] in kinds, steps
            assert "Using filesort" not in (step["Extra"] or ""), steps


# -- the lease: one pass at a time -------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_one_pass_at_a_time_and_a_dead_holders_lease_runs_out():
    make("completed", age=timedelta(days=9), n=3)
    retention._duty("default")
    ops = ops_for("default")
    assert ops.take_lease("prune", holder="dead-worker", seconds=60)
    with pytest.raises(retention.PrunerBusy, match="dead-worker"):
        retention.prune("default", keep={"completed": DAY}, holder="w2")
    assert Job.objects.count() == 3
    # From another thread and connection too.
    errors: list[BaseException] = []

    def other() -> None:
        try:
            retention.prune("default", keep={"completed": DAY}, holder="w3")
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=other)
    thread.start()
    thread.join()
    assert [type(e) for e in errors] == [retention.PrunerBusy]
    # The holder never renewed it: a minute later anyone may take over.
    later = timezone.now() + timedelta(seconds=61)
    result = retention.prune("default", keep={"completed": DAY}, holder="w2", now=later)
    assert result.total == 3
    assert Maintenance.objects.get(duty="prune").last_run_by == "w2"


@pytest.mark.django_db(transaction=True)
def test_worker_processes_wait_for_the_lease(spawn_worker):
    """Three workers that would prune every 50 ms: while a lease is held, none prunes (each
    says so); once it is released, the rows go."""
    make("completed", age=timedelta(days=9), n=5)
    retention._duty("default")
    assert ops_for("default").take_lease("prune", holder="operator", seconds=600)
    env = {"SQLQ_TEST_PRUNE_INTERVAL": "0.05", "SQLQ_TEST_KEEP_FINISHED": str(DAY)}
    workers = [spawn_worker("-v", "3", env=env) for _ in range(3)]
    for worker in workers:
        worker.wait_ready()
    for worker in workers:

        def waiting(w: Any = worker) -> bool:
            return "not pruning: another pruner (operator)" in w.output()

        wait_for(waiting)
    assert Job.objects.count() == 5
    ops_for("default").release_lease("prune", holder="operator")
    # The pass records itself once done.
    wait_for(lambda: Maintenance.objects.get(duty="prune").total_deleted == 5)
    assert not Job.objects.exists()
    record = Maintenance.objects.get(duty="prune")
    assert record.last_run_by.split(":")[1] in {str(w.pid) for w in workers}
    for worker in workers:
        worker.signal(signal.SIGTERM)
        assert worker.wait(timeout=60) == 0, worker.output()


# -- the workers' pruner while they drain ------------------------------------------------------


def ran(path: Path) -> Counter[int]:
    if not path.exists():
        return Counter()
    return Counter(int(line.split()[0]) for line in path.read_text().splitlines() if line)


@pytest.mark.django_db(transaction=True)
def test_workers_prune_while_draining_and_never_touch_unfinished_jobs(tmp_path, spawn_worker):
    old = timedelta(days=40)
    make("completed", age=old, n=2500)
    make("failed", age=old, n=300)
    kept_cancelled = make("cancelled", age=old, n=50)
    scheduled = enqueue("tests.noop", delay=timedelta(hours=1))
    Job.objects.filter(pk=scheduled.pk).update(completed_at=timezone.now() - old)
    started, release, log = tmp_path / "started", tmp_path / "release", tmp_path / "ran"
    running = enqueue(
        "tests.sleep_then_record",
        # Held until the test releases it: as long as the test's own waits may take.
        {
            "n": -1,
            "started": str(started),
            "release": str(release),
            "path": str(log),
            "max_seconds": 600,
        },
    )
    env = {
        "SQLQ_TEST_PRUNE_INTERVAL": "0.05",
        "SQLQ_TEST_KEEP_FINISHED": json.dumps(
            {"completed": DAY, "failed": DAY, "cancelled": None}
        ),
    }
    # -v 3: the prune passes' lines, for a failure to show what the pruners did.
    workers = [spawn_worker("--concurrency", "2", "-v", "3", env=env) for _ in range(2)]
    wait_for(started.exists)
    # Both registered (their SIGTERM handlers follow at once): on a loaded machine a worker
    # still starting up when the test stops them died of the signal instead (exit -15).
    wait_for(lambda: WorkerProcess.objects.filter(stopped_at=None).count() == 2, timeout=120)
    # A pending job whose completed_at was left behind (say, a hand-made retry): written so
    # in one transaction, or a worker may run it before the old completed_at is set, which
    # then makes it a completed job that is due for pruning.
    with transaction.atomic():
        stale = enqueue("tests.record", {"n": -2, "path": str(log)})
        Job.objects.filter(pk=stale.pk).update(completed_at=timezone.now() - old)
    jobs = bulk_enqueue("tests.record", [{"n": i, "path": str(log)} for i in range(400)])
    wait_for(lambda: ran(log).total() >= 401, timeout=120)

    def pruned_to(status: str, count: int) -> None:
        try:
            wait_for(lambda: by_status()[status] == count, timeout=120)
        except AssertionError:
            prune = Maintenance.objects.filter(duty="prune").values().first()
            said = "\n\n".join(worker.output()[-3000:] for worker in workers)
            raise AssertionError(
                f"{status}: not {count} rows within 120 s: {dict(by_status())}; {prune}\n{said}"
            ) from None

    pruned_to("failed", 0)
    pruned_to("completed", 401)
    # The running job and the scheduled one are untouched; the cancelled ones are kept.
    assert Job.objects.get(pk=running.pk).status == JobStatus.PROCESSING
    assert Job.objects.get(pk=scheduled.pk).status == JobStatus.SCHEDULED
    assert set(Job.objects.cancelled().values_list("pk", flat=True)) == set(kept_cancelled)
    assert set(Job.objects.completed().values_list("pk", flat=True)) == {
        stale.pk,
        *(job.pk for job in jobs),
    }
    release.touch()
    wait_for(lambda: Job.objects.get(pk=running.pk).status == JobStatus.COMPLETED)
    counts = ran(log)
    assert set(counts) == {-2, -1, *range(400)}
    assert max(counts.values()) == 1
    wait_for(lambda: Maintenance.objects.get(duty="prune").total_deleted == 2800)
    for worker in workers:
        worker.signal(signal.SIGTERM)
        assert worker.wait(timeout=60) == 0, worker.output()


@pytest.mark.django_db(transaction=True)
def test_an_in_process_worker_keeps_everything_when_keep_finished_is_none():
    make("completed", age=timedelta(days=400), n=3)
    with override_settings(SQLQ={**SQLQ, "KEEP_FINISHED": None, "PRUNE_INTERVAL": 0.01}):
        worker = run_burst()
    assert not worker.pruner.running
    assert worker.pruner.last is None
    assert Job.objects.count() == 3


# -- SQLite gives the space back ---------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_sqlite_gives_the_freed_pages_back(engine):
    if engine != "sqlite":
        pytest.skip("PostgreSQL reuses the space VACUUM frees; nothing goes back to the OS")
    ops = ops_for("default")
    assert ops.auto_vacuum() == 2  # type: ignore[attr-defined]
    make("completed", age=timedelta(days=9), n=3000)
    Job.objects.update(payload={"pad": "x" * 2000})
    with connections["default"].cursor() as cursor:
        cursor.execute("PRAGMA page_count")
        before = cursor.fetchone()[0]
    result = retention.prune("default", keep={"completed": DAY}, holder="t")
    assert result.total == 3000
    assert result.free_pages == 0
    with connections["default"].cursor() as cursor:
        cursor.execute("PRAGMA page_count")
        after = cursor.fetchone()[0]
    assert after < before / 2


# -- sqlq_prune --------------------------------------------------------------------------------


def prune_cmd(*args: str, **options: Any) -> str:
    out = StringIO()
    call_command("sqlq_prune", *args, stdout=out, **options)
    return out.getvalue()


@pytest.fixture
def rows() -> dict[str, list[int]]:
    return {
        "old_completed": make("completed", age=timedelta(days=10), n=3),
        "old_completed_emails": make("completed", age=timedelta(days=10), queue="emails", n=2),
        "old_failed": make("failed", age=timedelta(days=10), n=2),
        "old_cancelled": make("cancelled", age=timedelta(days=10)),
        "new_completed": make("completed", age=timedelta(hours=2), n=2),
        "live": [*make("pending", age=None), *make("processing", age=None)],
    }


@pytest.mark.django_db
def test_dry_run_deletes_nothing_and_counts_per_status_and_queue(rows):
    out = prune_cmd("--dry-run")
    assert Job.objects.count() == sum(map(len, rows.values()))
    assert "completed  default                        3" in out
    assert "completed  emails                         2" in out
    assert "failed     default                        2" in out
    assert "cancelled  default                        1" in out
    assert "Would delete 8 finished job(s)." in out


@pytest.mark.django_db
def test_prune_by_the_settings(rows):
    out = prune_cmd()
    assert "Deleted 8 finished job(s) (completed 5, failed 2, cancelled 1)." in out
    assert set(Job.objects.values_list("pk", flat=True)) == {*rows["new_completed"], *rows["live"]}


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("args", "options", "left_out"),
    [
        (["--status", "failed", "--status", "cancelled"], {}, ["old_failed", "old_cancelled"]),
        (["--status", "failed,cancelled"], {}, ["old_failed", "old_cancelled"]),
        (["--queue", "emails"], {}, ["old_completed_emails"]),
        (["--older-than", "1h"], {}, ["old_completed", "old_completed_emails", "old_failed",
                                      "old_cancelled", "new_completed"]),
        (["--older-than", "11d"], {}, []),
        (["--older-than", "1d12h", "--status", "completed", "--queue", "default"], {},
         ["old_completed"]),
        # django-tasks-db's spellings, on the command line and by keyword.
        (["--min-age-days", "1", "--queue-name", "emails"], {}, ["old_completed_emails"]),
        (["--queue-name", "*", "--min-age-days", "0"], {}, ["old_completed",
         "old_completed_emails", "old_failed", "old_cancelled", "new_completed"]),
        (["--task-status", "FAILED"], {}, ["old_failed", "old_cancelled"]),
        (["--task-status", "SUCCESSFUL", "--queue-name", "default,emails"], {},
         ["old_completed", "old_completed_emails"]),
        (["--min-age-days", "1", "--failed-min-age-days", "30"], {}, ["old_completed",
         "old_completed_emails"]),
        ([], {"min_age_days": 1, "queue_name": "emails", "backend": "default"},
         ["old_completed_emails"]),
        ([], {"task_status": ["SUCCESSFUL"], "older_than": 3600.0, "queues": ["default"]},
         ["old_completed", "new_completed"]),
    ],
)  # fmt: skip
def test_prune_options(rows, args, options, left_out):
    prune_cmd(*args, **options)
    gone = {pk for name in left_out for pk in rows[name]}
    everything = {pk for pks in rows.values() for pk in pks}
    assert set(Job.objects.values_list("pk", flat=True)) == everything - gone


@pytest.mark.django_db
def test_an_explicit_age_prunes_a_status_kept_for_ever(rows):
    with override_settings(SQLQ={**SQLQ, "KEEP_FINISHED": None}):
        assert "Would delete 0" in prune_cmd("--dry-run")
        prune_cmd("--status", "cancelled", "--older-than", "1d")
    assert not Job.objects.filter(pk__in=rows["old_cancelled"]).exists()
    assert Job.objects.count() == sum(map(len, rows.values())) - 1


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--status", "pending"], "never pruned"),
        (["--status", "processing"], "never pruned"),
        (["--task-status", "RUNNING"], "never pruned"),
        (["--task-status", "READY"], "never pruned"),
        (["--status", "done"], "choose among completed, failed, cancelled"),
        (["--status", "failed", "--task-status", "FAILED"], "not both"),
        (["--queue", "a", "--queue-name", "b"], "not both"),
        (["--older-than", "1d", "--min-age-days", "1"], "not both"),
        (["--older-than", "soon"], "is not a duration"),
        (["--older-than", "-5"], "must be between 0"),
        (["--older-than", "7x"], "is not a duration"),
        (["--min-age-days", "-1"], "0 or more days"),
        (["--min-age-days", "two"], "whole number"),
        (["--queue-name", ","], "needs queue names"),
        (["--queue-name", "x" * 101], "--queue-name"),
        (["--backend", "nope"], "not a django_sqlq tasks backend"),
        (["--database", "nope"], "not in settings.DATABASES"),
    ],
)
def test_bad_options_are_clear_errors_and_delete_nothing(rows, args, message):
    with pytest.raises(CommandError, match=message):
        prune_cmd(*args)
    assert Job.objects.count() == sum(map(len, rows.values()))


@pytest.mark.django_db
def test_the_command_waits_its_turn_behind_a_running_pruner(rows):
    retention._duty("default")
    assert ops_for("default").take_lease("prune", holder="worker-a", seconds=60)
    with pytest.raises(CommandError, match=r"another pruner \(worker-a\) is running"):
        prune_cmd()
    assert Job.objects.count() == sum(map(len, rows.values()))
    assert "Would delete 8" in prune_cmd("--dry-run")  # a dry run needs no lease
