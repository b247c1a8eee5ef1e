"""The tasks backend: @task code (tests/testapp/tasks.py, framework-only) runs on django_sqlq.

Runs against django.tasks on Django 6+ and the django_tasks backport on Django 5.2; skipped
only where neither is installed.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import timedelta
from datetime import timezone as dt_timezone
from types import ModuleType
from typing import Any

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.apps import apps
from django.conf import settings
from django.core.management import CommandError, call_command
from django.db import connections, models, transaction
from django.test import override_settings
from django.utils import timezone

from django_sqlq import compat, enqueue, lifecycle
from django_sqlq.db import ops_for
from django_sqlq.models import Job, JobStatus
from tests.conftest import ROOT, run_burst, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def tasks() -> ModuleType:
    """The @task module; skips the test when no tasks framework is installed."""
    if not compat.AVAILABLE:
        pytest.skip("neither django.tasks (Django 6+) nor the django_tasks backport is installed")
    return importlib.import_module("tests.testapp.tasks")


@pytest.fixture
def backend(tasks: ModuleType) -> Any:  # noqa: ARG001 (needs the tasks registered)
    return compat.task_backends["default"]


@pytest.fixture
def sent() -> Iterator[dict[str, list[Any]]]:
    """What task_enqueued / task_started / task_finished were sent with, by signal."""
    seen: dict[str, list[Any]] = {"enqueued": [], "started": [], "finished": []}
    if not compat.AVAILABLE:
        yield seen
        return
    receivers = {}
    for name in seen:
        signal_ = getattr(compat, f"task_{name}")

        def receiver(sender: Any, task_result: Any, _name: str = name, **kwargs: Any) -> None:
            seen[_name].append((sender, task_result))

        signal_.connect(receiver, weak=False)
        receivers[name] = (signal_, receiver)
    yield seen
    for signal_, receiver in receivers.values():
        signal_.disconnect(receiver)


# A second backend alias that opts in to retries and serves one queue.
RETRYING = {
    "BACKEND": "django_sqlq.backend.SQLQBackend",
    "QUEUES": ["reports"],
    "OPTIONS": {"MAX_ATTEMPTS": 3},
}


@pytest.fixture
def retrying(tasks: ModuleType) -> Iterator[Any]:  # noqa: ARG001 (needs the tasks registered)
    """TASKS["retrying"] (for in-process workers and commands only)."""
    with override_settings(TASKS={**settings.TASKS, "retrying": RETRYING}):
        yield compat.task_backends["retrying"]


def statuses(results: list[Any], backend: Any) -> list[str]:
    return [backend.get_result(r.id).status for r in results]


# -- enqueue and get_result ------------------------------------------------------------------


def test_enqueue_writes_a_job_that_round_trips_through_get_result(tasks, backend, sent):
    run_after = timezone.now().astimezone(dt_timezone(timedelta(hours=2))) + timedelta(hours=1)
    deferred = tasks.echo.using(priority=-7, run_after=run_after)
    result = deferred.enqueue(1, [2, (3, b"four")], key={"nested": (5,)}, none=None)
    plain = tasks.add.enqueue(2, 3)

    assert isinstance(result.id, str)
    assert result.status == compat.TaskResultStatus.READY
    assert result.args == [1, [2, [3, "four"]]]
    assert result.kwargs == {"key": {"nested": [5]}, "none": None}
    # Every field, enqueued_at to the microsecond, run_after and run_after=None included.
    assert backend.get_result(result.id) == result
    assert tasks.echo.get_result(result.id) == result
    assert backend.get_result(plain.id) == plain
    assert backend.get_result(plain.id).task.run_after is None
    assert backend.get_result(result.id).task.run_after == run_after

    job = Job.objects.get(uuid=result.id)
    assert job.type == "tests.testapp.tasks.echo"
    assert (job.queue, job.priority, job.max_attempts) == ("emails", -7, 1)
    assert job.status == JobStatus.SCHEDULED  # run_after is an hour ahead
    assert job.payload["args"] == result.args
    assert job.payload["kwargs"] == result.kwargs
    assert job.scheduled_at == run_after
    assert job.created_at == result.enqueued_at is not None
    assert [r.id for _, r in sent["enqueued"]] == [result.id, plain.id]
    assert all(sender is type(backend) for sender, _ in sent["enqueued"])


def test_aenqueue_and_aget_result_from_async_code(tasks, backend, sent):
    async def main() -> tuple[Any, Any]:
        try:
            result = await tasks.add.aenqueue(20, 22)
            fetched = await tasks.add.aget_result(result.id)
            with pytest.raises(compat.TaskResultDoesNotExist):
                await backend.aget_result("123456789")
            return result, fetched
        finally:
            # The ORM ran in asgiref's thread: close its connections there.
            await sync_to_async(connections.close_all)()

    result, fetched = asyncio.run(main())
    assert fetched == result
    assert [r.id for _, r in sent["enqueued"]] == [result.id]
    run_burst()
    assert backend.get_result(result.id).return_value == 42


def test_a_rolled_back_transaction_leaves_no_task(tasks, backend):
    # The raise is what rolls the transaction back.
    with pytest.raises(RuntimeError, match="roll back"), transaction.atomic():  # noqa: PT012
        result = tasks.add.enqueue(1, 1)
        assert Job.objects.filter(uuid=result.id).exists()
        raise RuntimeError("roll back")
    assert not Job.objects.exists()
    with pytest.raises(compat.TaskResultDoesNotExist):
        backend.get_result(result.id)


@pytest.mark.django_db(transaction=True, databases=["default", "other"])
def test_jobs_table_in_another_database_waits_for_the_callers_commit(tasks, backend, sent):
    with override_settings(SQLQ={**settings.SQLQ, "DATABASE": "other"}):
        with transaction.atomic(using="default"):
            result = tasks.add.enqueue(1, 2)
            # Not written (so no id, no signal) until the caller's transaction commits.
            assert result.id == ""
            assert not Job.objects.using("other").exists()
            assert sent["enqueued"] == []
        job = Job.objects.using("other").get()
        assert result.id == str(job.uuid)
        assert [r for _, r in sent["enqueued"]] == [result]
        assert backend.get_result(result.id) == result


def test_result_ids_are_unguessable_uuids_and_nothing_else_is_found(tasks, backend):
    handler_job = enqueue("tests.noop")
    first, second = tasks.add.enqueue(1, 1), tasks.add.enqueue(2, 2)
    echo = tasks.echo.enqueue()
    job = Job.objects.get(uuid=first.id)
    # A UUID (what apps store in a UUIDField), time-ordered but random after its first 48
    # bits (the milliseconds): not the job's id, nor derived from a neighbour's.
    assert str(uuid.UUID(first.id)) == first.id
    assert uuid.UUID(first.id).version == 7
    assert first.id != str(job.pk)
    assert first.id[-12:] != second.id[-12:]
    assert backend.get_result(first.id) == first
    assert backend.get_result(first.id.upper()).id == first.id  # a UUID, in either case
    for bad in [str(job.pk), "0", "-1", "1.0", " 1", "007", "abc", "", "١٢", "9" * 30,
                "123", str(uuid.uuid4()), first.id.replace("-", ""), "{" + first.id + "}",
                f"urn:uuid:{first.id}", first.id + " ", str(handler_job.pk),
                str(handler_job.uuid)]:  # fmt: skip
        with pytest.raises(compat.TaskResultDoesNotExist):
            backend.get_result(bad)
    with pytest.raises(compat.TaskResultMismatch):
        tasks.add.get_result(echo.id)


def test_a_result_id_read_back_from_a_uuidfield_is_found(tasks, backend):
    # An app stores result.id in a models.UUIDField, which hands it back as a uuid.UUID:
    # django-tasks-db's get_result() takes that (its ids are a UUIDField); so must ours.
    result = tasks.add.enqueue(1, 2)
    stored = models.UUIDField().to_python(result.id)
    assert isinstance(stored, uuid.UUID)
    assert backend.get_result(stored) == result
    assert tasks.add.get_result(stored).id == result.id
    assert async_to_sync(backend.aget_result)(stored) == result
    with pytest.raises(compat.TaskResultDoesNotExist):
        backend.get_result(uuid.uuid4())
    handler_job = enqueue("tests.noop")
    with pytest.raises(compat.TaskResultDoesNotExist):
        backend.get_result(handler_job.uuid)


@pytest.mark.usefixtures("backend")
def test_validation_happens_again_at_enqueue(tasks):
    # The backend's QUEUES changed since @task ran: enqueue() checks again, as Django does.
    with (
        override_settings(TASKS={"default": {**settings.TASKS["default"], "QUEUES": ["default"]}}),
        pytest.raises(compat.InvalidTask, match="emails"),
    ):
        tasks.echo.enqueue()
    with pytest.raises(TypeError):
        tasks.add.enqueue(object(), 1)
    with pytest.raises((TypeError, ValueError)):
        tasks.add.enqueue(float("nan"), 1)
    with pytest.raises(compat.InvalidTask):
        tasks.add.using(priority=101)
    assert not Job.objects.exists()


def test_backend_queues_follow_djangos_semantics_not_sqlq_queues(tasks):
    # SQLQ["QUEUES"] lists plain enqueue()'s queues; it has no say over tasks.
    with override_settings(
        SQLQ={**settings.SQLQ, "QUEUES": ["default"]},
        TASKS={"default": {"BACKEND": "django_sqlq.backend.SQLQBackend", "QUEUES": ["emails"]}},
    ):
        result = tasks.echo.enqueue(1)  # "emails": a task queue only
        assert Job.objects.get().queue == "emails"
        from django_sqlq.backend import SQLQBackend

        assert compat.task_backends["default"].check() == []  # no second list (no E102)
        assert isinstance(compat.task_backends["default"], SQLQBackend)
        # Validated at using(), as Django does.
        with pytest.raises(compat.InvalidTask, match="nope"):
            tasks.echo.using(queue_name="nope")
        with pytest.raises(compat.InvalidTask, match="default"):
            tasks.add.enqueue(1, 2)  # the task's queue, "default", is not in QUEUES
        call_command("sqlq_worker", backend_name="default", batch=True, verbosity=0)
        assert compat.task_backends["default"].get_result(result.id).status == "SUCCESSFUL"
    # Without QUEUES: Django's default, ["default"] only.
    with override_settings(TASKS={"default": {"BACKEND": "django_sqlq.backend.SQLQBackend"}}):
        assert compat.task_backends["default"].queues == {"default"}
        with pytest.raises(compat.InvalidTask, match="emails"):
            tasks.echo.enqueue()
        tasks.add.enqueue(1, 2)
    # An empty list allows any name, and a worker for that backend serves every queue.
    with override_settings(
        TASKS={"default": {"BACKEND": "django_sqlq.backend.SQLQBackend", "QUEUES": []}}
    ):
        anywhere = tasks.add.using(queue_name="anything-at-all").enqueue(2, 2)
        call_command("sqlq_worker", backend_name="default", batch=True, verbosity=0)
        assert compat.task_backends["default"].get_result(anywhere.id).return_value == 4


def test_backend_options_are_validated():
    if not compat.AVAILABLE:
        pytest.skip("no tasks framework")
    from django_sqlq.backend import SQLQBackend

    for options in ({"MAX_ATTEMPTS": 0}, {"MAX_ATTEMPTS": "3"}, {"RETRIES": 3}):
        with pytest.raises(compat.InvalidTaskBackend):
            SQLQBackend("bad", {"OPTIONS": options})


@pytest.mark.usefixtures("tasks")
def test_check_reports_a_missing_app(monkeypatch):
    from django_sqlq.backend import SQLQBackend

    assert SQLQBackend("ok", {}).check() == []
    assert SQLQBackend("ok", {"QUEUES": ["default", "not-in-sqlq-queues"]}).check() == []
    monkeypatch.setattr(apps, "is_installed", lambda name: name != "django_sqlq")
    [error] = SQLQBackend("mine", {}).check()
    assert error.id == "django_sqlq.E101"
    assert error.hint is not None
    assert "INSTALLED_APPS" in error.hint


def test_compat_imports_cleanly_without_a_tasks_framework():
    code = (
        "import sys\n"
        "sys.modules['django.tasks'] = sys.modules['django_tasks'] = None\n"
        "import django_sqlq.compat as compat\n"
        "assert compat.AVAILABLE is False and compat.FRAMEWORK is None\n"
        "try:\n"
        "    import django_sqlq.backend\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert "pip install 'django-sqlq[tasks]'" in out.stdout


def test_compat_prefers_djangos_own_framework_and_falls_back_to_the_backport():
    import django

    if not compat.AVAILABLE:
        pytest.skip("no tasks framework")
    # Django 6+: django.tasks, even with the backport installed; Django 5.2: the backport.
    framework = "django.tasks" if django.VERSION >= (6, 0) else "django_tasks"
    assert framework == compat.FRAMEWORK
    assert compat.Task.__module__.startswith(framework + ".")
    assert compat.BaseTaskBackend.__module__.startswith(framework + ".")
    assert framework == compat.LOGGER_NAME
    # Without django.tasks (Django 5.2), whatever the Python version: the backport if present.
    code = (
        "import sys\n"
        "sys.modules['django.tasks'] = None\n"
        "import django_sqlq.compat as compat\n"
        "print(compat.FRAMEWORK)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    backport = importlib.util.find_spec("django_tasks") is not None
    assert out.stdout.strip() == ("django_tasks" if backport else "None")


def test_the_tasks_extra_installs_the_backport_on_every_python_version():
    import tomllib

    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]["tasks"]
    # Markers cannot name Django's version, and one on the Python version left Django 5.2 on
    # Python 3.12+ without any tasks framework: none at all.
    assert [req.split(";")[0].split(">=")[0].strip() for req in extra] == ["django-tasks"]
    assert not any(";" in req for req in extra)


# -- running tasks ---------------------------------------------------------------------------


def test_success_stores_the_return_value_and_sends_each_signal_once(tasks, backend, sent):
    result = tasks.add.enqueue(2, 3)
    async_result = tasks.async_add.enqueue(4, 5)
    worker = run_burst()

    done = backend.get_result(result.id)
    assert done.status == compat.TaskResultStatus.SUCCESSFUL
    assert done.return_value == 5
    assert done.worker_ids == [worker.worker_id]
    assert done.attempts == 1
    assert done.errors == []
    assert done.enqueued_at <= done.started_at <= done.finished_at
    assert done.last_attempted_at == done.started_at
    assert backend.get_result(async_result.id).return_value == 9
    result.refresh()
    assert result == done

    ids = {result.id, async_result.id}
    for name in ("enqueued", "started", "finished"):
        assert sorted(r.id for _, r in sent[name]) == sorted(ids), name
    assert {r.status for _, r in sent["started"]} == {compat.TaskResultStatus.RUNNING}
    finished = {r.id: r for _, r in sent["finished"]}
    assert finished[result.id] == done
    assert all(sender is type(backend) for name in sent for sender, _ in sent[name])


def test_failures_are_failed_with_class_and_traceback_and_the_worker_goes_on(tasks, backend, sent):
    failing = tasks.fail.enqueue("it broke")
    exits = tasks.exit_with.enqueue("SystemExit")
    interrupted = tasks.exit_with.enqueue("KeyboardInterrupt")
    unserialisable = tasks.unserialisable.enqueue()
    fine = tasks.add.enqueue(1, 1)
    run_burst()

    result = backend.get_result(failing.id)
    assert result.status == compat.TaskResultStatus.FAILED
    [error] = result.errors
    assert error.exception_class_path == "tests.testapp.tasks.TaskFailed"
    assert error.exception_class is tasks.TaskFailed
    assert error.traceback.startswith("Traceback (most recent call last)")
    assert "raise TaskFailed(message)" in error.traceback
    assert "TaskFailed: it broke" in error.traceback
    assert result.attempts == 1
    assert result.finished_at is not None
    with pytest.raises(ValueError, match="Task failed"):
        _ = result.return_value

    classes = {
        exits.id: SystemExit,
        interrupted.id: KeyboardInterrupt,
        # What the framework's own backends raise for a return value JSON cannot hold.
        unserialisable.id: TypeError,
    }
    for result_id, kind in classes.items():
        [error] = backend.get_result(result_id).errors
        assert error.exception_class is kind, error.exception_class_path
    traceback = backend.get_result(unserialisable.id).errors[0].traceback
    assert "cannot be stored as JSON" in traceback
    # In the words django-tasks-db's results use (the json module's), which its users match.
    assert "Object of type set is not JSON serializable" in traceback
    assert backend.get_result(fine.id).return_value == 2
    failed = [r.id for _, r in sent["finished"] if r.status == compat.TaskResultStatus.FAILED]
    assert sorted(failed) == sorted([failing.id, exits.id, interrupted.id, unserialisable.id])


def test_takes_context_gets_the_running_result_and_attempt(tasks, backend):
    result = tasks.with_context.enqueue("hello")
    worker = run_burst()
    assert backend.get_result(result.id).return_value == {
        "label": "hello",
        "attempt": 1,
        "id": result.id,
        "status": "RUNNING",
        "worker_ids": [worker.worker_id],
    }


def test_max_attempts_option_opts_in_to_retries(tasks, retrying, sent, tmp_path):
    log = tmp_path / "attempts"
    result = tasks.flaky.using(backend="retrying").enqueue(str(log))
    assert Job.objects.get(uuid=result.id).max_attempts == 3
    worker = run_burst(queues=["reports"])

    done = retrying.get_result(result.id)
    assert (done.status, done.return_value) == (compat.TaskResultStatus.SUCCESSFUL, 2)
    assert log.read_text().split() == ["1", "2"]
    assert done.worker_ids == [worker.worker_id] * 2
    assert [e.exception_class_path for e in done.errors] == ["tests.testapp.tasks.TaskFailed"]
    # Each attempt starts; the task finishes once.
    assert len(sent["started"]) == 2
    assert len(sent["finished"]) == 1


def test_a_return_value_that_cannot_be_stored_is_not_retried(tasks, retrying, sent):
    """As a handler's: the task ran to its end; another attempt would repeat its work and
    end the same way. Its error stays the framework's TypeError."""
    result = tasks.unserialisable.using(backend="retrying", queue_name="reports").enqueue()
    run_burst(queues=["reports"])
    done = retrying.get_result(result.id)
    assert done.status == compat.TaskResultStatus.FAILED
    assert done.attempts == 1
    assert [e.exception_class for e in done.errors] == [TypeError]
    assert Job.objects.get(uuid=result.id).status == JobStatus.FAILED
    assert [r.id for _, r in sent["finished"]] == [result.id]


