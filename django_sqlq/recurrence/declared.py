"""The schedules declared in code: ``SQLQ["SCHEDULE"]``, ``@handler(..., cron=...)`` and
``@recurring`` above a ``@task``; :func:`load` reads them all, by name."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from django_sqlq.conf import get_settings
from django_sqlq.exceptions import ConfigurationError
from django_sqlq.recurrence.definition import (
    DECORATOR_KEYS,
    TASK_DECORATOR_KEYS,
    Schedule,
    fits,
    origin,
    parse,
)

T = TypeVar("T")

_declared: dict[str, Schedule] = {}  # by @handler(cron=) and @recurring
_lock = threading.Lock()


def declare(schedule: Schedule) -> None:
    """Add a decorator's schedule. The same name twice from another target is an error."""
    with _lock:
        existing = _declared.get(schedule.name)
        if existing is not None and existing != schedule:
            raise ConfigurationError(
                f"{origin(schedule.source, schedule.name)} is already declared by "
                f"{existing.source} for {existing.target!r}: give one of them "
                "another 'name'."
            )
        _declared[schedule.name] = schedule


def undeclare(name: str) -> None:
    """Remove a decorator's schedule (for tests)."""
    with _lock:
        _declared.pop(name, None)


def from_decorator(
    target: str, cron: str | Mapping[str, Any], *, source: str, task: bool = False
) -> Schedule:
    """The Schedule of ``@handler(..., cron=...)`` or ``@recurring``."""
    if not isinstance(cron, (str, Mapping)):
        raise ConfigurationError(
            f"{origin(source, target)}: cron= takes a cron expression (a string) or a dict "
            f"of schedule options, got {type(cron).__name__} {cron!r}."
        )
    options: dict[str, Any] = {"cron": cron} if isinstance(cron, str) else dict(cron)
    allowed = TASK_DECORATOR_KEYS if task else DECORATOR_KEYS
    unknown = set(options) - allowed
    name = options.pop("name", target)
    if unknown:
        raise ConfigurationError(
            f"{origin(source, name)}: unknown key(s) {', '.join(sorted(map(str, unknown)))}; "
            f"known: {', '.join(sorted(allowed))}."
        )
    options["task" if task else "type"] = target
    return parse(name, options, source=source)


def recurring(cron: str, **options: Any) -> Callable[[T], T]:
    """Run a ``@task`` of Django's tasks framework on a schedule. Put it above ``@task``::

        @recurring("0 3 * * *", timezone="Europe/Paris")
        @task
        def nightly_report(): ...

    ``options``: ``name`` (default: the task's path), ``args``, ``kwargs``, ``queue``,
    ``priority``, ``timezone``, ``missed``, as in a settings entry.
    """

    def decorator(task: T) -> T:
        path = getattr(task, "module_path", None)
        if not isinstance(path, str):
            raise TypeError(f"@recurring goes above @task, got {task!r}.")
        declare(from_decorator(path, {"cron": cron, **options}, source="@recurring", task=True))
        return task

    return decorator


def load() -> dict[str, Schedule]:
    """Every declared schedule, by name: ``SQLQ["SCHEDULE"]``, then the decorators'.
    Raises ConfigurationError naming the entry at fault."""
    conf = get_settings()
    found: dict[str, Schedule] = {}
    for name, entry in conf.SCHEDULE.items():
        found[name] = fits(parse(name, entry), conf)
    with _lock:
        declared = list(_declared.values())
    for schedule in declared:
        if schedule.name in found:
            raise ConfigurationError(
                f"Two schedules are named {schedule.name!r}: SQLQ['SCHEDULE'] and "
                f"{schedule.source} for {schedule.target!r}. Rename one (decorators take "
                "'name')."
            )
        found[schedule.name] = fits(schedule, conf)
    return found
