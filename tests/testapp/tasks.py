"""Tasks written for Django's tasks framework only: nothing here knows about django_sqlq.

The settings' TASKS point at django_sqlq's backend, so this module runs on it unchanged.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

try:  # Django 6+
    from django.tasks import TaskContext, task
except ImportError:  # Django 5.2 with the django-tasks backport
    from django_tasks import TaskContext, task  # type: ignore[no-redef]


class TaskFailed(Exception):
    pass


@task
def add(a: int, b: int) -> int:
    return a + b


@task
async def async_add(a: int, b: int) -> int:
    return a + b


@task(queue_name="emails", priority=5)
def echo(*args: Any, **kwargs: Any) -> dict[str, Any]:
    return {"args": list(args), "kwargs": kwargs}


@task
def fail(message: str) -> None:
    raise TaskFailed(message)


@task
def exit_with(kind: str) -> None:
    if kind == "SystemExit":
        sys.exit(3)
    raise KeyboardInterrupt


@task
def unserialisable() -> object:
    return {1, 2, 3}


@task
def record(path: str, n: int) -> int:
    """Append a line to a file, so tests can count how often each task really ran."""
    with Path(path).open("a") as fh:
        fh.write(f"{n} {os.getpid()}\n")
    return n


@task(takes_context=True)
def with_context(context: TaskContext[..., Any], label: str) -> dict[str, Any]:
    result = context.task_result
    return {
        "label": label,
        "attempt": context.attempt,
        "id": result.id,
        "status": str(result.status),
        "worker_ids": result.worker_ids,
    }


@task(takes_context=True, queue_name="reports")
def flaky(context: TaskContext[..., Any], path: str) -> int:
    """Fails on its first attempt, succeeds on the next."""
    with Path(path).open("a") as fh:
        fh.write(f"{context.attempt}\n")
    if context.attempt < 2:
        raise TaskFailed(f"attempt {context.attempt} fails")
    return context.attempt


@task
def wait_for_file(started: str, release: str, max_seconds: float = 30) -> str:
    """Announce the start, then wait until ``release`` exists (or give up)."""
    Path(started).write_text(str(os.getpid()))
    deadline = time.monotonic() + max_seconds
    while not Path(release).exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{release} never appeared")
        time.sleep(0.02)
    return "released"


@task(takes_context=True)
def durable(context: Any, tag: str) -> dict[str, Any]:
    """django_sqlq's durable steps through the tasks framework's context (the backend's
    context has step(), sleep() and wait_for_event())."""
    from tests.testapp.models import Order

    charged = context.step("charge", lambda: Order.objects.create(item=f"{tag} charge").pk)
    context.sleep("nap", 3600)
    return {"charged": charged, "attempt": context.attempt}