def test_statuses_map_onto_the_frameworks(tasks, backend):
    ready, running, cancelled = (tasks.add.enqueue(n, n) for n in range(3))
    lifecycle.cancel([Job.objects.get(uuid=cancelled.id).pk])
    claimed = ops_for("default").claim(queues=None, worker_id="w1", limit=1, lease_seconds=30)
    assert [job.id for job in claimed] == [Job.objects.get(uuid=ready.id).pk]  # oldest first
    assert backend.get_result(ready.id).status == compat.TaskResultStatus.RUNNING
    assert backend.get_result(ready.id).worker_ids == ["w1"]
    assert backend.get_result(running.id).status == compat.TaskResultStatus.READY
    gone = backend.get_result(cancelled.id)
    assert gone.status == compat.TaskResultStatus.FAILED
    assert gone.finished_at is not None


def test_priority_order(tasks, tmp_path):
    log = tmp_path / "ran"
    for n, priority in enumerate([0, 50, -10, 100, 50]):
        tasks.record.using(priority=priority).enqueue(str(log), n)
    run_burst()
    assert [line.split()[0] for line in log.read_text().splitlines()] == ["3", "1", "4", "0", "2"]


def test_run_after_holds_the_task_back(tasks, backend):
    later = tasks.add.using(run_after=timezone.now() + timedelta(hours=1)).enqueue(1, 2)
    assert run_burst().jobs_claimed == 0
    assert backend.get_result(later.id).status == compat.TaskResultStatus.READY
    run_burst(clock=lambda: timezone.now() + timedelta(hours=1, seconds=1))
    assert backend.get_result(later.id).return_value == 3


