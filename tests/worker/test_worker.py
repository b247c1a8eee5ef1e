"""The worker, driven in-process: outcomes, retries, priorities, schedules, leases."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from django_sqlq import enqueue
from django_sqlq.models import Job, JobStatus, WorkerProcess
from django_sqlq.worker import Worker
from tests.conftest import run_burst, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def test_success_stores_the_result():
    job = enqueue("tests.add", {"a": 2, "b": 3})
    run_burst()
    job.refresh_from_db()
    assert job.status == JobStatus.COMPLETED
    assert job.result == 5
    assert job.attempts == 1
    assert job.completed_at is not None
    assert job.lease_expires_at is None
    assert job.last_error == ""


def test_async_handler_runs():
    job = enqueue("tests.async_add", {"a": 1, "b": 1})
    run_burst()
    job.refresh_from_db()
    assert (job.status, job.result) == (JobStatus.COMPLETED, 2)


def test_exception_retries_then_fails_with_type_message_and_traceback():
    job = enqueue("tests.boom", {"why": "bad input"}, max_attempts=3)
    run_burst(backoff=lambda _: 0.0)
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED
    assert job.attempts == 3
    assert job.last_error.startswith("tests.testapp.jobs.Boom: it went boom: bad input")
    assert "Traceback (most recent call last)" in job.last_error
    assert 'raise Boom(f"it went boom' in job.last_error
    assert [entry["attempt"] for entry in job.errors] == [1, 2, 3]
    assert all(e["exception_class"] == "tests.testapp.jobs.Boom" for e in job.errors)
    assert job.completed_at is not None


def test_backoff_pushes_the_retry_out_by_the_injected_clock():
    now = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
    job = enqueue("tests.boom", run_at=now - timedelta(seconds=1), max_attempts=3)
    worker = Worker(clock=lambda: now, backoff=lambda attempts: 10.0 * attempts)
    worker.run(burst=True, install_signal_handlers=False)
    job.refresh_from_db()
    assert job.status == JobStatus.SCHEDULED  # out of the claim's index until it is due
    assert job.attempts == 1
    assert job.scheduled_at == now + timedelta(seconds=10)
    # Not runnable yet at "now"; runnable 10 s later, and then retried with a longer wait.
    assert run_burst(clock=lambda: now + timedelta(seconds=9)).jobs_claimed == 0
    later = now + timedelta(seconds=10)
    run_burst(clock=lambda: later, backoff=lambda attempts: 10.0 * attempts)
    job.refresh_from_db()
    assert (job.status, job.attempts) == (JobStatus.SCHEDULED, 2)
    assert job.scheduled_at == later + timedelta(seconds=20)


def test_job_without_handler_fails_naming_the_type_and_worker_goes_on(settings):
    # A producer without the handlers' code enqueues what enqueue() cannot check.
    settings.SQLQ = {**settings.SQLQ, "CHECK_TYPES": False}
    missing = enqueue("nobody.handles.this", max_attempts=1)
    fine = enqueue("tests.noop")
    run_burst()
    missing.refresh_from_db()
    fine.refresh_from_db()
    assert missing.status == JobStatus.FAILED
    assert "nobody.handles.this" in missing.last_error
    assert "UnknownHandlerError" in missing.last_error
    assert fine.status == JobStatus.COMPLETED


def test_dotted_path_to_a_plain_function_is_never_called(settings):
    settings.SQLQ = {**settings.SQLQ, "CHECK_TYPES": False}
    job = enqueue("tests.testapp.jobs.not_a_handler", max_attempts=1)
    run_burst()
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED
    assert "No handler is registered" in job.last_error


def test_result_json_cannot_hold_fails_the_job():
    job = enqueue("tests.unserialisable_result", max_attempts=1)
    run_burst()
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED
    assert "PayloadError" in job.last_error
    assert "return value" in job.last_error


def test_priority_order_then_schedule_then_id(tmp_path):
    log = tmp_path / "ran"
    now = timezone.now()

    def job(name: str, **options: Any) -> Job:
        return enqueue("tests.record", {"n": name, "path": str(log)}, **options)

    job("low", priority=-5)
    job("high_late", priority=10, run_at=now - timedelta(seconds=1))
    job("high_early", priority=10, run_at=now - timedelta(seconds=5))
    job("mid_a")
    job("mid_b")
    run_burst()
    ran = [line.split()[0] for line in log.read_text().splitlines()]
    assert ran == ["high_early", "high_late", "mid_a", "mid_b", "low"]


def test_run_at_and_delay_hold_the_job_back():
    later = enqueue("tests.noop", delay=3600)
    future = enqueue("tests.noop", run_at=timezone.now() + timedelta(days=1))
    now_job = enqueue("tests.noop")
    worker = run_burst()
    assert worker.jobs_claimed == 1
    assert Job.objects.get(pk=now_job.pk).status == JobStatus.COMPLETED
    assert (later.status, future.status) == (JobStatus.SCHEDULED, JobStatus.SCHEDULED)
    assert Job.objects.get(pk=later.pk).status == JobStatus.SCHEDULED
    assert Job.objects.get(pk=future.pk).status == JobStatus.SCHEDULED
    # With a clock a day ahead, both are due.
    run_burst(clock=lambda: timezone.now() + timedelta(days=1, seconds=1))
    assert Job.objects.filter(status=JobStatus.COMPLETED).count() == 3


def test_queue_selection():
    email = enqueue("tests.noop", queue="emails")
    report = enqueue("tests.noop", queue="reports")
    default = enqueue("tests.noop")
    run_burst(queues=["emails"])
    statuses = dict(Job.objects.values_list("id", "status"))
    assert statuses == {
        email.pk: JobStatus.COMPLETED,
        report.pk: JobStatus.PENDING,
        default.pk: JobStatus.PENDING,
    }
    run_burst(queues=["reports", "default"])
    assert set(Job.objects.values_list("status", flat=True)) == {JobStatus.COMPLETED}


def test_max_jobs_stops_after_n():
    for _ in range(5):
        enqueue("tests.noop")
    worker = run_burst(max_jobs=2)
    assert worker.jobs_done == 2
    assert Job.objects.filter(status=JobStatus.PENDING).count() == 3


def test_concurrency_runs_jobs_at_once(tmp_path):
    # Two jobs that each wait for the other to have started: only concurrency 2 finishes them
    # before their max_seconds.
    files = {n: tmp_path / f"started-{n}" for n in (0, 1)}
    for n in (0, 1):
        enqueue(
            "tests.sleep_then_record",
            {"n": n, "started": str(files[n]), "release": str(files[1 - n]),
             "path": str(tmp_path / "log"), "max_seconds": 20},
        )  # fmt: skip
    worker = Worker(concurrency=2)
    thread = threading.Thread(
        target=worker.run, kwargs={"burst": True, "install_signal_handlers": False}
    )
    thread.start()
    wait_for(lambda: all(f.exists() for f in files.values()), timeout=20)
    thread.join(30)
    assert not thread.is_alive()
    assert Job.objects.filter(status=JobStatus.COMPLETED).count() == 2


def test_worker_records_itself():
    enqueue("tests.noop")
    worker = run_burst(worker_id="host:1:test")
    record = WorkerProcess.objects.get(worker_id="host:1:test")
    assert record.stopped_at is not None
    assert record.jobs_done == worker.jobs_done == 1


def test_stop_from_another_thread_lets_the_running_job_finish(tmp_path):
    started, release = tmp_path / "started", tmp_path / "release"
    job = enqueue(
        "tests.sleep_then_record",
        {"n": 1, "started": str(started), "release": str(release), "path": str(tmp_path / "log")},
    )
    queued = enqueue("tests.noop")
    worker = Worker(concurrency=1)
    thread = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False})
    thread.start()
    wait_for(started.exists)
    worker.stop()
    release.touch()
    thread.join(30)
    assert not thread.is_alive()
    assert Job.objects.get(pk=job.pk).status == JobStatus.COMPLETED
    assert Job.objects.get(pk=queued.pk).status == JobStatus.PENDING


def test_command_runs_in_burst_mode():
    job = enqueue("tests.add", {"a": 1, "b": 2})
    call_command("sqlq_worker", burst=True, verbosity=0)
    job.refresh_from_db()
    assert job.result == 3


def test_command_rejects_unknown_queue():
    with pytest.raises(CommandError, match="Unknown queue"):
        call_command("sqlq_worker", "--queue", "nope", "--burst")


def test_takes_context_gets_the_attempt():
    job = enqueue("tests.with_context", queue="emails")
    run_burst(queues=["emails"])
    job.refresh_from_db()
    assert job.result == {"attempt": 1, "job_id": job.pk, "queue": "emails"}


def test_a_second_signal_before_the_loop_stopped_still_forces_the_exit(monkeypatch):
    """The second SIGTERM can arrive before the first has stopped the main loop (the stop is
    set from a helper thread). It must still force the exit, not wait for the running job:
    the worker once did, and hung for as long as the job ran."""
    import os
    import signal

    from django_sqlq import registry

    started, release = threading.Event(), threading.Event()

    def hold(payload: object) -> None:  # noqa: ARG001 (a handler's signature)
        started.set()
        release.wait(30)

    registry.register(hold, "tests.hold_until_released")
    try:
        job = enqueue("tests.hold_until_released")
        worker = Worker(lease_seconds=30)
        # The first signal's stop never reaches the loop: the second one finds it running.
        asked_to_stop = threading.Event()
        monkeypatch.setattr(worker, "stop", asked_to_stop.set)

        def signal_twice() -> None:
            wait_for(started.is_set, 10)
            os.kill(os.getpid(), signal.SIGTERM)
            wait_for(asked_to_stop.is_set, 10)  # the first signal was handled
            os.kill(os.getpid(), signal.SIGTERM)

        threading.Thread(target=signal_twice, daemon=True).start()
        worker.run()
        running_when_stopped = not release.is_set() and started.is_set()
        job.refresh_from_db()
    finally:
        release.set()
        registry.unregister("tests.hold_until_released")
    assert worker.forced
    assert running_when_stopped
    # Its attempt recorded as interrupted, as after any forced stop; not completed by waiting
    # for it (max_attempts 5: pending again).
    assert (job.status, job.attempts, job.locked_by) == (JobStatus.PENDING, 1, "")
    assert job.errors[-1]["exception_class"] == "django_sqlq.exceptions.JobInterruptedError"


def test_a_retry_without_backoff_is_pending_at_once():
    job = enqueue("tests.boom", max_attempts=3)
    run_burst(backoff=lambda _: 0.0)  # each retry is claimed again in the same burst
    job.refresh_from_db()
    assert (job.status, job.attempts) == (JobStatus.FAILED, 3)


def test_migration_0003_schedules_future_pending_jobs():
    import importlib

    from django.apps import apps
    from django.db import connection

    migration = importlib.import_module("django_sqlq.migrations.0003_scheduled_status")
    future = enqueue("tests.noop", delay=3600)
    due = enqueue("tests.noop")
    Job.objects.filter(pk=future.pk).update(status=JobStatus.PENDING)  # as before 0003

    class Editor:
        pass

    editor = Editor()
    editor.connection = connection  # type: ignore[attr-defined]
    migration.schedule_future_jobs(apps, editor)
    statuses = dict(Job.objects.values_list("pk", "status"))
    assert statuses == {future.pk: JobStatus.SCHEDULED, due.pk: JobStatus.PENDING}
    migration.unschedule_jobs(apps, editor)
    assert set(Job.objects.values_list("status", flat=True)) == {JobStatus.PENDING}


def test_enqueue_by_the_dotted_path_of_a_handler_registered_under_a_name():
    # @handler("tests.add") on tests.testapp.jobs.add: the job carries the registered name.
    job = enqueue("tests.testapp.jobs.add", {"a": 1, "b": 2})
    assert job.type == "tests.add"
    run_burst()
    job.refresh_from_db()
    assert (job.status, job.result) == (JobStatus.COMPLETED, 3)


def test_a_job_stored_under_a_handler_dotted_path_runs():
    # Rows written before enqueue() translated the path (or by hand) still find their handler.
    job = Job.objects.create(type="tests.testapp.jobs.add", payload={"a": 2, "b": 2})
    run_burst()
    job.refresh_from_db()
    assert (job.status, job.result) == (JobStatus.COMPLETED, 4)


@pytest.mark.parametrize(("setting", "poll"), [(None, 1.0), (0.25, 1.0), (0.25, 0.1)])
def test_wake_check_interval_sets_an_idle_workers_change_checks(settings, engine, setting, poll):
    """``WAKE_CHECK_INTERVAL``: how often an idle worker checks for other connections'
    commits where the engine has no notifications (SQLite every 2 ms, MariaDB every 10 ms
    by default), never less often than it polls; PostgreSQL waits on LISTEN instead."""
    from django_sqlq.db import ops_for
    from django_sqlq.worker.changes import ChangeWatch

    settings.SQLQ = {**settings.SQLQ, "WAKE_CHECK_INTERVAL": setting}
    worker = Worker(queues=["default"], poll_interval=poll)
    if engine == "postgresql":
        assert ops_for(worker.context.database).change_check_interval(poll) == poll
        return
    watch = ChangeWatch(worker.context)
    default = {"sqlite": 0.002, "mysql": 0.01}[engine]
    assert watch.interval == (default if setting is None else min(setting, poll))
