"""The ``@handler`` decorator: registers a job handler (:mod:`django_sqlq.registry`) and,
with ``cron=``, declares its recurring job (:mod:`django_sqlq.schedules`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar, overload

from django_sqlq import registry, schedules

F = TypeVar("F", bound=Callable[..., Any])


@overload
def handler(name: F) -> F: ...
@overload
def handler(
    name: str | None = None,
    *,
    timeout: float | None = None,
    takes_context: bool = False,
    cron: str | Mapping[str, Any] | None = None,
    atomic: bool = False,
) -> Callable[[F], F]: ...


def handler(
    name: Any = None,
    *,
    timeout: float | None = None,
    takes_context: bool = False,
    cron: str | Mapping[str, Any] | None = None,
    atomic: bool = False,
) -> Any:
    """Register a job handler.

    ``@handler("send_email")`` names it; ``@handler()`` (or bare ``@handler``) names it by its
    dotted path. ``timeout`` (seconds) is the default per-job time limit for this type.
    ``takes_context=True`` passes a :class:`~django_sqlq.jobcontext.JobContext` (job id,
    attempt...) after the payload. ``cron``: also run it on a schedule (a recurring job
    named after the job type): a cron expression, or a dict with ``cron`` and the other keys
    of a ``SQLQ["SCHEDULE"]`` entry (``name``, ``payload``, ``queue``, ``priority``,
    ``timezone``, ``missed``). A bad expression raises ConfigurationError here.
    ``atomic=True``: run the handler inside a transaction on the queue database that also
    records the job's completion, so its writes to that database and its completion commit
    together or not at all (synchronous handlers only; see docs/howto/atomic-handlers.md).
    The function is returned unchanged.
    """
    if callable(name):
        registry.register(name)
        return name

    def decorator(func: F) -> F:
        spec = registry.register(
            func, name, timeout=timeout, takes_context=takes_context, atomic=atomic
        )
        if cron is not None:
            schedules.declare(schedules.from_decorator(spec.name, cron, source="@handler"))
        return func

    return decorator
