"""A django-tasks-db project's ``prune_db_task_results`` cron line, renamed to
``sqlq_prune``, in the switched project's own process (tests/switcher/, as
tests/tasks_backend/test_switcher.py runs it). Both engines."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import timedelta

import pytest
from django.utils import timezone

from django_sqlq import compat
from django_sqlq.models import Job
from tests.conftest import ROOT

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_cron_line_only_changes_the_command_name(worker_env: dict[str, str]) -> None:
    if not compat.AVAILABLE:
        pytest.skip("neither django.tasks (Django 6+) nor the django_tasks backport is installed")

    def manage(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "django", *args],
            cwd=ROOT,
            env={**worker_env, "DJANGO_SETTINGS_MODULE": "tests.switcher.settings"},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    code = (
        "rs = [tasks.add.enqueue(1, 2), tasks.send_email.enqueue('a@example.com', subject='x'),"
        " tasks.fail.enqueue('boom'), tasks.add.enqueue(3, 4)]\n"
        "call_command('sqlq_worker', batch=True, interval=0, queue_name='*')\n"
        "print(json.dumps([r.id for r in rs]))"
    )
    done = subprocess.run(
        [sys.executable, "-m", "tests.switcher.project", code],
        cwd=ROOT,
        env={**worker_env, "DJANGO_SETTINGS_MODULE": "tests.switcher.settings"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    ids = json.loads(done.stdout.strip().splitlines()[-1])
    assert Job.objects.count() == 4
    # Three of them finished 20 days ago; the last one yesterday.
    old = timezone.now() - timedelta(days=20)
    Job.objects.exclude(uuid=ids[3]).update(completed_at=old)
    Job.objects.filter(uuid=ids[3]).update(completed_at=timezone.now() - timedelta(days=1))

    line = ["--backend", "default", "--queue-name", "*", "--min-age-days", "14"]
    out = manage("sqlq_prune", *line, "--failed-min-age-days", "30", "--dry-run")
    assert "Would delete 2 finished job(s)." in out  # the failure is kept 30 days
    assert Job.objects.count() == 4
    out = manage("sqlq_prune", *line)
    assert "Deleted 3 finished job(s)" in out
    assert [str(u) for u in Job.objects.values_list("uuid", flat=True)] == [ids[3]]
