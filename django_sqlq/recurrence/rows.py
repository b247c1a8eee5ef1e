"""A schedule stored in the database, checked: a ``models.DatabaseSchedule`` row read into
the same ``Schedule`` as the code's, through the same validation (:func:`from_row`), and what
is wrong with one, by field (:func:`stored_errors`: what the model's ``clean()`` reports),
names unique across the code's schedules and the database's. Nothing here imports the
models: they import this module."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import datetime
from typing import Any, Final, Protocol

from django_sqlq import registry, validation
from django_sqlq.conf import get_settings
from django_sqlq.exceptions import ConfigurationError, SQLQError
from django_sqlq.jsoncodec import encode_json
from django_sqlq.recurrence.declared import load
from django_sqlq.recurrence.definition import (
    MAX_NAME_LENGTH,
    Schedule,
    check_cron,
    check_timezone,
    find_task,
    fits,
    on_sqlq,
    parse,
)

STORED: Final = "database"  # a stored schedule's source


class ScheduleRow(Protocol):
    """The fields of a ``models.DatabaseSchedule`` row that are read here (named by this
    shape, not by the model: the models import this module)."""

    name: str
    type: str
    task: str
    cron: str
    timezone: str
    payload: Any
    args: Any
    kwargs: Any
    queue: str
    priority: int | None
    missed: str

    @property
    def created_at(self) -> datetime | None: ...  # None until the row is saved


def from_row(row: ScheduleRow) -> Schedule:
    """The Schedule of a ``DatabaseSchedule`` row, validated as a settings entry is (and
    its queue and payload size as :func:`load`'s). Raises ConfigurationError naming it."""
    entry: dict[str, Any] = {"cron": row.cron, "timezone": row.timezone, "missed": row.missed}
    if row.task:
        entry.update(task=row.task, args=row.args, kwargs=row.kwargs)
    if row.type or not row.task:
        entry.update(type=row.type, payload=row.payload)  # both, or neither: parse() says
    if row.queue:
        entry["queue"] = row.queue
    if row.priority is not None:
        entry["priority"] = row.priority
    schedule = fits(parse(row.name, entry, source=STORED), get_settings())
    return dataclasses.replace(schedule, created_at=row.created_at)


def stored_errors(row: ScheduleRow) -> dict[str, str]:
    """What is wrong with a ``DatabaseSchedule`` row, by field (empty: a worker will run
    it): the name (also one a code schedule uses), the cron, the time zone, a job type
    without a handler or a task path that is not a @task on a django_sqlq backend, a payload
    (or args and kwargs) that is not JSON or too big, a queue that enqueue() refuses."""
    errors: dict[str, str] = {}
    _check(errors, "name", lambda: _check_stored_name(row.name))
    _check(errors, "cron", lambda: check_cron(row.cron))
    _check(errors, "timezone", lambda: check_timezone(row.timezone))
    _target_errors(row, errors)
    _queue_errors(row, errors)
    if not errors:
        _check(errors, "__all__", lambda: from_row(row))
    return errors


def _check(errors: dict[str, str], field: str, test: Callable[[], object]) -> None:
    """Run ``test``; its error (the first per field) goes into ``errors[field]``."""
    try:
        test()
    except (SQLQError, TypeError, ValueError) as exc:  # UnknownHandlerError too
        errors.setdefault(field, str(exc))


def _check_stored_name(name: str) -> None:
    validation.check_name("schedule name", name, max_length=MAX_NAME_LENGTH)
    try:
        code = load()
    except ConfigurationError:
        return  # the code's own error is the checks' (E030) to report
    if name in code:
        raise ConfigurationError(
            f"A schedule named {name!r} is declared in code ({code[name].source}); names "
            "are unique across the settings, the decorators and the database."
        )


def _target_errors(row: ScheduleRow, errors: dict[str, str]) -> None:
    """``type`` xor ``task``, that it runs, and the arguments that go with it."""
    limit = get_settings().MAX_PAYLOAD_BYTES
    if bool(row.type) == bool(row.task):
        errors["type"] = "Give a job type or a task (one of the two)."
    elif row.task:
        _check(errors, "task", lambda: _check_task(row.task))
        if row.payload not in ({}, None):
            errors["payload"] = "A task takes args and kwargs; the payload is for a job type."
        if not isinstance(row.args, list):
            errors["args"] = f"A task's args are a JSON list, got {row.args!r}."
        if not isinstance(row.kwargs, dict):
            errors["kwargs"] = f"A task's kwargs are a JSON object, got {row.kwargs!r}."
        arguments = {"args": row.args, "kwargs": row.kwargs}
        _check(errors, "kwargs", lambda: encode_json(arguments, limit=limit))
    else:
        registry.autodiscover()  # the apps' jobs.py: their handlers
        _check(errors, "type", lambda: registry.get(row.type))
        if row.args not in ([], None) or row.kwargs not in ({}, None):
            errors["args"] = "A job type takes a payload; args and kwargs are for a task."
        _check(errors, "payload", lambda: encode_json(row.payload, limit=limit))


def _queue_errors(row: ScheduleRow, errors: dict[str, str]) -> None:
    """The queue as enqueue() checks it (a job type's: one of ``SQLQ["QUEUES"]``), and the
    priority's range."""
    queues = get_settings().QUEUES
    if row.queue:
        _check(
            errors, "queue", lambda: validation.check_name("queue name", row.queue, max_length=100)
        )
    if row.type and "queue" not in errors and (row.queue or "default") not in queues:
        errors["queue"] = (
            f"Unknown queue {row.queue or 'default'!r}; known: {', '.join(queues)} "
            "(SQLQ['QUEUES'])."
        )
    if row.priority is not None and not -100 <= row.priority <= 100:
        errors["priority"] = f"A priority is from -100 to 100, got {row.priority}."


def _check_task(path: str) -> None:
    """``path`` names a @task on a django_sqlq backend (ConfigurationError if not)."""
    task = find_task(path)
    if task is None:
        raise ConfigurationError(f"{path!r} is not a @task.")
    if not on_sqlq(task):
        raise ConfigurationError(
            f"The task {path!r} uses the tasks backend {task.backend!r}, which is not "
            "django_sqlq's."
        )
