"""The schedules stored in the database as a worker runs them: the enabled rows of
``models.DatabaseSchedule`` (edited in the admin), each read and checked by
:mod:`~django_sqlq.recurrence.rows`, those it cannot run set apart with the reason."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django_sqlq.exceptions import ConfigurationError
from django_sqlq.models import DatabaseSchedule
from django_sqlq.recurrence.definition import Schedule, check_targets, origin
from django_sqlq.recurrence.rows import STORED, from_row


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
