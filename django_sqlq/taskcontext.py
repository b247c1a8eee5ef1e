"""The context the tasks backend passes to a ``@task(takes_context=True)`` function."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django_sqlq.compat import TaskContext

if TYPE_CHECKING:
    from django_sqlq.jobcontext import JobContext


@dataclasses.dataclass(frozen=True, kw_only=True)
class SQLQTaskContext(TaskContext):  # type: ignore[misc,type-arg]
    """The ``context`` a ``@task(takes_context=True)`` function gets from this backend: the
    framework's ``TaskContext``, with the durable steps of django_sqlq's ``JobContext``
    (``step()``, ``sleep()``, ``wait_for_event()``)."""

    job_context: JobContext

    def step(self, name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return self.job_context.step(name, fn, *args, **kwargs)

    def sleep(self, name: str, when: float | timedelta | datetime) -> None:
        self.job_context.sleep(name, when)

    def wait_for_event(
        self, name: str, key: str, *, timeout: float | timedelta | datetime | None
    ) -> Any:
        return self.job_context.wait_for_event(name, key, timeout=timeout)
