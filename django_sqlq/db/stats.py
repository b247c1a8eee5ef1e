"""Engine-specific pieces of the admin dashboard's statistics.

Django's ``Trunc*`` functions are native on PostgreSQL, but on SQLite they call a Python
function for every row: counting a busy day of finished jobs per minute took seconds. SQLite
stores datetimes as UTC text (``YYYY-MM-DD HH:MM:SS[.ffffff]``), so the minute is the text's
first 16 characters, cut by SQLite's own ``substr``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.db import connections
from django.db.models import BooleanField, F, Func
from django.db.models.expressions import RawSQL
from django.db.models.functions import Substr, TruncMinute

from django_sqlq import statuses
from django_sqlq.db.dialect import any_status_sql

#: The condition of ``sqlq_job_finished_idx``, word for word as its migration wrote it
#: (the pruner's statements repeat it too): SQLite's planner uses a partial index only for a
#: query whose WHERE clause holds the index's condition itself, with literals, not
#: parameters; PostgreSQL proves it either way.
FINISHED_SQL = any_status_sql(statuses.FINISHED)


def finished() -> RawSQL:
    """A filter on the finished rows that lets both engines read ``sqlq_job_finished_idx``
    (``Job.objects.filter(finished(), ...)``)."""
    return RawSQL(FINISHED_SQL, (), output_field=BooleanField())  # noqa: S611 (a constant)


def finished_minute(alias: str) -> Func:
    """An expression for the UTC minute in which a job finished (``completed_at``)."""
    if connections[alias].vendor == "sqlite":
        return Substr(F("completed_at"), 1, 16)
    return TruncMinute("completed_at", tzinfo=UTC)


def as_minute(value: Any) -> datetime:
    """The value of :func:`finished_minute` as an aware UTC datetime."""
    if isinstance(value, str):
        return datetime.strptime(value[:16], "%Y-%m-%d %H:%M").replace(tzinfo=UTC)
    return value.astimezone(UTC).replace(second=0, microsecond=0)  # type: ignore[no-any-return]
