"""Defects found by trying the switch from django-tasks-db (and the docs) as a user would.

Each test here reproduces one such defect, on both engines.
"""

from __future__ import annotations

import datetime as dt
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.test import override_settings
from django.utils import timezone

from django_sqlq import enqueue
from django_sqlq.models import Job, JobStatus
from django_sqlq.worker import Worker, WorkerError
from tests.conftest import WorkerProcess, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

# Worker ids that no engine can store in locked_by (a varchar(255)): PostgreSQL refused them
# at every claim, so a --burst worker retried for ever instead of exiting.
BAD_WORKER_IDS = ["x" * 256, "a\x00b", "a\ud800b", "   "]


@pytest.mark.parametrize("worker_id", BAD_WORKER_IDS, ids=["long", "nul", "surrogate", "blank"])
def test_sqlq_worker_refuses_a_worker_id_it_cannot_store(worker_id: str) -> None:
    job = enqueue("tests.testapp.jobs.noop", {})
    with pytest.raises(CommandError, match="--worker-id"):
        call_command("sqlq_worker", batch=True, worker_id=worker_id, verbosity=0)
    with pytest.raises(ValueError, match="worker id"):
        Worker(worker_id=worker_id)
    job.refresh_from_db()
    assert job.status == JobStatus.PENDING
    assert job.attempts == 0


def test_worker_id_leaves_room_for_the_process_suffix() -> None:
    # With --processes N, process i is "<ID>-<i>": that name must fit too.
    with pytest.raises(CommandError, match="--worker-id"):
        call_command("sqlq_worker", burst=True, processes=2, worker_id="w" * 254, verbosity=0)


def test_a_burst_worker_with_a_long_worker_id_exits_at_once(
    spawn_worker: Callable[..., WorkerProcess],
) -> None:
    enqueue("tests.testapp.jobs.noop", {})
    worker = spawn_worker("--burst", "--worker-id", "x" * 300)
    assert worker.wait() == 2
    assert "--worker-id" in worker.output()
    assert Job.objects.get().status == JobStatus.PENDING


def test_the_longest_worker_id_works(spawn_worker: Callable[..., WorkerProcess]) -> None:
    job = enqueue("tests.testapp.jobs.noop", {})
    worker = spawn_worker("--burst", "--worker-id", "x" * 255)
    assert worker.wait() == 0, worker.output()
    job.refresh_from_db()
    assert job.status == JobStatus.COMPLETED
    assert job.locked_by in ("", "x" * 255)


LOCAL_ZONE = "America/New_York"  # behind UTC: a time misread as UTC is hours off


def test_aware_run_at_and_run_after_without_use_tz(
    spawn_worker: Callable[..., WorkerProcess],
) -> None:
    """USE_TZ = False: Django's tasks framework accepts an aware run_after (it requires one
    only under USE_TZ), and so does enqueue(run_at=). SQLite refused to store them (a bare
    ValueError from the database adapter); both are stored as naive local time."""
    from django_sqlq import compat

    with override_settings(USE_TZ=False, TIME_ZONE=LOCAL_ZONE):
        past = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1)
        future = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
        due = enqueue("tests.noop", run_at=past)
        later = enqueue("tests.noop", run_at=future)
        assert Job.objects.get(pk=later.pk).scheduled_at == timezone.make_naive(future)
        results = []
        if compat.AVAILABLE:
            from tests.testapp import tasks

            results = [
                tasks.add.using(run_after=past).enqueue(1, 2),
                tasks.add.using(run_after=future).enqueue(3, 4),
            ]
            # Read back as enqueued (aware), as the framework's backends do.
            assert tasks.add.get_result(results[1].id) == results[1]
        worker = spawn_worker("--burst", env={"SQLQ_TEST_LOCAL_TIME_ZONE": LOCAL_ZONE})
        assert worker.wait(60) == 0, worker.output()
        assert Job.objects.get(pk=due.pk).status == JobStatus.COMPLETED
        assert Job.objects.get(pk=later.pk).status == JobStatus.SCHEDULED
        if results:
            statuses = [r.task.get_backend().get_result(r.id).status for r in results]
            assert statuses == [compat.TaskResultStatus.SUCCESSFUL, compat.TaskResultStatus.READY]


