"""Recurring jobs: what is declared, when each schedule ticks, and enqueueing one tick.

Three ways to declare a schedule in code, all read by :func:`load` and validated the same
way (:mod:`~django_sqlq.schedules.declared`):

- ``SQLQ["SCHEDULE"] = {"nightly-report": {"type": "reports.nightly", "cron": "0 3 * * *",
  ...}}``, or with ``"task": "myapp.tasks.nightly"`` (a ``@task`` of Django's tasks
  framework, by dotted path) instead of ``"type"``;
- ``@handler("x", cron="*/5 * * * *")`` (or ``cron={...}``, the same keys as a settings
  entry): a schedule named after the job type unless ``"name"`` is given;
- ``@recurring("0 3 * * *", ...)`` above a ``@task``;

and a fourth, edited at run time: rows of ``models.DatabaseSchedule`` (the admin), read by
:func:`stored` into the same ``Schedule`` (:mod:`~django_sqlq.schedules.database`).

What a schedule is and how one is checked: :mod:`~django_sqlq.schedules.definition`. Which
tick is due and enqueueing it once: :mod:`~django_sqlq.schedules.ticks`.
"""

from django_sqlq.schedules.database import STORED, Stored, from_row, stored, stored_errors
from django_sqlq.schedules.declared import declare, from_decorator, load, recurring, undeclare
from django_sqlq.schedules.definition import (
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
