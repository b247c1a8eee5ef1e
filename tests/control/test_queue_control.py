"""Issue 15 parts 1 and 4: pausing and resuming queues, and per-queue limits (a worker's
``--queue NAME:N`` and the global ``SQLQ["QUEUE_LIMITS"]``), with real worker processes."""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.test import override_settings

from django_sqlq import bulk_enqueue, enqueue, pause_queue, resume_queue
from django_sqlq.conf import get_settings
from django_sqlq.exceptions import ConfigurationError
from django_sqlq.limits import QueueLimit, parse_queue_option, parse_rate
from django_sqlq.models import Job, JobStatus, Queue
from django_sqlq.queues import queue_states
from tests.conftest import WorkerProcess, run_burst, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

Spawn = Callable[..., WorkerProcess]


def _status(queue: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for status in Job.objects.filter(queue=queue).values_list("status", flat=True):
        counts[status] = counts.get(status, 0) + 1
    return counts


def _done(queue: str, n: int) -> bool:
    return Job.objects.filter(queue=queue, status=JobStatus.COMPLETED).count() == n


def _most_at_once(path: Path) -> int:
    """Replay a tests.span log: the most jobs that were between their start and end."""
    running = most = 0
    for line in path.read_text().split():
        running += 1 if line.startswith("+") else -1
        most = max(most, running)
    return most


# -- pause and resume ----------------------------------------------------------------------


def test_a_paused_queue_is_not_claimed_by_two_workers_while_the_others_are(
    spawn_worker: Spawn,
) -> None:
    pause_queue("emails")
    bulk_enqueue("tests.noop", [{}] * 5, queue="emails", priority=100)
    workers = [spawn_worker("--queue", "default", "--queue", "emails") for _ in range(2)]
    workers.append(spawn_worker("--queue-name", "*"))  # every queue: pauses hold for it too
    for worker in workers:
        worker.wait_ready()
    bulk_enqueue("tests.noop", [{}] * 20)
    wait_for(lambda: _done("default", 20))
    # Each worker claimed again after the last default job: the emails jobs were passed over.
    bulk_enqueue("tests.noop", [{}] * 3)
    wait_for(lambda: _done("default", 23))
    assert _status("emails") == {JobStatus.PENDING: 5}
    assert resume_queue("emails") is True
    wait_for(lambda: _done("emails", 5), timeout=30)


def test_a_pause_reaches_running_workers_and_lets_running_jobs_finish(
    spawn_worker: Spawn, tmp_path: Path
) -> None:
    workers = [spawn_worker("--queue", "emails", "--concurrency", "2") for _ in range(2)]
    for worker in workers:
        worker.wait_ready()
    release = tmp_path / "release"
    running = enqueue(
        "tests.sleep_then_record",
        {"n": 1, "started": str(tmp_path / "s"), "release": str(release),
         "path": str(tmp_path / "log")},
        queue="emails",
    )  # fmt: skip
    wait_for((tmp_path / "s").exists)
    assert pause_queue("emails") is True
    assert pause_queue("emails") is False  # already paused
    for worker in workers:
        wait_for(lambda w=worker: "Queue emails paused" in w.output())  # type: ignore[misc]
    waiting = bulk_enqueue("tests.noop", [{}] * 4, queue="emails")  # enqueue still works
    release.touch()
    wait_for(lambda: Job.objects.get(pk=running.pk).status == JobStatus.COMPLETED)
    # The workers were idle with room since the 4 jobs were committed: a claim would have
    # taken them; each saw the pause first (its log line).
    assert all(Job.objects.get(pk=j.pk).status == JobStatus.PENDING for j in waiting)
    resume_queue("emails")
    wait_for(lambda: _done("emails", 5))


def test_the_pause_survives_a_worker_restart(spawn_worker: Spawn) -> None:
    call_command("sqlq_queue", "pause", "reports", stdout=io.StringIO())
    enqueue("tests.noop", queue="reports")
    enqueue("tests.noop")
    worker = spawn_worker("--queue", "default", "--queue", "reports", "--burst")
    assert worker.wait() == 0
    assert _status("reports") == {JobStatus.PENDING: 1}
    assert _done("default", 1)
    call_command("sqlq_queue", "resume", "reports", stdout=io.StringIO())
    assert spawn_worker("--queue", "reports", "--burst").wait() == 0
    assert _done("reports", 1)


def test_the_in_process_worker_skips_paused_queues() -> None:
    pause_queue("emails")
    enqueue("tests.noop", queue="emails")
    enqueue("tests.noop")
    run_burst(queues=["default", "emails"])
    assert _status("emails") == {JobStatus.PENDING: 1}
    resume_queue("emails")
    run_burst(queues=["default", "emails"])
    assert _done("emails", 1)


def test_sqlq_queue_status_lists_every_known_queue() -> None:
    pause_queue("emails")
    enqueue("tests.noop", queue="emails")
    Job.objects.create(type="tests.noop", queue="elsewhere")  # listed because it has jobs
    out = io.StringIO()
    with override_settings(
        SQLQ={**_sqlq(), "QUEUE_LIMITS": {"reports": {"concurrency": 2, "rate": "10/s"}}}
    ):
        call_command("sqlq_queue", "status", stdout=out)
    lines = {line.split()[0]: line.split() for line in out.getvalue().splitlines()[1:]}
    assert lines["emails"][1:4] == ["paused", "1", "0"]
    assert lines["default"][1] == "running"
    assert lines["elsewhere"][1:3] == ["running", "1"]
    assert " ".join(lines["reports"][5:]) == "concurrency 2, rate 10/s"


def test_sqlq_queue_refuses_junk() -> None:
    with pytest.raises(CommandError, match="Name the queue"):
        call_command("sqlq_queue", "pause")
    with pytest.raises(CommandError, match="NUL"):
        call_command("sqlq_queue", "pause", "a\x00b")
    with pytest.raises(CommandError, match="at most 100"):
        call_command("sqlq_queue", "resume", "x" * 101)
    with pytest.raises(CommandError):
        call_command("sqlq_queue", "explode", "emails")
    assert not Queue.objects.exists()


def test_resuming_a_queue_that_was_never_paused_changes_nothing() -> None:
    assert resume_queue("emails") is False
    assert [s.name for s in queue_states() if s.paused] == []


# -- limits --------------------------------------------------------------------------------


def _sqlq() -> dict[str, object]:
    from django.conf import settings

    return dict(settings.SQLQ)


def test_a_global_concurrency_limit_of_two_holds_with_three_worker_processes(
    spawn_worker: Spawn, tmp_path: Path
) -> None:
    limits = json.dumps({"reports": {"concurrency": 2}})
    log = tmp_path / "spans"
    bulk_enqueue(
        "tests.span", [{"n": n, "path": str(log), "seconds": 0.15} for n in range(12)],
        queue="reports",
    )  # fmt: skip
    env = {"SQLQ_TEST_QUEUE_LIMITS": limits}
    workers = [
        spawn_worker("--queue", "reports", "--concurrency", "3", "--burst", env=env),
        spawn_worker("--queue", "reports", "--concurrency", "3", "--burst", env=env),
        # A worker serving every queue counts against the same limit.
        spawn_worker("--queue-name", "*", "--concurrency", "3", "--burst", env=env),
    ]
    for worker in workers:
        assert worker.wait(60) == 0, worker.output()
    assert _done("reports", 12)
    assert _most_at_once(log) <= 2


def test_a_global_rate_limit_holds(spawn_worker: Spawn) -> None:
    limits = json.dumps({"reports": {"rate": "4/s"}})
    bulk_enqueue("tests.noop", [{}] * 10, queue="reports")
    workers = [
        spawn_worker("--queue", "reports", "--concurrency", "2",
                     env={"SQLQ_TEST_QUEUE_LIMITS": limits})
        for _ in range(2)
    ]  # fmt: skip
    wait_for(lambda: _done("reports", 10), timeout=60)
    for worker in workers:
        worker.stop()
    starts = sorted(
        t.timestamp()
        for t in Job.objects.filter(queue="reports").values_list("started_at", flat=True)
        if t is not None
    )
    # No window of one second (less a rounding margin) holds more than 4 starts.
    for i, start in enumerate(starts):
        assert sum(1 for t in starts[i:] if t < start + 0.998) <= 4, starts


def test_a_workers_own_limit_caps_its_threads_on_a_queue(
    spawn_worker: Spawn, tmp_path: Path
) -> None:
    log = tmp_path / "spans"
    bulk_enqueue(
        "tests.span", [{"n": n, "path": str(log), "seconds": 0.1} for n in range(8)],
        queue="emails",
    )  # fmt: skip
    bulk_enqueue("tests.noop", [{}] * 20)
    worker = spawn_worker(
        "--queue", "emails:1", "--queue", "default", "--concurrency", "4", "--burst"
    )
    assert worker.wait(60) == 0, worker.output()
    assert _done("emails", 8)
    assert _done("default", 20)
    assert _most_at_once(log) == 1


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("emails:0", "between 1 and"),
        ("emails:-2", "between 1 and"),
        ("emails:", "give a number"),
        (":3", "name before ':'"),
        ("emails:99999", "between 1 and"),
    ],
)
def test_queue_limit_option_errors(value: str, message: str) -> None:
    with pytest.raises(CommandError, match=message):
        call_command("sqlq_worker", "--burst", queues=[value], stdout=io.StringIO())
    with pytest.raises(CommandError, match=message):
        call_command("sqlq_worker", "--burst", "--queue", value, stdout=io.StringIO())


