"""``manage.py sqlq_jobs``: list, show, retry, cancel, delete and enqueue jobs from the shell,
with ``--json`` for scripts, through the lifecycle functions the admin uses."""

from __future__ import annotations

import io
import json
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from django_sqlq import enqueue
from django_sqlq.models import Job, JobStatus

pytestmark = pytest.mark.django_db


def jobs(*args: str, **options: Any) -> str:
    out = io.StringIO()
    call_command("sqlq_jobs", *args, stdout=out, stderr=io.StringIO(), **options)
    return out.getvalue()


def jobs_json(*args: str) -> Any:
    return json.loads(jobs(*args, "--json"))


def refused(*args: str) -> CommandError:
    with pytest.raises(CommandError) as raised:
        call_command("sqlq_jobs", *args, stdout=io.StringIO(), stderr=io.StringIO())
    return raised.value


def make(status: str, **fields: Any) -> Job:
    return Job.objects.create(type=fields.pop("type", "tests.noop"), status=status, **fields)


# -- list ------------------------------------------------------------------------------------


def test_list_prints_the_newest_jobs_first() -> None:
    first = enqueue("tests.noop")
    second = enqueue("tests.echo", {"n": 1}, queue="emails")
    lines = jobs("list").splitlines()
    assert lines[0].split() == ["ID", "STATUS", "QUEUE", "TYPE", "ATTEMPTS", "CREATED"]
    assert [line.split()[:4] for line in lines[1:]] == [
        [str(second.pk), "pending", "emails", "tests.echo"],
        [str(first.pk), "pending", "default", "tests.noop"],
    ]


def test_list_json_is_one_array_of_objects() -> None:
    job = enqueue("tests.echo", {"n": 1}, queue="emails", priority=5)
    (item,) = jobs_json("list")
    assert item["id"] == job.pk
    assert (item["type"], item["queue"], item["status"], item["priority"]) == (
        "tests.echo",
        "emails",
        "pending",
        5,
    )
    assert item["attempts"] == 0
    assert item["created_at"].startswith(str(timezone.now().year))
    assert jobs_json("list", "--status", "failed") == []


def test_list_filters_by_status_queue_type_and_age() -> None:
    failed = make(JobStatus.FAILED, queue="emails")
    cancelled = make(JobStatus.CANCELLED, type="tests.echo")
    pending = make(JobStatus.PENDING)
    old = make(JobStatus.COMPLETED)
    Job.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(days=3))

    def ids(*args: str) -> list[int]:
        return [item["id"] for item in jobs_json("list", *args)]

    assert ids("--status", "failed,cancelled") == [cancelled.pk, failed.pk]
    assert ids("--status", "failed", "--status", "pending") == [pending.pk, failed.pk]
    assert ids("--queue", "emails") == [failed.pk]
    assert ids("--type", "tests.echo") == [cancelled.pk]
    assert ids("--older-than", "2d") == [old.pk]
    assert ids("--newer-than", "1d") == [pending.pk, cancelled.pk, failed.pk]
    assert ids("--limit", "2") == [old.pk, pending.pk]
    # call_command keywords, as scripts in Python give them.
    assert [item["id"] for item in json.loads(jobs("list", json=True, queues=["emails"]))] == [
        failed.pk
    ]


@pytest.mark.parametrize(
    "args",
    [
        ("list", "--status", "done"),
        ("list", "--older-than", "soon"),
        ("list", "--limit", "0"),
        ("list", "--queue", "a\x00b"),
        ("show", "x"),
        ("retry", "0"),
        ("frobnicate",),
        ("list", "--database", "nope"),
    ],
)
def test_bad_input_is_refused(args: tuple[str, ...]) -> None:
    refused(*args)  # exit status 2 from the command line (argparse's, or the command's)
    assert not Job.objects.exists()


def test_bad_input_from_the_command_line_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    from django.core.management import ManagementUtility

    for argv in (["list", "--status", "done"], ["show", "12x"], ["enqueue", "tests.nop"]):
        with pytest.raises(SystemExit) as raised:
            ManagementUtility(["manage.py", "sqlq_jobs", *argv]).execute()
        assert raised.value.code == 2, argv
    err = capsys.readouterr().err
    assert "statuses are blocked, scheduled" in err
    assert "Did you mean 'tests.noop'?" in err