# -- sqlq_worker with db_worker's options ----------------------------------------------------


@pytest.mark.usefixtures("retrying")
def test_db_worker_queue_options_select_queues(tasks, backend, tmp_path):
    log = str(tmp_path / "ran")
    default, emails, reports = (
        tasks.record.using(queue_name=name).enqueue(log, n)
        for n, name in enumerate(["default", "emails", "reports"])
    )
    call_command("sqlq_worker", "--queue-name", "emails", "--batch", verbosity=0)
    assert statuses([default, emails, reports], backend) == ["READY", "SUCCESSFUL", "READY"]
    call_command(
        "sqlq_worker", "--queue-name", "*", "--exclude-queues", "reports,emails", "--batch",
        "--interval", "0", "--no-startup-delay", "--no-reload", verbosity=0,
    )  # fmt: skip
    assert statuses([default, emails, reports], backend) == ["SUCCESSFUL"] * 2 + ["READY"]
    # The "retrying" backend serves only "reports".
    more = tasks.record.enqueue(log, 3)
    call_command(
        "sqlq_worker", "--backend", "retrying", "--max-tasks", "5", "--batch", verbosity=0
    )
    assert statuses([reports, more], backend) == ["SUCCESSFUL", "READY"]


def test_db_worker_options_work_by_their_db_worker_dest_names(tasks, backend, tmp_path):
    # What code and tests written for db_worker pass to call_command, unchanged.
    log = str(tmp_path / "ran")
    results = [
        tasks.record.using(queue_name=name).enqueue(log, n)
        for n, name in enumerate(["default", "emails", "reports"] * 3)
    ]
    call_command(
        "sqlq_worker",
        batch=True,
        interval=0,
        startup_delay=False,
        queue_name="*",
        max_tasks=5,
        worker_id="w1",
        backend_name="default",
        reload=False,
        verbosity=0,
    )
    done = [backend.get_result(r.id) for r in results]
    assert [r.status for r in done].count("SUCCESSFUL") == 5  # max_tasks
    assert {tuple(r.worker_ids) for r in done if r.status == "SUCCESSFUL"} == {("w1",)}
    # queue_name: db_worker's comma-separated string; startup_delay=True is accepted too.
    call_command(
        "sqlq_worker", batch=True, queue_name="emails,reports", startup_delay=True, verbosity=0
    )
    assert {r.task.queue_name for r in results if backend.get_result(r.id).status == "READY"} <= {
        "default"
    }
    # Values passed by keyword are validated as on the command line.
    cases: list[tuple[dict[str, Any], str]] = [
        ({"interval": -1}, "--interval"),
        ({"max_tasks": 0}, "--max-tasks"),
        ({"queue_name": "nope"}, "Unknown queue"),
        ({"backend_name": "nope"}, "--backend"),
        ({"concurrency": "many"}, "--concurrency"),
    ]
    for options, message in cases:
        with pytest.raises(CommandError, match=message):
            call_command("sqlq_worker", batch=True, verbosity=0, **options)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--queue", "default", "--queue-name", "emails"], "--queue or --queue-name"),
        (["--interval", "1", "--poll-interval", "1"], "--poll-interval or --interval"),
        (["--max-tasks", "1", "--max-jobs", "1"], "--max-jobs or --max-tasks"),
        (["--exclude-queues", "emails"], "only be used with --queue-name '\\*'"),
        (["--queue-name", "default", "--exclude-queues", "emails"], "--queue-name '\\*'"),
        (["--queue-name", "*,emails"], "cannot be combined"),
        (["--interval", "-1"], "a number of seconds >= 0"),
        (["--max-tasks", "0"], "at least 1"),
        (["--backend", "nope"], "nope"),
        (["--backend", "retrying", "--queue-name", "emails"], "not queues of TASKS"),
        (["--backend", "retrying", "--queue-name", "*", "--exclude-queues", "reports"], "left"),
        (["--queue-name", "nope"], "Unknown queue"),
        (["--reload"], "--reload cannot be combined with --burst"),
    ],
)
@pytest.mark.usefixtures("tasks", "retrying")
def test_db_worker_options_conflicts_are_clear_errors(args, message):
    with pytest.raises(CommandError, match=message):
        call_command("sqlq_worker", *args, "--batch", verbosity=0)


