"""Mistakes a user makes (issue 26), caught where they are made, each with a message that
says what to do: a typo in a job type at enqueue(), a renamed handler or @task with jobs
still queued, an upgrade without ``migrate``, a typo in a queue name given to
``sqlq_queue``, and the wording of settings errors, ``--version`` and the worker's summary."""

from __future__ import annotations

import io
import logging
import os
import subprocess
import time
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.test import override_settings

import django_sqlq
from django_sqlq import bulk_enqueue, compat, enqueue, registry, schema
from django_sqlq.conf import get_settings
from django_sqlq.exceptions import (
    ConfigurationError,
    InvalidJobError,
    UnknownHandlerError,
    UnknownJobTypeError,
)
from django_sqlq.models import Job, JobStatus, Queue, WorkerProcess
from django_sqlq.testing import run_jobs
from django_sqlq.worker import Worker, WorkerError
from tests.conftest import ROOT, run_burst
from tests.forking import run_python
from tests.testapp import adversary_workflow_jobs  # noqa: F401 (registers advwf.*)

db = pytest.mark.django_db


def sqlq(**changes: Any) -> dict[str, Any]:
    from django.conf import settings

    return {**settings.SQLQ, **changes}


# -- a typo in a job type ------------------------------------------------------------------


@db
def test_a_typo_in_a_job_type_is_refused_at_enqueue_naming_the_close_name() -> None:
    with pytest.raises(UnknownJobTypeError) as raised:
        enqueue("tests.nop", {"order": 1})
    message = str(raised.value)
    assert "Unknown job type 'tests.nop'" in message
    assert "Did you mean 'tests.noop'?" in message
    assert "SQLQ['CHECK_TYPES'] = False" in message
    # Both what enqueue() raised for bad input before and what an unknown handler is.
    assert isinstance(raised.value, InvalidJobError)
    assert isinstance(raised.value, ValueError)
    assert isinstance(raised.value, UnknownHandlerError)
    assert isinstance(raised.value, LookupError)
    with pytest.raises(UnknownJobTypeError, match=r"Did you mean 'tests\.echo'"):
        bulk_enqueue("tests.ecoh", [{}, {}])
    assert not Job.objects.exists()


@db
def test_a_name_close_to_nothing_is_refused_without_a_guess() -> None:
    with pytest.raises(UnknownJobTypeError) as raised:
        enqueue("shop.send_order_confirmaton")
    assert "Did you mean" not in str(raised.value)
    assert not Job.objects.exists()


@db
def test_a_typo_in_a_module_path_suggests_the_function_in_the_right_module() -> None:
    with pytest.raises(UnknownJobTypeError, match=r"Did you mean 'tests\.testapp\.jobs\.noop'"):
        enqueue("tests.testapp.jbos.noop")


@db
def test_every_kind_of_known_target_is_accepted() -> None:
    from tests.testapp import jobs

    enqueue("tests.noop")  # a registered name
    enqueue("tests.testapp.jobs.noop")  # the dotted path of a named handler
    enqueue(jobs.noop)  # the function
    bulk_enqueue("tests.echo", [{}])
    assert Job.objects.count() == 4
    assert set(Job.objects.values_list("type", flat=True)) == {"tests.noop", "tests.echo"}


@db
def test_a_task_path_is_never_refused() -> None:
    if not compat.AVAILABLE:
        pytest.skip("no tasks framework installed")
    from tests.testapp import tasks

    enqueue("tests.testapp.tasks.add", {"args": [1, 2], "kwargs": {}})
    result = tasks.add.enqueue(2, 3)  # through the tasks backend
    assert Job.objects.count() == 2
    assert result.id
    with pytest.raises(UnknownJobTypeError, match=r"Did you mean 'tests\.testapp\.tasks\.add'"):
        enqueue("tests.testapp.tasks.ad")