# -- show ------------------------------------------------------------------------------------


def test_show_prints_one_job_with_payload_result_and_error() -> None:
    job = make(
        JobStatus.FAILED,
        payload={"order": 42},
        result=None,
        last_error="Boom: it went boom\nTraceback ...",
        attempts=5,
    )
    text = jobs("show", str(job.pk))
    assert f"id: {job.pk}" in text
    assert "status: failed" in text
    assert '"order": 42' in text
    assert "last_error:\n  Boom: it went boom\n  Traceback ..." in text
    data = jobs_json("show", str(job.pk))
    assert data["payload"] == {"order": 42}
    assert data["last_error"].startswith("Boom")
    assert data["uuid"] == str(Job.objects.get(pk=job.pk).uuid)


def test_show_a_missing_job_exits_1() -> None:
    error = refused("show", "999999")
    assert "No job has id 999999" in str(error)
    assert error.returncode == 1


# -- retry, cancel, delete ---------------------------------------------------------------------


def test_retry_makes_failed_jobs_pending_again() -> None:
    failed = make(JobStatus.FAILED, attempts=5)
    out = jobs("retry", str(failed.pk))
    assert out == f"Job {failed.pk}: retried (now pending).\n"
    failed.refresh_from_db()
    assert (failed.status, failed.attempts) == (JobStatus.PENDING, 0)


def test_retry_of_a_completed_or_missing_job_does_the_rest_and_exits_1() -> None:
    failed = make(JobStatus.FAILED)
    completed = make(JobStatus.COMPLETED)
    out, err = io.StringIO(), io.StringIO()
    with pytest.raises(CommandError) as raised:
        call_command(
            "sqlq_jobs", "retry", str(failed.pk), str(completed.pk), "999999", "--json",
            stdout=out, stderr=err,
        )  # fmt: skip
    assert raised.value.returncode == 1
    assert "2 of 3 job(s) not retried" in str(raised.value)
    assert json.loads(out.getvalue()) == [
        {"id": failed.pk, "result": "retried", "status": "pending"},
        {
            "id": completed.pk,
            "result": "skipped",
            "status": "completed",
            "reason": "it is completed: only failed or cancelled jobs can be retried",
        },
        {"id": 999999, "result": "missing", "status": None},
    ]
    assert Job.objects.get(pk=failed.pk).status == JobStatus.PENDING
    assert Job.objects.get(pk=completed.pk).status == JobStatus.COMPLETED


def test_cancel_cancels_a_waiting_job_and_asks_for_a_running_one() -> None:
    pending = enqueue("tests.noop")
    running = make(JobStatus.PROCESSING, locked_by="w1", attempts=1)
    out = jobs("cancel", str(pending.pk), str(running.pk))
    assert f"Job {pending.pk}: cancelled (now cancelled)." in out
    assert f"Job {running.pk}: running; its worker is asked to cancel it." in out
    assert Job.objects.get(pk=pending.pk).status == JobStatus.CANCELLED
    assert Job.objects.get(pk=running.pk).cancel_requested_at is not None


def test_delete_deletes_all_but_running_jobs() -> None:
    done = make(JobStatus.COMPLETED)
    running = make(JobStatus.PROCESSING, locked_by="w1", attempts=1)
    with pytest.raises(CommandError) as raised:
        call_command(
            "sqlq_jobs", "delete", str(done.pk), str(running.pk),
            stdout=io.StringIO(), stderr=io.StringIO(),
        )  # fmt: skip
    assert raised.value.returncode == 1
    assert not Job.objects.filter(pk=done.pk).exists()
    assert Job.objects.filter(pk=running.pk).exists()


