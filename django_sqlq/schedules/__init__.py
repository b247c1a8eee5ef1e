"""Recurring jobs: what is declared, when each schedule ticks, and enqueueing one tick.

Three ways to declare a schedule in code, all read by :func:`load` and validated the same
way (:mod:`~django_sqlq.recurrence.declared`):

- ``SQLQ["SCHEDULE"] = {"nightly-report": {"type": "reports.nightly", "cron": "0 3 * * *",
  ...}}``, or with ``"task": "myapp.tasks.nightly"`` (a ``@task`` of Django's tasks
  framework, by dotted path) instead of ``"type"``;
- ``@handler("x", cron="*/5 * * * *")`` (or ``cron={...}``, the same keys as a settings
  entry): a schedule named after the job type unless ``"name"`` is given;
- ``@recurring("0 3 * * *", ...)`` above a ``@task``;

and a fourth, edited at run time: rows of ``models.DatabaseSchedule`` (the admin), checked
by :mod:`~django_sqlq.recurrence.rows` (the model's ``clean()``) and read by :func:`stored`
into the same ``Schedule`` (:mod:`~django_sqlq.schedules.database`).

What a schedule is and how one is checked: :mod:`~django_sqlq.recurrence.definition`, below
the models (which check their rows with it). Which tick is due and enqueueing it once:
:mod:`~django_sqlq.schedules.ticks`. This package names them all.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from django_sqlq.recurrence.declared import declare, from_decorator, load, recurring, undeclare
from django_sqlq.recurrence.definition import (
    MAX_NAME_LENGTH,
    POLICIES,
    RUN_ONCE,
    SKIP,
    Schedule,
    check_cron,
    check_targets,
    check_timezone,
    parse,
)
from django_sqlq.recurrence.rows import STORED, from_row, stored_errors

if TYPE_CHECKING:
    from django_sqlq.schedules.database import Stored, stored
    from django_sqlq.schedules.ticks import (
        KEEP_TICKS,
        LastTick,
        describe,
        due_tick,
        enqueue_job,
        enqueue_tick,
        from_db,
        last_ticks,
        to_db,
        trim,
    )

__all__ = [
    "KEEP_TICKS",
    "MAX_NAME_LENGTH",
    "POLICIES",
    "RUN_ONCE",
    "SKIP",
    "STORED",
    "LastTick",
    "Schedule",
    "Stored",
    "check_cron",
    "check_targets",
    "check_timezone",
    "declare",
    "describe",
    "due_tick",
    "enqueue_job",
    "enqueue_tick",
    "from_db",
    "from_decorator",
    "from_row",
    "last_ticks",
    "load",
    "parse",
    "recurring",
    "stored",
    "stored_errors",
    "to_db",
    "trim",
    "undeclare",
]

# Where the names that need the models live. Those modules are imported on first use of a
# name, so that importing this package (for @recurring in a tasks.py, or @handler(cron=))
# never raises AppRegistryNotReady, as importing django_sqlq itself never does.
_HOMES = {
    **dict.fromkeys(("Stored", "stored"), "django_sqlq.schedules.database"),
    **dict.fromkeys(
        (
            "KEEP_TICKS", "LastTick", "describe", "due_tick", "enqueue_job", "enqueue_tick",
            "from_db", "last_ticks", "to_db", "trim",
        ),
        "django_sqlq.schedules.ticks",
    ),
}  # fmt: skip


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'django_sqlq.schedules' has no attribute {name!r}")
    return getattr(import_module(home), name)
