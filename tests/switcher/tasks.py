"""The project's tasks, written for Django's tasks framework: nothing here knows django_sqlq."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

try:  # Django 6+
    from django.tasks import TaskContext, task
except ImportError:  # Django 5.2 with the django-tasks backport
    from django_tasks import TaskContext, task  # type: ignore[no-redef]


@task
def add(a: int, b: int) -> int:
    return a + b


@task(queue_name="emails", priority=10)
def send_email(to: str, subject: str = "") -> dict[str, Any]:
    return {"to": to, "subject": subject}


@task
async def async_double(n: int) -> int:
    return 2 * n


@task
def fail(message: str) -> None:
    raise ValueError(message)


@task(takes_context=True)
def whoami(context: TaskContext[..., Any]) -> dict[str, Any]:
    return {"id": context.task_result.id, "attempt": context.attempt}


@task
def record(path: str, n: int) -> int:
    with Path(path).open("a") as fh:
        fh.write(f"{n}\n")
    return n


@task
def wait_for_file(started: str, release: str) -> str:
    Path(started).write_text("started")
    deadline = time.monotonic() + 30
    while not Path(release).exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    return "released"