def test_each_call_command_prints_on_its_own_stdout(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests call the command several times in one process, each with its own stdout. The
    log handler the first call added kept writing on the first call's stdout: the next
    calls' output had no job lines (and, the first stdout closed, logging errors)."""
    import io
    import logging

    from django_sqlq import compat

    # A project without LOGGING for these loggers (pytest's root handler aside).
    for name in ("", "django_sqlq", compat.LOGGER_NAME):
        monkeypatch.setattr(logging.getLogger(name), "handlers", [])
    for _ in range(3):
        enqueue("tests.noop", {})
        if compat.AVAILABLE:
            from tests.testapp import tasks

            tasks.add.enqueue(1, 2)
        out = io.StringIO()
        call_command("sqlq_worker", batch=True, verbosity=2, stdout=out)
        assert "type=tests.noop completed" in out.getvalue()
        if compat.AVAILABLE:
            assert "state=SUCCESSFUL" in out.getvalue()
        out.close()


@pytest.mark.django_db(transaction=False)
def test_sqlq_worker_inside_the_tests_transaction_is_a_clear_error() -> None:
    """django-tasks-db users call the worker from their tests, as db_worker ran in the test's
    own thread: call_command("db_worker", batch=True) inside a TestCase. sqlq_worker's threads
    use their own connections, which cannot see the test's uncommitted jobs: on SQLite the
    burst worker waited on the test's write lock for ever, on PostgreSQL it found nothing and
    then closed the test's connection. Now: a clear error naming the way out, and the test's
    connection still usable."""
    job = enqueue("tests.noop", {})
    with pytest.raises(CommandError, match="run_jobs"):
        call_command(
            "sqlq_worker", batch=True, interval=0, startup_delay=False, queue_name="*",
            max_tasks=5, worker_id="w1", verbosity=0,
        )  # fmt: skip
    with pytest.raises(WorkerError, match="inside a transaction"):
        Worker().run(burst=True, install_signal_handlers=False)
    job.refresh_from_db()
    assert job.status == JobStatus.PENDING


# -- what django-tasks-db's own test suite, run against SQLQBackend, found (issue 26) ----------


def _tasks() -> Any:
    from django_sqlq import compat

    if not compat.AVAILABLE:
        pytest.skip("neither django.tasks (Django 6+) nor the django_tasks backport is installed")
    from tests.testapp import tasks

    return tasks


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stop_signal_while_the_worker_starts_is_a_graceful_stop(
    spawn_worker: Callable[..., WorkerProcess], tmp_path: Path, sig: int
) -> None:
    """A process manager may stop a worker that has not finished starting (a deploy right
    after a deploy). Its handlers were installed only once the worker ran, after Django's
    system checks and the migrations check: a signal before that ended the process by the
    signal (exit -15), which systemd and supervisord report as a failure."""
    job = enqueue("tests.noop", {})
    starting = tmp_path / "starting"
    worker = spawn_worker(env={"SQLQ_TEST_SLOW_START": str(starting)})
    wait_for(starting.exists)  # in the system checks: the command has started, its worker not
    worker.signal(sig)
    assert worker.wait() == 0, worker.output()
    name = signal.Signals(sig).name
    assert f"received {name} while starting: stopped gracefully" in worker.output()
    assert " ready" not in worker.output()
    job.refresh_from_db()
    assert (job.status, job.attempts) == (JobStatus.PENDING, 0)


def test_backend_naming_another_kind_of_backend_is_an_error(tmp_path: Path) -> None:
    """db_worker refuses ``--backend dummy`` on the command line ("is not a database
    backend"); only through call_command, which skips argparse's type=, did it start and
    serve nothing. sqlq_worker refuses it either way: a worker that can never run anything
    is a mistake to report, not a configuration to honour."""
    from django.conf import settings

    from django_sqlq import compat

    tasks = _tasks()
    dummy = {"BACKEND": f"{compat.FRAMEWORK}.backends.dummy.DummyBackend"}
    with override_settings(TASKS={**settings.TASKS, "dummy": dummy}):
        result = tasks.record.enqueue(str(tmp_path / "ran"), 1)
        with pytest.raises(CommandError, match=r"not django_sqlq\.backend\.SQLQBackend"):
            call_command("sqlq_worker", batch=True, backend_name="dummy", verbosity=0)
        with pytest.raises(CommandError, match=r"not django_sqlq\.backend\.SQLQBackend"):
            call_command("sqlq_worker", "--batch", "--backend", "dummy", verbosity=0)
    assert Job.objects.get(uuid=result.id).status == JobStatus.PENDING


def test_a_result_id_is_the_jobs_uuid_not_its_primary_key() -> None:
    """django-tasks-db's tests read the row with ``DBTaskResult.objects.get(id=result.id)``:
    there the primary key is the result id. A Job's primary key is an integer (the claim's
    order and the index's size depend on it); the result id is its ``uuid``. Looking a
    result id up as the primary key is a clear error, not a wrong row."""
    tasks = _tasks()
    result = tasks.add.enqueue(1, 2)
    job = Job.objects.get(uuid=result.id)
    assert str(job.uuid) == result.id
    assert isinstance(job.pk, int)
    with pytest.raises(ValueError, match="expected a number"):
        Job.objects.get(id=result.id)
    assert tasks.add.get_result(result.id).id == result.id  # the framework's way, unchanged
