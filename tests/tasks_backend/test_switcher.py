"""Switching a django-tasks-db project to django_sqlq, tried as its user would.

The project (tests/switcher/) has the settings and tasks written for django-tasks-db, with
``TASKS[...]["QUEUES"] = ["default", "emails"]`` and no ``SQLQ`` setting; only the BACKEND line
changed, and ``db_worker`` became ``sqlq_worker``. It runs in its own processes, under its own
settings: the framework's documented behaviours through ``call_command`` with db_worker's
keyword arguments, and through real worker processes. Both engines; Django 5.2 (the
backport) and 6.x (django.tasks), by the venv the suite runs in.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

from django_sqlq import compat
from django_sqlq.models import Job
from tests.conftest import ROOT, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

SETTINGS = {"DJANGO_SETTINGS_MODULE": "tests.switcher.settings"}


@pytest.fixture
def project(worker_env: dict[str, str]) -> Callable[[str], Any]:
    """Run code in the switched project's own process; returns what it printed, as JSON."""
    if not compat.AVAILABLE:
        pytest.skip("neither django.tasks (Django 6+) nor the django_tasks backport is installed")
    env = {**worker_env, **SETTINGS}

    def run(code: str) -> Any:
        done = subprocess.run(
            [sys.executable, "-m", "tests.switcher.project", code],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        # The answer is the last line printed (a worker's log lines may come before it).
        lines = done.stdout.strip().splitlines()
        try:
            return json.loads(lines[-1]) if lines else None
        except json.JSONDecodeError:
            return None

    return run


def results(ids: list[str]) -> list[Any]:
    backend = compat.task_backends["default"]
    return [backend.get_result(result_id) for result_id in ids]


def test_the_project_checks_clean_and_its_task_queues_decide(project):
    # No second list of queues to keep in step: `check` is clean without SQLQ["QUEUES"].
    assert project("call_command('check'); print(json.dumps('ok'))") == "ok"
    refused = project(
        "errors = []\n"
        "for name in ('reports', ''):\n"
        "    try:\n"
        "        tasks.add.using(queue_name=name)\n"
        "    except Exception as exc:\n"
        "        errors.append(type(exc).__name__)\n"
        "print(json.dumps(errors))"
    )
    assert refused in (["InvalidTask"] * 2, ["InvalidTaskError"] * 2)
    assert not Job.objects.exists()


def test_call_command_with_db_worker_keyword_arguments(project):
    ids = project(
        "from datetime import timedelta\n"
        "from django.utils import timezone\n"
        "rs = [\n"
        "    tasks.add.enqueue(1, 2),\n"
        "    tasks.send_email.enqueue('a@example.com', subject='hi'),\n"
        "    tasks.async_double.enqueue(21),\n"
        "    tasks.fail.enqueue('boom'),\n"
        "    tasks.whoami.enqueue(),\n"
        "    tasks.add.using(run_after=timezone.now() + timedelta(hours=1)).enqueue(5, 5),\n"
        "    tasks.add.using(priority=-5).enqueue(6, 6),\n"
        "]\n"
        "print(json.dumps([r.id for r in rs]))"
    )
    project(
        "call_command('sqlq_worker', batch=True, interval=0, startup_delay=False,\n"
        "             queue_name='*', max_tasks=5, worker_id='w1', backend_name='default')"
    )
    add, email, double, failed, whoami, deferred, low = results(ids)
    assert [r.status for r in (add, email, double, whoami)] == ["SUCCESSFUL"] * 4
    assert (add.return_value, double.return_value) == (3, 42)
    assert email.return_value == {"to": "a@example.com", "subject": "hi"}
    assert whoami.return_value == {"id": whoami.id, "attempt": 1}
    assert failed.status == "FAILED"
    assert [e.exception_class_path for e in failed.errors] == ["builtins.ValueError"]
    assert "boom" in failed.errors[0].traceback
    assert {tuple(r.worker_ids) for r in (add, email, double, failed, whoami)} == {("w1",)}
    # run_after holds a task back; max_tasks=5 left the lowest priority one.
    assert (deferred.status, low.status) == ("READY", "READY")
    # The project reads the same results back, by their UUID ids; nothing else is found.
    seen = project(
        f"from {compat.FRAMEWORK} import default_task_backend as backend\n"
        f"ids = {ids!r}\n"
        "out = [str(backend.get_result(i).status) for i in ids]\n"
        "for bad in ('123', ids[0][:-1]):\n"
        "    try:\n"
        "        backend.get_result(bad)\n"
        "    except Exception as exc:\n"
        "        out.append(type(exc).__name__)\n"
        "print(json.dumps(out))"
    )
    statuses = ["SUCCESSFUL", "SUCCESSFUL", "SUCCESSFUL", "FAILED", "SUCCESSFUL", "READY", "READY"]
    assert [s.rsplit(".", 1)[-1] for s in seen[:7]] == statuses
    assert seen[7:] == ["TaskResultDoesNotExist"] * 2


def test_real_worker_processes_run_the_project_as_db_worker_did(project, spawn_worker, tmp_path):
    started, release = tmp_path / "started", tmp_path / "release"
    log = str(tmp_path / "ran")
    # `sqlq_worker --batch` with no queue option serves "default", as db_worker did...
    first, emails = project(
        f"rs = [tasks.record.enqueue({log!r}, 1), tasks.send_email.enqueue('b@example.com')]\n"
        "print(json.dumps([r.id for r in rs]))"
    )
    plain = spawn_worker("--batch", env=SETTINGS)
    assert plain.wait() == 0, plain.output()
    assert "stopped gracefully" in plain.output()  # what db_worker's last line says too
    assert [r.status for r in results([first, emails])] == ["SUCCESSFUL", "READY"]
    # ... and `--backend default` serves that backend's QUEUES.
    by_backend = spawn_worker("--batch", "--backend", "default", env=SETTINGS)
    assert by_backend.wait() == 0, by_backend.output()
    assert results([emails])[0].status == "SUCCESSFUL"

    # A long-running worker with db_worker's options: RUNNING is visible while a task runs,
    # SIGTERM lets it finish, and -v 2 prints the framework's lifecycle lines.
    worker = spawn_worker(
        "--queue-name", "default,emails", "--interval", "0.05", "--no-startup-delay",
        "--worker-id", "switched", "-v", "2", env=SETTINGS,
    )  # fmt: skip
    worker.wait_ready()
    [waiting] = project(
        f"print(json.dumps([tasks.wait_for_file.enqueue({str(started)!r}, {str(release)!r}).id]))"
    )
    wait_for(started.exists)
    [running] = results([waiting])
    assert (running.status, running.worker_ids) == ("RUNNING", ["switched"])
    worker.signal(signal.SIGTERM)
    wait_for(lambda: "SIGTERM" in worker.output())
    assert worker.proc.poll() is None
    release.touch()
    assert worker.wait() == 0, worker.output()
    assert "Worker switched stopped gracefully: 1 done" in worker.output()
    [done] = results([waiting])
    assert (done.status, done.return_value) == ("SUCCESSFUL", "released")
    path = "tests.switcher.tasks.wait_for_file"
    assert f"Task id={waiting} path={path} state=RUNNING" in worker.output()
    assert f"Task id={waiting} path={path} state=SUCCESSFUL" in worker.output()