def test_a_job_deleted_meanwhile_is_reported_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Between the command's read and its change, another process deletes the job (a prune,
    another operator): it says the job is gone, not that a completed job cannot be deleted
    while running (what it said on MariaDB, where its delete waited for the prune's)."""
    from django_sqlq import lifecycle
    from django_sqlq.management import jobs_options

    job = make(JobStatus.COMPLETED)

    def pruned_first(ids: Any, *, alias: str | None = None) -> Any:
        Job.objects.filter(pk__in=list(ids)).delete()  # the prune that won
        return lifecycle.delete(ids, alias=alias)

    done, _function, rule = jobs_options.CHANGES["delete"]
    monkeypatch.setitem(jobs_options.CHANGES, "delete", (done, pruned_first, rule))
    err = io.StringIO()
    with pytest.raises(CommandError) as raised:
        call_command("sqlq_jobs", "delete", str(job.pk), stdout=io.StringIO(), stderr=err)
    assert raised.value.returncode == 1
    assert err.getvalue().strip() == f"Job {job.pk}: no job has this id."


def test_changes_go_through_the_lifecycle_functions(monkeypatch: pytest.MonkeyPatch) -> None:
    from django_sqlq import lifecycle
    from django_sqlq.management import jobs_options

    calls: list[tuple[str, list[int], str | None]] = []
    job = make(JobStatus.FAILED)
    for name in ("retry_now", "cancel_or_request", "delete"):
        real = getattr(lifecycle, name)

        def spy(ids: Any, *, alias: str | None = None, _n: str = name, _r: Any = real) -> Any:
            calls.append((_n, list(ids), alias))
            return _r(ids, alias=alias)

        action = {"retry_now": "retry", "cancel_or_request": "cancel", "delete": "delete"}[name]
        done, _function, rule = jobs_options.CHANGES[action]
        monkeypatch.setitem(jobs_options.CHANGES, action, (done, spy, rule))
    jobs("retry", str(job.pk))
    jobs("cancel", str(job.pk))
    jobs("delete", str(job.pk))
    assert [name for name, _, _ in calls] == ["retry_now", "cancel_or_request", "delete"]
    assert all(ids == [job.pk] and alias == "default" for _, ids, alias in calls)


# -- enqueue ---------------------------------------------------------------------------------


def test_enqueue_writes_one_job_with_a_json_payload() -> None:
    out = jobs("enqueue", "tests.echo", '{"order": 42}', "--queue", "emails", "--priority", "7")
    job = Job.objects.get()
    assert out == f"Job {job.pk} enqueued: type tests.echo, queue emails, pending.\n"
    assert (job.payload, job.queue, job.priority) == ({"order": 42}, "emails", 7)
    data = jobs_json("enqueue", "tests.noop", "--delay", "1h", "--max-attempts", "2")
    later = Job.objects.get(pk=data["id"])
    assert (data["status"], later.max_attempts) == ("scheduled", 2)
    assert later.scheduled_at > timezone.now() + timedelta(minutes=59)


def test_enqueue_reads_the_payload_from_stdin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("[1, 2, 3]"))
    jobs("enqueue", "tests.echo", "-")
    assert Job.objects.get().payload == [1, 2, 3]


@pytest.mark.parametrize(
    ("args", "options", "message"),
    [
        (("enqueue", "tests.echo", "{order: 42}"), {}, "The payload is not JSON"),
        (("enqueue", "tests.nop"), {}, "Did you mean 'tests.noop'?"),
        (("enqueue", "tests.noop", "--queue", "nowhere"), {}, "Unknown queue 'nowhere'"),
        # A call_command() keyword skips argparse: checked as the command line's value.
        (("enqueue", "tests.noop"), {"priority": 500}, "between -100 and 100"),
        (("enqueue", "tests.noop"), {"max_attempts": 0}, "must be at least 1"),
    ],
)
def test_enqueue_refuses_what_enqueue_refuses_and_writes_nothing(
    args: tuple[str, ...], options: dict[str, Any], message: str
) -> None:
    with pytest.raises(CommandError) as raised:
        call_command("sqlq_jobs", *args, stdout=io.StringIO(), stderr=io.StringIO(), **options)
    assert message in str(raised.value)
    assert raised.value.returncode == 2
    assert not Job.objects.exists()


def test_help_says_there_is_no_django_user() -> None:
    from django_sqlq.management.commands.sqlq_jobs import Command

    text = " ".join(Command().create_parser("manage.py", "sqlq_jobs").format_help().split())
    assert "there is no Django user" in text
    for action in ("list", "show", "retry", "cancel", "delete", "enqueue"):
        assert action in text