@db
def test_a_handler_registered_in_a_test_module_is_known() -> None:
    def local(payload: Any) -> None:  # noqa: ARG001 (a handler)
        return None

    registry.register(local, "tests.mistakes.local")
    try:
        job = enqueue("tests.mistakes.local")
        assert run_jobs().completed == 1
        job.refresh_from_db()
        assert job.status == JobStatus.COMPLETED
    finally:
        registry.unregister("tests.mistakes.local")
    with pytest.raises(UnknownJobTypeError):
        enqueue("tests.mistakes.local")


@db
def test_check_types_off_accepts_any_name_for_producers_without_the_handlers() -> None:
    with override_settings(SQLQ=sqlq(CHECK_TYPES=False)):
        job = enqueue("billing.charge_card", {"id": 1})
        jobs = bulk_enqueue("billing.charge_card", [{}, {}])
    assert job.pk is not None
    assert len(jobs) == 2
    with (
        override_settings(SQLQ=sqlq(CHECK_TYPES="no")),
        pytest.raises(
            ConfigurationError, match=r"SQLQ\['CHECK_TYPES'\] must be True or False, got 'no'"
        ),
    ):
        get_settings()


def test_the_first_unknown_name_imports_every_apps_jobs_py_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[str] = []
    monkeypatch.setattr(registry, "_discovered", False)
    monkeypatch.setattr(registry, "autodiscover_modules", lambda name: calls.append(name))
    import tests.testapp.jobs  # noqa: F401 (registers tests.noop, as a worker's start would)
    from django_sqlq import compat

    registry.check_known("tests.noop")  # known: nothing to import
    assert calls == []
    for _ in range(3):
        with pytest.raises(UnknownJobTypeError):
            registry.check_known("nobody.knows.me")
    # Each app's jobs.py (and tasks.py, where @task functions live, with the tasks framework).
    assert calls == (["jobs", "tasks"] if compat.AVAILABLE else ["jobs"])


@pytest.mark.django_db(transaction=True)
def test_continue_with_a_typo_fails_the_step_that_asked() -> None:
    """A chain's next step is checked as enqueue() checks it: the handler that asked for a
    typo fails (and is retried), naming the close name, instead of writing a step no
    worker can run."""
    first = enqueue("advwf.continue_into", {"target": "tests.nop"}, max_attempts=1)
    run_burst(queues=["default"])
    first.refresh_from_db()
    assert first.status == JobStatus.FAILED
    assert "Did you mean 'tests.noop'?" in first.last_error
    assert Job.objects.count() == 1


# -- what the worker says about a job whose type nothing answers to --------------------------


@pytest.mark.django_db(transaction=True)
def test_the_worker_names_the_close_type_of_a_job_nothing_answers_to() -> None:
    with override_settings(SQLQ=sqlq(CHECK_TYPES=False)):
        job = enqueue("tests.nop", max_attempts=1)
    run_burst()
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED
    assert "No handler is registered for job type 'tests.nop'. Did you mean 'tests.noop'?" in (
        job.last_error
    )


@pytest.mark.django_db(transaction=True)
def test_a_renamed_task_with_jobs_still_queued_gets_advice_for_a_rename() -> None:
    if not compat.AVAILABLE:
        pytest.skip("no tasks framework installed")
    from tests.testapp import tasks

    result = tasks.add.enqueue(1, 2)
    # The task was renamed after this job was enqueued: its row carries the old path.
    Job.objects.filter(uuid=result.id).update(type="tests.testapp.tasks.add_numbers")
    run_burst()
    job = Job.objects.get(uuid=result.id)
    assert job.status == JobStatus.FAILED  # a task has one attempt unless told
    error = job.last_error
    assert "Module tests.testapp.tasks has no @handler or @task named 'add_numbers'" in error
    assert "renamed or moved" in error
    assert "Register one with @handler" not in error


# -- an upgrade without migrate --------------------------------------------------------------