# -- real worker processes -------------------------------------------------------------------


def test_sigterm_during_a_task_lets_it_finish(tasks, backend, spawn_worker, tmp_path):
    started, release = tmp_path / "started", tmp_path / "release"
    result = tasks.wait_for_file.enqueue(str(started), str(release))
    worker = spawn_worker("--queue-name", "default", "--no-startup-delay")
    worker.wait_ready()
    wait_for(started.exists)
    # RUNNING is visible to other processes while the task runs.
    running = backend.get_result(result.id)
    assert running.status == compat.TaskResultStatus.RUNNING
    assert running.attempts == 1
    worker.signal(signal.SIGTERM)
    wait_for(lambda: "SIGTERM" in worker.output())
    assert worker.proc.poll() is None
    release.touch()
    assert worker.wait() == 0, worker.output()
    done = backend.get_result(result.id)
    assert (done.status, done.return_value) == (compat.TaskResultStatus.SUCCESSFUL, "released")


def test_two_workers_never_run_a_task_twice(tasks, backend, spawn_worker, tmp_path):
    log = tmp_path / "ran"
    workers = [
        spawn_worker("--queue-name", "default", "--concurrency", "2", "--interval", "0.02")
        for _ in range(2)
    ]
    for worker in workers:
        worker.wait_ready()
    count = 200
    with transaction.atomic():
        results = [tasks.record.enqueue(str(log), n) for n in range(count)]
    wait_for(lambda: Job.objects.completed().count() == count, timeout=90)
    for worker in workers:
        worker.signal(signal.SIGTERM)
    for worker in workers:
        assert worker.wait() == 0, worker.output()
    ran = sorted(int(line.split()[0]) for line in log.read_text().splitlines())
    assert ran == list(range(count))
    assert {backend.get_result(r.id).attempts for r in results[:: count // 10]} == {1}
    assert not Job.objects.exclude(status=JobStatus.COMPLETED).exists()


@pytest.mark.usefixtures("backend")
def test_verbose_workers_print_the_frameworks_lifecycle_lines(tasks, spawn_worker):
    ok, failing = tasks.add.enqueue(1, 2), tasks.fail.enqueue("boom")
    outputs = {}
    for verbosity in ("1", "2", "3"):
        worker = spawn_worker("--batch", "--queue-name", "*", "-v", verbosity)
        assert worker.wait() == 0, worker.output()
        outputs[verbosity] = worker.output()
        for result in (ok, failing):  # run again by the next worker
            Job.objects.filter(uuid=result.id).update(status="pending", attempts=0)
    for verbosity in ("2", "3"):
        output = outputs[verbosity]
        for result, path, final in [
            (ok, "tests.testapp.tasks.add", "SUCCESSFUL"),
            (failing, "tests.testapp.tasks.fail", "FAILED"),
        ]:
            assert f"Task id={result.id} path={path} state=RUNNING" in output, output
            assert f"Task id={result.id} path={path} state={final}" in output, output
    # The default verbosity leaves them to the project's LOGGING (none here, so at most
    # Python's last-resort handler shows a FAILED line, logged as an error).
    assert "state=RUNNING" not in outputs["1"]
    assert "state=SUCCESSFUL" not in outputs["1"]


def test_a_forced_stop_fails_the_running_task_at_once(tasks, backend, spawn_worker, tmp_path):
    started, release = tmp_path / "started", tmp_path / "release"
    result = tasks.wait_for_file.enqueue(str(started), str(release))
    worker = spawn_worker("--queue-name", "default", "--worker-id", "w-forced", "-v", "2")
    wait_for(started.exists)
    worker.signal(signal.SIGINT)
    wait_for(lambda: "SIGINT" in worker.output())
    worker.signal(signal.SIGINT)
    assert worker.wait() == 1, worker.output()
    # One attempt (the framework's default): FAILED now, not when the lease runs out.
    failed = backend.get_result(result.id)
    assert failed.status == compat.TaskResultStatus.FAILED
    assert failed.finished_at is not None
    assert failed.worker_ids == ["w-forced"]
    [error] = failed.errors
    assert error.exception_class_path == "django_sqlq.exceptions.JobInterruptedError"
    assert "interrupted by a forced stop of worker w-forced" in error.traceback
    # task_finished was sent: the framework's FAILED line is in the worker's output, with no
    # traceback of the worker's own forced stop attached.
    assert f"Task id={result.id} path={tasks.wait_for_file.module_path} state=FAILED" in (
        worker.output()
    )
    assert "ForcedStop" not in worker.output()


@pytest.mark.usefixtures("tasks")
def test_every_status_has_a_task_status() -> None:
    from django_sqlq import statuses
    from django_sqlq.backend import STATUSES

    assert JobStatus.values == list(statuses.ALL)
    assert set(STATUSES) == set(statuses.ALL)