def test_queue_limit_option_conflicts_and_names() -> None:
    with pytest.raises(CommandError, match="twice with different limits"):
        call_command("sqlq_worker", "--burst", "--queue", "emails:2", "--queue", "emails:3")
    assert parse_queue_option("emails:4") == ("emails", 4)
    assert parse_queue_option("tenant:acme") == ("tenant:acme", None)  # ':' in a name
    assert parse_queue_option("emails") == ("emails", None)


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        ([], "must be a dict"),
        ({"video": 2}, "'concurrency' and/or 'rate'"),
        ({"video": {}}, "'concurrency' and/or 'rate'"),
        ({"video": {"concurency": 2}}, "unknown key"),
        ({"video": {"concurrency": 0}}, r"\['video'\]\['concurrency'\]"),
        ({"video": {"concurrency": True}}, "between 1 and"),
        ({"sms": {"rate": "10"}}, r"\['sms'\]\['rate'\]"),
        ({"sms": {"rate": "10/fortnight"}}, "unit s, m, h or d"),
        ({"sms": {"rate": "0/s"}}, "between 1 and"),
        ({"sms": {"rate": "10/0s"}}, "period"),
        ({"sms": {"rate": 10}}, "a rate is"),
        ({"": {"concurrency": 1}}, "non-empty"),
    ],
)
def test_queue_limits_setting_errors(limits: object, message: str) -> None:
    with (
        override_settings(SQLQ={**_sqlq(), "QUEUE_LIMITS": limits}),
        pytest.raises(ConfigurationError, match=message),
    ):
        get_settings()