@pytest.fixture
def unmigrated(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The queue database as if django_sqlq had been upgraded without ``migrate``."""
    schema.forget()
    monkeypatch.setattr(
        schema, "unapplied", lambda _alias: ["0009_cancel_progress", "0010_observability"]
    )
    yield
    schema.forget()


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("unmigrated")
def test_the_worker_refuses_to_start_before_migrate() -> None:
    with pytest.raises(WorkerError) as raised:
        Worker().run(burst=True, install_signal_handlers=False)
    message = str(raised.value)
    assert "lacks django_sqlq's migration(s) 0009_cancel_progress, 0010_observability" in message
    assert "run `python manage.py migrate` first" in message
    assert not WorkerProcess.objects.exists()  # refused before it registered


@db
@pytest.mark.usefixtures("unmigrated")
@pytest.mark.parametrize(
    "args",
    [
        ("sqlq_prune",),
        ("sqlq_queue", "status"),
        ("sqlq_queue", "pause", "default"),
        ("sqlq_jobs", "list"),
        ("sqlq_jobs", "retry", "1"),
    ],
)
def test_the_commands_refuse_to_run_before_migrate(args: tuple[str, ...]) -> None:
    with pytest.raises(CommandError, match=r"run `python manage.py migrate` first"):
        call_command(*args, stdout=io.StringIO())
    assert not Queue.objects.exists()


def test_the_migrate_command_names_the_alias_when_it_is_not_default() -> None:
    assert schema.migrate_command("default") == "python manage.py migrate"
    assert schema.migrate_command("queue") == "python manage.py migrate --database=queue"


@db
def test_every_migration_is_applied_in_the_test_database() -> None:
    assert schema.unapplied("default") == []


def manage(database: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings_queue",
        "SQLQ_TEST_QUEUE_DB": database,
        "PYTHONPATH": str(ROOT),
    }
    env.pop("PYTEST_CURRENT_TEST", None)
    return run_python(["-m", "django", *args], env=env, timeout=timeout)


@db
def test_an_upgrade_without_migrate_in_real_processes(fresh_database: str) -> None:
    """A database at 0008: the worker (--burst or not) and sqlq_prune refuse to start naming
    migrate; once the later migrations are faked as applied (the columns still missing),
    a --burst worker exits on the database error instead of retrying it for ever."""
    done = manage(fresh_database, "migrate", "django_sqlq", "0008", "--database", "queue")
    assert done.returncode == 0, done.stdout + done.stderr

    for burst in (["--burst"], []):
        worker = manage(fresh_database, "sqlq_worker", *burst, timeout=60)
        output = worker.stdout + worker.stderr
        assert worker.returncode == 1, output
        assert "lacks django_sqlq's migration(s) 0009_cancel_progress" in output
        assert "python manage.py migrate --database=queue" in output
        assert " ready" not in output
        assert "Traceback" not in output

    prune = manage(fresh_database, "sqlq_prune")
    assert prune.returncode == 1
    assert "python manage.py migrate --database=queue" in prune.stderr
    assert "sqlq_maintenance" not in prune.stderr

    done = manage(fresh_database, "migrate", "django_sqlq", "--fake", "--database", "queue")
    assert done.returncode == 0, done.stdout + done.stderr
    started = time.monotonic()
    worker = manage(fresh_database, "sqlq_worker", "--burst", timeout=60)
    output = worker.stdout + worker.stderr
    assert worker.returncode == 1, output
    assert "a --burst worker does not wait for the database to recover" in output
    assert "Traceback" not in output
    assert time.monotonic() - started < 30


# -- sqlq_queue and queue names nothing knows ------------------------------------------------


@db
def test_sqlq_queue_refuses_a_queue_name_nothing_knows() -> None:
    with pytest.raises(CommandError) as raised:
        call_command("sqlq_queue", "pause", "emial", stdout=io.StringIO())
    message = str(raised.value)
    assert "Unknown queue 'emial': did you mean 'emails'?" in message
    assert "add --new" in message
    assert not Queue.objects.exists()  # nothing paused, nothing left in status
    with pytest.raises(CommandError, match="Unknown queue 'nosuchqueue'"):
        call_command("sqlq_queue", "status", "nosuchqueue", stdout=io.StringIO())
    with pytest.raises(CommandError, match="Unknown queue 'nosuchqueue'"):
        call_command("sqlq_queue", "resume", "nosuchqueue", stdout=io.StringIO())


@db
def test_sqlq_queue_new_names_a_queue_no_worker_serves_yet() -> None:
    out = io.StringIO()
    call_command("sqlq_queue", "pause", "video", "--new", stdout=out)
    assert out.getvalue() == "Queue video paused.\n"
    # Known from now on: its row.
    out = io.StringIO()
    call_command("sqlq_queue", "status", "video", stdout=out)
    assert out.getvalue().splitlines()[1].split()[:2] == ["video", "paused"]
    call_command("sqlq_queue", "resume", "video", stdout=io.StringIO())


@db
def test_sqlq_queue_knows_the_queues_workers_serve_and_jobs_use() -> None:
    WorkerProcess.objects.create(worker_id="w1", hostname="h", pid=1, queues=["imports"])
    Job.objects.create(type="tests.noop", queue="exports")
    out = io.StringIO()
    call_command("sqlq_queue", "pause", "imports", "exports", stdout=out)
    assert out.getvalue() == "Queue imports paused.\nQueue exports paused.\n"


def test_sqlq_queue_help_describes_each_action() -> None:
    from django_sqlq.management.commands.sqlq_queue import Command

    text = Command().create_parser("manage.py", "sqlq_queue").format_help()
    assert "pause: workers on every host stop claiming" in " ".join(text.split())
    assert "--new" in text


# -- settings messages, --version, the summary -----------------------------------------------


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("MAX_ATTEMPTS", 2**31, "between 1 and 2147483647"),
        ("RETRY_BACKOFF_MAX", -1, "between 0 and 3153600000 (100 years)"),
        ("KEEP_FINISHED", -1, "0 to 3153600000 (100 years)) or a timedelta"),
        ("KEEP_FINISHED", "7d", "a dict per finished status"),
    ],
)
def test_settings_errors_print_whole_numbers_and_every_accepted_form(
    key: str, value: Any, expected: str
) -> None:
    with override_settings(SQLQ={key: value}), pytest.raises(ConfigurationError) as raised:
        get_settings()
    assert expected in str(raised.value)
    assert "e+" not in str(raised.value)


def test_the_settings_check_hint_names_no_folder_the_wheel_lacks() -> None:
    from django_sqlq.checks import check_settings

    with override_settings(SQLQ={"MAX_ATTEMPTS": 0}):
        (error,) = check_settings()
    assert error.id == "django_sqlq.E001"
    assert "docs/" not in (error.hint or "")
    assert "Settings page" in (error.hint or "")


@pytest.mark.parametrize("name", ["sqlq_worker", "sqlq_queue", "sqlq_prune", "sqlq_jobs"])
def test_version_is_django_sqlqs(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        call_command(name, "--version")
    assert capsys.readouterr().out.strip() == django_sqlq.__version__


def test_the_summary_line_counts_cancelled_jobs(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from django_sqlq.worker import summary
    from django_sqlq.worker.context import Counts

    counts = Counts(done=3, cancelled=1)
    line = summary.Summary("w1", counts, running={})
    line.start()
    assert line.next_at() is not None
    monkeypatch.setattr(summary, "SUMMARY_INTERVAL", 0.0)
    with caplog.at_level(logging.INFO, logger="django_sqlq.worker"):
        line.log()
    assert "Worker w1: 3 completed, 0 failed, 0 retried, 1 cancelled in" in caplog.text
    # Only a cancel since the last line is a reason for the next one.
    counts.cancelled = 2
    assert line.next_at() is not None
    line.log()
    assert "0 completed, 0 failed, 0 retried, 1 cancelled" in caplog.text.splitlines()[-1]
