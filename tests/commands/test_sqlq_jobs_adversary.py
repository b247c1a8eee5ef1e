"""Adversarial tests of ``manage.py sqlq_jobs`` (issue 26), from docs/reference/jobs.md only."""

from __future__ import annotations

import io
import json
import os
import subprocess
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from django_sqlq import enqueue
from django_sqlq.models import Job, JobStatus
from tests.conftest import ROOT, wait_for
from tests.forking import run_python

LIST_FIELDS = {
    "id", "type", "queue", "status", "priority", "attempts", "max_attempts",
    "created_at", "scheduled_at", "completed_at",
}  # fmt: skip
SHOW_FIELDS = LIST_FIELDS | {
    "uuid", "updated_at", "started_at", "locked_by", "lease_expires_at", "timeout",
    "unique_key", "chain_id", "chain_index", "cancel_requested_at", "progress",
    "progress_message", "payload", "result", "last_error",
}  # fmt: skip

# cli() starts real processes: on MariaDB each alias's test database must exist for their
# system checks (tests/conftest.py's _every_mariadb_test_database, as worker_env has it).
pytestmark = pytest.mark.usefixtures("_every_mariadb_test_database")


def run(*args: str, **options: Any) -> tuple[str, str, int]:
    """call_command, returning (stdout, stderr, exit status as the command line would)."""
    out, err = io.StringIO(), io.StringIO()
    try:
        call_command("sqlq_jobs", *args, stdout=out, stderr=err, **options)
    except CommandError as exc:
        return out.getvalue(), err.getvalue() + str(exc), exc.returncode
    return out.getvalue(), err.getvalue(), 0


