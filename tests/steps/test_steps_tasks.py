"""Durable steps through the tasks backend: a ``@task(takes_context=True)`` function gets a
context with ``step()``, ``sleep()`` and ``wait_for_event()`` (tests/testapp/tasks.py)."""

from __future__ import annotations

import importlib
from datetime import timedelta

import pytest
from django.utils import timezone

from django_sqlq import compat
from django_sqlq.testing import run_jobs
from tests.testapp.models import Order

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_task_sleeps_and_replays_its_step_through_the_backends_context():
    if not compat.AVAILABLE:
        pytest.skip("neither django.tasks (Django 6+) nor the django_tasks backport is installed")
    tasks = importlib.import_module("tests.testapp.tasks")
    result = tasks.durable.enqueue(tag="task")
    assert run_jobs().slept == 1
    result.refresh()
    assert str(result.status) in ("READY", "TaskResultStatus.READY")
    run_jobs(now=timezone.now() + timedelta(hours=2))
    result.refresh()
    assert str(result.status) in ("SUCCESSFUL", "TaskResultStatus.SUCCESSFUL")
    charge = Order.objects.get(item="task charge")
    assert result.return_value == {"charged": charge.pk, "attempt": 1}
