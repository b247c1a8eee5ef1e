"""Schedules stored in the database: rows of ``models.DatabaseSchedule``, edited in the
admin, read into the same ``Schedule`` through the same validation as the code's, their
names unique across both (:func:`stored_errors` is what the model's ``clean()`` reports)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from django_sqlq import registry, validation
from django_sqlq.conf import get_settings
from django_sqlq.exceptions import ConfigurationError, SQLQError
from django_sqlq.jsoncodec import encode_json
from django_sqlq.schedules.declared import load
from django_sqlq.schedules.definition import (
    MAX_NAME_LENGTH,
    Schedule,
    check_cron,
    check_targets,
    check_timezone,
    find_task,
    fits,
    origin,
    parse,
)

if TYPE_CHECKING:
    # Not at the top: the models import this package (DatabaseSchedule.clean()).
    from django_sqlq.models import DatabaseSchedule

STORED: Final = "database"  # a stored schedule's source


def from_row(row: DatabaseSchedule) -> Schedule:
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


def stored_errors(row: DatabaseSchedule) -> dict[str, str]:
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


def _target_errors(row: DatabaseSchedule, errors: dict[str, str]) -> None:
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


def _queue_errors(row: DatabaseSchedule, errors: dict[str, str]) -> None:
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
    # Not at the top: the models import this package (DatabaseSchedule.clean()).
    from django_sqlq.backend import SQLQBackend

    if not isinstance(task.get_backend(), SQLQBackend):
        raise ConfigurationError(
            f"The task {path!r} uses the tasks backend {task.backend!r}, which is not "
            "django_sqlq's."
        )


@dataclass(frozen=True)
class Stored:
    """The enabled rows of ``DatabaseSchedule`` as a worker runs them: ``schedules`` by
    name, and ``errors`` (by name) for the rows it cannot run."""

    schedules: dict[str, Schedule]
    errors: dict[str, str]


def stored(
    *, database: str, code: Mapping[str, Schedule], cache: dict[Any, Schedule | str] | None = None
) -> Stored:
    """Read the enabled ``DatabaseSchedule`` rows (one query) into Schedules. A row that
    does not validate, or whose name a code schedule (``code``) uses, goes into ``errors``
    instead. ``cache`` (by the row's content: see ``_content``) spares parsing unchanged
    rows again."""
    # Not at the top: the models import this package (DatabaseSchedule.clean()).
    from django_sqlq.models import DatabaseSchedule

    found: dict[str, Schedule] = {}
    errors: dict[str, str] = {}
    seen: dict[Any, Schedule | str] = {}
    for row in DatabaseSchedule.objects.using(database).filter(enabled=True):
        key = _content(row)
        parsed = cache.get(key) if cache is not None else None
        if parsed is None:
            parsed = _stored_one(row, code)
        seen[key] = parsed
        if isinstance(parsed, Schedule):
            found[parsed.name] = parsed
        else:
            errors[row.name] = parsed
    if cache is not None:  # only the rows of this read: an edit makes a new key
        cache.clear()
        cache.update(seen)
    return Stored(found, errors)


def _content(row: DatabaseSchedule) -> tuple[Any, str]:
    """A row's id and every field's value: an edit made around save() (``update()``, SQL
    from a shell or a data migration) leaves ``updated_at`` as it was, not the content."""
    values = {f.attname: getattr(row, f.attname) for f in row._meta.concrete_fields}
    return row.pk, json.dumps(values, sort_keys=True, default=str)


def _stored_one(row: DatabaseSchedule, code: Mapping[str, Schedule]) -> Schedule | str:
    if row.name in code:
        return (
            f"{origin(STORED, row.name)}: the name is taken by {code[row.name].source} "
            f"({code[row.name].target!r}), which runs instead; rename this one."
        )
    try:
        schedule = from_row(row)
        check_targets({schedule.name: schedule})
    except ConfigurationError as exc:
        return str(exc)
    return schedule