def cli(
    *args: str, stdin: bytes = b"", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    """A real ``python -m django sqlq_jobs`` on the test database."""
    full = dict(os.environ)
    full.update(
        DJANGO_SETTINGS_MODULE="tests.settings",
        SQLQ_TEST_USE_TEST_DB="1",
        PYTHONPATH=str(ROOT) + os.pathsep + full.get("PYTHONPATH", ""),
    )
    full.pop("PYTEST_CURRENT_TEST", None)
    full.update(env or {})
    return run_python(["-m", "django", "sqlq_jobs", *args], env=full, input=stdin)


def make(status: str, **fields: Any) -> Job:
    return Job.objects.create(type=fields.pop("type", "tests.noop"), status=status, **fields)


# -- input ------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_deeply_nested_payload_from_stdin_is_refused_with_exit_2() -> None:
    done = cli("enqueue", "tests.noop", "-", stdin=("[" * 5000 + "]" * 5000).encode())
    err = done.stderr.decode()
    assert "Traceback" not in err, err[-500:]
    assert done.returncode == 2, err[-500:]
    assert not Job.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize(
    "payload",
    ['{"a": NaN}', '{"a": Infinity}', '{"a": -Infinity}', "{'a': 1}", "", "   ", "{} {}",
     '{"a": "\\u0000"}', '{"a": "\\ud800"}', "1e999"],
)  # fmt: skip
def test_a_payload_json_cannot_store_exits_2_and_writes_nothing(payload: str) -> None:
    _out, err, code = run("enqueue", "tests.noop", payload)
    assert code == 2, err
    assert not Job.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("payload", ["[]", "5", "null", '"text"', "true"])
def test_a_payload_that_is_json_but_not_an_object_is_stored_as_given(payload: str) -> None:
    # enqueue() takes any JSON payload; the command says PAYLOAD is "JSON text".
    _out, err, code = run("enqueue", "tests.echo", payload)
    assert code == 0, err
    expected = json.loads(payload)
    assert Job.objects.get().payload == ({} if expected is None else expected)  # api.md


@pytest.mark.django_db
def test_a_payload_over_max_payload_bytes_is_refused(settings: Any) -> None:
    settings.SQLQ = {**settings.SQLQ, "MAX_PAYLOAD_BYTES": 1000}
    _out, err, code = run("enqueue", "tests.noop", json.dumps({"x": "a" * 2000}))
    assert code == 2, err
    assert not Job.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize(
    "args",
    [
        ("list", "--limit", "-5"), ("list", "--limit", "100001"), ("list", "--limit", "1.5"),
        ("list", "--limit", ""), ("list", "--older-than", "-1"), ("list", "--older-than", "1y"),
        ("list", "--older-than", "1d-2h"), ("list", "--newer-than", "nan"),
        ("list", "--newer-than", "inf"), ("list", "--older-than", "9999999999999999999999d"),
        ("list", "--status", ""), ("list", "--status", "FAILED,,bogus"),
        ("show", "0"), ("show", "-3"), ("show", "1.0"), ("show", "9223372036854775808"),
        ("retry", "1", "x"), ("cancel", "1e3"), ("delete", ""),
        ("enqueue", "tests.noop", "--priority", "-101"),
        ("enqueue", "tests.noop", "--delay", "x"),
        ("enqueue", "tests.noop", "--max-attempts", "-1"),
        ("enqueue", "tests.noop", "{}", "extra"),
    ],
)  # fmt: skip
def test_malformed_input_exits_2_and_changes_nothing(
    args: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    from django.core.management import ManagementUtility

    job = make(JobStatus.FAILED)
    with pytest.raises(SystemExit) as raised:
        ManagementUtility(["manage.py", "sqlq_jobs", *args]).execute()
    err = capsys.readouterr().err
    assert raised.value.code == 2, (args, err)
    assert "Traceback" not in err
    assert list(Job.objects.values_list("pk", "status")) == [(job.pk, JobStatus.FAILED)]


@pytest.mark.django_db
def test_an_id_as_large_as_bigint_is_a_missing_job_not_a_crash() -> None:
    for action in ("show", "retry", "cancel", "delete"):
        _out, err, code = run(action, str(2**63 - 1))
        assert code == 1, (action, err)


@pytest.mark.django_db
def test_a_huge_list_of_ids_is_handled_in_one_call() -> None:
    # 40,000 ids: beyond SQLite's 32,766 host parameters and PostgreSQL's 65,535 with some care.
    kept = [make(JobStatus.FAILED).pk for _ in range(3)]
    ids = [str(i) for i in range(10_000_000, 10_040_000)] + [str(pk) for pk in kept]
    started = time.monotonic()
    out, err, code = run("retry", *ids, "--json")
    assert time.monotonic() - started < 30
    assert code == 1, err[-300:]
    results = json.loads(out)
    assert len(results) == len(ids)
    assert sum(item["result"] == "missing" for item in results) == 40_000
    assert {item["id"] for item in results if item["result"] == "retried"} == set(kept)


@pytest.mark.django_db
def test_an_id_named_twice_is_changed_once_and_reported_consistently() -> None:
    job = make(JobStatus.FAILED)
    out, err, code = run("delete", str(job.pk), str(job.pk), "--json")
    assert code == 0, err
    assert [item["result"] for item in json.loads(out)] in (["deleted"], ["deleted", "deleted"])
    assert not Job.objects.exists()


# -- every action on every status ---------------------------------------------------------------


def _all_statuses() -> dict[str, Job]:
    future = timezone.now() + timedelta(hours=1)
    return {
        "blocked": make(JobStatus.BLOCKED),
        "scheduled": make(JobStatus.SCHEDULED, scheduled_at=future),
        "pending": make(JobStatus.PENDING),
        "processing": make(JobStatus.PROCESSING, locked_by="w1", attempts=1,
                           lease_expires_at=future),
        "completed": make(JobStatus.COMPLETED, attempts=1, completed_at=timezone.now()),
        "failed": make(JobStatus.FAILED, attempts=5, completed_at=timezone.now()),
        "cancelled": make(JobStatus.CANCELLED, completed_at=timezone.now()),
    }  # fmt: skip


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("action", "expected"),
    [
        ("retry", {"failed": "retried", "cancelled": "retried"}),
        ("cancel", {"blocked": "cancelled", "scheduled": "cancelled", "pending": "cancelled",
                    "processing": "cancel requested"}),
        ("delete", {s: "deleted" for s in ("blocked", "scheduled", "pending", "completed",
                                           "failed", "cancelled")}),
    ],
)  # fmt: skip
def test_each_action_on_every_status(action: str, expected: dict[str, str]) -> None:
    jobs = _all_statuses()
    by_id = {job.pk: status for status, job in jobs.items()}
    out, err, code = run(action, *(str(job.pk) for job in jobs.values()), "--json")
    assert code == 1, err  # some statuses are not for this action
    results = json.loads(out)
    assert [item["id"] for item in results] == list(by_id)
    for item in results:
        status = by_id[item["id"]]
        assert item["result"] == expected.get(status, "skipped"), (status, item)
        if item["result"] == "skipped":
            assert item.get("reason"), item
    left = dict(Job.objects.values_list("pk", "status"))
    if action == "delete":
        assert set(left) == {jobs["processing"].pk}
    if action == "retry":
        for status in ("failed", "cancelled"):
            job = Job.objects.get(pk=jobs[status].pk)
            assert (job.status, job.attempts) == (JobStatus.PENDING, 0)
            assert job.scheduled_at <= timezone.now()
    if action == "cancel":
        assert left[jobs["pending"].pk] == JobStatus.CANCELLED
        assert left[jobs["processing"].pk] == JobStatus.PROCESSING


@pytest.mark.django_db
def test_cancel_twice_of_a_running_job_says_what_it_did() -> None:
    running = make(JobStatus.PROCESSING, locked_by="w1", attempts=1)
    out1, _, code1 = run("cancel", str(running.pk), "--json")
    out2, _, code2 = run("cancel", str(running.pk), "--json")
    assert code1 == 0
    assert json.loads(out1)[0]["result"] == "cancel requested"
    # The second request changes nothing new; whatever it says, it must say it in the
    # documented vocabulary and never claim the job was cancelled.
    assert json.loads(out2)[0]["result"] in ("cancel requested", "skipped")
    assert code2 in (0, 1)


# -- JSON output --------------------------------------------------------------------------------


@pytest.mark.django_db
def test_every_json_output_has_the_documented_fields() -> None:
    out, _, code = run("enqueue", "tests.echo", '{"a": [1, {"b": null}]}', "--json")
    assert code == 0
    enqueued = json.loads(out)
    assert set(enqueued) >= LIST_FIELDS, LIST_FIELDS - set(enqueued)
    (listed,) = json.loads(run("list", "--json")[0])
    assert set(listed) >= LIST_FIELDS
    assert listed == {k: v for k, v in enqueued.items() if k in listed}
    shown = json.loads(run("show", str(enqueued["id"]), "--json")[0])
    assert set(shown) >= SHOW_FIELDS, SHOW_FIELDS - set(shown)
    assert shown["payload"] == {"a": [1, {"b": None}]}
    for key in ("created_at", "scheduled_at", "updated_at"):
        assert datetime.fromisoformat(shown[key].replace("Z", "+00:00"))


@pytest.mark.django_db(transaction=True)
def test_list_json_from_the_command_line_stays_parseable_when_the_limit_is_reached() -> None:
    for _ in range(3):
        enqueue("tests.noop")
    done = cli("list", "--json", "--limit", "2")
    assert done.returncode == 0, done.stderr
    assert len(json.loads(done.stdout)) == 2  # nothing but JSON on stdout
    text = cli("list", "--limit", "2")
    assert len(text.stdout.decode().splitlines()) == 3  # header + 2
    assert text.stderr.strip()  # "when the limit was reached, a note on stderr"


@pytest.mark.django_db(transaction=True)
def test_payload_dash_reads_stdin_bytes_from_the_command_line() -> None:
    payload = {"text": "héllo ✓", "n": list(range(1000))}
    done = cli("enqueue", "tests.echo", "-", "--json", stdin=json.dumps(payload).encode())
    assert done.returncode == 0, done.stderr
    assert Job.objects.get(pk=json.loads(done.stdout)["id"]).payload == payload
    bad = cli("enqueue", "tests.echo", "-", stdin=b'{"a": "\xff"}')
    assert bad.returncode == 2, bad.stderr
    assert b"Traceback" not in bad.stderr


@pytest.mark.django_db(transaction=True)
def test_list_of_a_typo_queue_or_type_matches_nothing_silently() -> None:
    """jobs.md: exit 2 for "an unknown queue". ``list --queue emial`` is a filter: this
    documents what it does (an empty list, exit 0) rather than asserting a refusal."""
    enqueue("tests.noop", queue="emails")
    done = cli("list", "--queue", "emial", "--json")
    assert (done.returncode, json.loads(done.stdout)) == (0, [])


# -- with a real worker -----------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_cancel_and_delete_race_a_real_worker_claiming(spawn_worker: Any, tmp_path: Path) -> None:
    """The command and a worker fight over the same jobs: every job ends in exactly one
    consistent place, no job runs after the command said it was cancelled or deleted,
    and the worker logs no error."""
    record = tmp_path / "ran.txt"
    ids = [enqueue("tests.record", {"path": str(record), "n": n}).pk for n in range(60)]
    worker = spawn_worker("--concurrency", "4")
    worker.wait_ready()
    said_cancelled: set[int] = set()
    said_deleted: set[int] = set()
    for chunk in range(0, len(ids), 6):
        part = ids[chunk : chunk + 6]
        action = "cancel" if chunk % 12 == 0 else "delete"
        out, err, code = run(action, *(str(i) for i in part), "--json")
        assert code in (0, 1), err
        for item in json.loads(out):
            assert item["result"] in ("cancelled", "cancel requested", "deleted", "skipped",
                                      "missing"), item  # fmt: skip
            if item["result"] == "cancelled":
                said_cancelled.add(item["id"])
            if item["result"] == "deleted":
                said_deleted.add(item["id"])

    def settled() -> bool:
        return not Job.objects.filter(
            status__in=[JobStatus.PENDING, JobStatus.PROCESSING]
        ).exists()

    wait_for(settled, 30)
    ran = (
        {int(line.split()[0]) for line in record.read_text().splitlines()}
        if record.exists()
        else set()
    )
    n_of = {pk: n for n, pk in enumerate(ids)}
    # "cancelled" (not "cancel requested") means it was waiting: it never ran. ("deleted"
    # may be a job that had completed.)
    assert not {n_of[i] for i in said_cancelled} & ran
    lines = record.read_text().splitlines() if record.exists() else []
    assert len(lines) == len(ran)  # nothing ran twice
    for job in Job.objects.all():
        if job.pk in said_cancelled:
            assert job.status == JobStatus.CANCELLED
    assert not Job.objects.filter(pk__in=said_deleted).exists()
    worker.signal(15)
    assert worker.wait() == 0
    text = worker.output()
    assert "Traceback" not in text, text[-2000:]
    assert " ERROR " not in text, text[-2000:]


@pytest.mark.django_db(transaction=True)
def test_a_running_job_cancelled_from_the_command_ends_cancelled(
    spawn_worker: Any, tmp_path: Path
) -> None:
    started = tmp_path / "started"
    job = enqueue(
        "tests.cancel_cooperative", {"started": str(started), "saw": str(tmp_path / "saw")}
    )
    worker = spawn_worker()
    worker.wait_ready()
    wait_for(lambda: Job.objects.filter(pk=job.pk, status=JobStatus.PROCESSING).exists(), 30)
    out, err, code = run("cancel", str(job.pk), "--json")
    assert (code, json.loads(out)[0]["result"]) == (0, "cancel requested"), err
    # delete of the running job is skipped, the job stays
    out, err, code = run("delete", str(job.pk), "--json")
    assert code == 1
    assert json.loads(out)[0]["result"] in ("skipped", "deleted")
    if json.loads(out)[0]["result"] == "skipped":
        wait_for(lambda: Job.objects.get(pk=job.pk).status == JobStatus.CANCELLED, 30)
        # now it can be retried and runs again
        out, err, code = run("retry", str(job.pk), "--json")
        assert (code, json.loads(out)[0]["result"]) == (0, "retried"), err
        out, err, code = run("cancel", str(job.pk), "--json")
        assert code == 0, err
        wait_for(lambda: Job.objects.get(pk=job.pk).status == JobStatus.CANCELLED, 30)
    worker.signal(15)
    worker.wait()