def test_queue_limits_setting_parses() -> None:
    with override_settings(
        SQLQ={**_sqlq(), "QUEUE_LIMITS": {"v": {"concurrency": 2}, "s": {"rate": "600/m"}}}
    ):
        limits = get_settings().QUEUE_LIMITS
    assert limits == {"v": QueueLimit(2, None, None), "s": QueueLimit(None, 600, 60.0)}
    assert parse_rate("5/10s") == (5, 10.0)
    assert parse_rate("1000/h") == (1000, 3600.0)


def test_a_global_limit_in_process_claims_no_more_than_the_limit() -> None:
    with override_settings(SQLQ={**_sqlq(), "QUEUE_LIMITS": {"reports": {"concurrency": 2}}}):
        bulk_enqueue("tests.noop", [{}] * 5, queue="reports")
        conf = get_settings()
        limits = dict(conf.QUEUE_LIMITS)
        from django_sqlq.db import ops_for

        ops_for("default").ensure_queue_rows(["reports"])
        first = ops_for("default").claim(queues=["reports"], worker_id="a", limit=5,
                                lease_seconds=30, limits=limits)  # fmt: skip
        second = ops_for("default").claim(queues=["reports"], worker_id="b", limit=5,
                                 lease_seconds=30, limits=limits)  # fmt: skip
        assert (len(first), len(second)) == (2, 0)
        # A row deleted meanwhile: that claim takes none, and writes it back.
        Queue.objects.all().delete()
        Job.objects.filter(status=JobStatus.PROCESSING).update(status=JobStatus.COMPLETED)
        assert ops_for("default").claim(queues=["reports"], worker_id="c", limit=5,
                               lease_seconds=30, limits=limits) == []  # fmt: skip
        assert len(ops_for("default").claim(queues=["reports", "default"], worker_id="c",
                                   limit=5, lease_seconds=30, limits=limits)) == 2  # fmt: skip


def test_a_claim_of_a_limited_queue_waits_for_another_claim_of_it_to_commit(engine: str) -> None:
    """The lock: while one claim's transaction is open (it took the 2 slots), a second
    claim of the queue waits for it, then counts its jobs and takes none. Without the lock
    the second would count 0 running (the first has not committed) and take 2 more."""
    from django.db import connections, transaction

    from django_sqlq.db import ops_for

    limits = {"reports": QueueLimit(concurrency=2)}
    bulk_enqueue("tests.noop", [{}] * 5, queue="reports")
    ops_for("default").ensure_queue_rows(["reports"])
    first: list[object] = []
    second: list[list[object]] = []
    claimed, release, done = threading.Event(), threading.Event(), threading.Event()

    def claim(worker_id: str) -> list[object]:
        return list(ops_for("default").claim(queues=["reports"], worker_id=worker_id,
                                    limit=5, lease_seconds=30, limits=limits))  # fmt: skip

    def hold() -> None:
        try:
            with transaction.atomic():
                first.extend(claim("a"))
                claimed.set()
                release.wait(30)
        finally:
            connections.close_all()

    def wait_and_claim() -> None:
        try:
            second.append(claim("b"))
        finally:
            done.set()
            connections.close_all()

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert claimed.wait(30)
        waiter = threading.Thread(target=wait_and_claim)
        waiter.start()
        if engine == "postgresql":
            # The second claim is waiting on a lock (or, without one, already done).
            wait_for(lambda: done.is_set() or _lock_waits() > 0)
    finally:
        release.set()
        holder.join(30)
    waiter.join(30)
    assert len(first) == 2
    assert second == [[]]


def test_a_rate_limited_claim_records_the_starts_its_jobs_have() -> None:
    """The rate window is checked and recorded at one clock, and the claimed jobs start at
    that clock: recorded earlier than the jobs' ``started_at`` (the claim statement's own
    clock, as before), the next claim counted from too early a start and a worker started
    six jobs of a "4/s" queue within one second."""
    from django_sqlq.db import ops_for

    limits = {"reports": QueueLimit(rate=2, period=1.0)}
    bulk_enqueue("tests.noop", [{}] * 3, queue="reports")
    ops_for("default").ensure_queue_rows(["reports"])
    jobs = ops_for("default").claim(queues=["reports"], worker_id="a", limit=5,
                                    lease_seconds=30, limits=limits)  # fmt: skip
    assert len(jobs) == 2
    recorded = sorted(Queue.objects.get(name="reports").recent_starts)
    started = sorted(
        t.timestamp()
        for t in Job.objects.filter(status=JobStatus.PROCESSING).values_list(
            "started_at", flat=True
        )
        if t is not None
    )
    assert recorded == pytest.approx(started, abs=1e-4)


def _lock_waits() -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT COUNT(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
            "AND datname = current_database()"
        )
        return int(cursor.fetchone()[0])


@pytest.mark.django_db(transaction=True, databases=["default", "other"])
def test_a_bad_queue_limit_is_a_system_check_error_naming_the_key() -> None:
    from django.core.checks import run_checks

    with override_settings(SQLQ={**_sqlq(), "QUEUE_LIMITS": {"sms": {"rate": "ten/s"}}}):
        messages = [m for m in run_checks() if m.id == "django_sqlq.E001"]
    assert len(messages) == 1
    assert "SQLQ['QUEUE_LIMITS']['sms']['rate']" in messages[0].msg


def test_a_worker_refuses_a_limit_on_a_queue_it_does_not_serve() -> None:
    from django_sqlq.worker import Worker

    with pytest.raises(ValueError, match="does not serve"):
        Worker(queues=["default"], queue_limits={"emails": 2})
    with pytest.raises(ValueError, match=">= 1"):
        Worker(queues=["emails"], queue_limits={"emails": 0})


def test_sqlq_queue_status_names_and_aliases() -> None:
    out = io.StringIO()
    call_command("sqlq_queue", "status", "emails", "reports", stdout=out)
    assert [line.split()[:2] for line in out.getvalue().splitlines()[1:]] == [
        ["emails", "running"],
        ["reports", "running"],
    ]
    # A name nothing knows is refused (issue 26: it exited 0, listing it as running).
    with pytest.raises(CommandError, match="Unknown queue 'nowhere'"):
        call_command("sqlq_queue", "status", "emails", "nowhere", stdout=io.StringIO())
    with pytest.raises(CommandError, match="Unknown database alias"):
        call_command("sqlq_queue", "status", "--database", "nope")


def test_pausing_and_resuming_limited_queues_beside_claiming_workers_never_deadlocks(
    spawn_worker: Spawn,
) -> None:
    """An operator pauses and resumes queues with limits while workers claim from them. On
    MariaDB the pause read the queue's row with a shared lock (the insert of a row that
    exists) before updating it, and a claim waiting to lock that row for its limits made
    the two deadlock (error 1213): the pause raised, the workers logged it (found by an
    adversary: 13 of 115 pause/resume pairs failed)."""
    queues = ["default", "emails", "reports"]
    limits = json.dumps({"emails": {"concurrency": 2}, "reports": {"rate": "50/s"}})
    env = {"SQLQ_TEST_QUEUE_LIMITS": limits}
    for queue in queues:
        bulk_enqueue("tests.noop", [{} for _ in range(400)], queue=queue)
    workers = [spawn_worker("--concurrency", "4", env=env) for _ in range(3)]
    for worker in workers:
        worker.wait_ready()
    turns = 0
    while Job.objects.exclude(status=JobStatus.COMPLETED).exists() and turns < 300:
        for queue in ("emails", "reports"):
            pause_queue(queue)  # raised OperationalError 1213 on MariaDB
            resume_queue(queue)
        turns += 1
    assert turns >= 5, "the workers drained before the operator got going"
    wait_for(lambda: not Job.objects.exclude(status=JobStatus.COMPLETED).exists(), 60)
    assert Job.objects.filter(attempts=1).count() == 1200
    for worker in workers:
        assert "Deadlock" not in worker.output(), worker.output()[-2000:]
