"""The jobs table's columns: the one list every INSERT writes from, and the claim's row.

Adding a column to ``Job`` takes the model field, its migration and an entry in
:data:`JOB_COLUMNS` (``tests/db/test_db.py`` fails until they agree); a column the worker needs
from the claim is also a field of :class:`ClaimedJob`, whose fields are the claim's
``RETURNING`` list.
"""

from __future__ import annotations

import enum
from typing import Any, Final, NamedTuple


class ClaimedJob(NamedTuple):
    """A job as the claim returns it: its fields are the ``RETURNING`` columns, in order."""

    id: int
    queue: str
    type: str
    payload: Any
    attempts: int
    max_attempts: int
    timeout: float | None
    priority: int
    scheduled_at: Any
    trace: str | None = None  # the enqueuer's trace context (django_sqlq.tracing)
    chain_id: int | None = None  # the chain's first job, for a step of a chain
    chain_index: int | None = None


class New(enum.Enum):
    """What an INSERT writes in a column of a new job; each dialect turns it into SQL
    (``QueueOps.new_value_sql``). A plain string instead is SQL written as is (a constant)."""

    FIELD = "the enqueue option of the column's name, as a parameter"
    FLOAT_FIELD = "the enqueue option of the column's name, as a float parameter"
    PAYLOAD = "the job's payload (JSON)"
    INITIAL_STATUS = "scheduled if scheduled_at is still to come, else pending"
    SCHEDULED_AT = "the run_at given, else now plus the delay given"
    NOW = "the database's clock"
    UUID = "a new time-ordered (version 7) UUID"
    EMPTY_JSON_LIST = "an empty JSON list"


#: Every column of the jobs table, in the model's order, and what an INSERT of a new job
#: writes in it; None: nothing (the id's sequence, or NULL).
JOB_COLUMNS: Final[dict[str, New | str | None]] = {
    "id": None,
    "uuid": New.UUID,
    "queue": New.FIELD,
    "type": New.FIELD,
    "payload": New.PAYLOAD,
    "status": New.INITIAL_STATUS,
    "priority": New.FIELD,
    "attempts": "0",
    "max_attempts": New.FIELD,
    "timeout": New.FLOAT_FIELD,
    "last_error": "''",
    "errors": New.EMPTY_JSON_LIST,
    "scheduled_at": New.SCHEDULED_AT,
    "created_at": New.NOW,
    "updated_at": New.NOW,
    "started_at": None,
    "completed_at": None,
    "locked_by": "''",
    "locked_at": None,
    "lease_expires_at": None,
    "result": None,
    "unique_key": New.FIELD,
    "cancel_requested_at": None,
    "progress": None,
    "progress_message": None,
    "progress_at": None,
    "trace": New.FIELD,
    "chain_id": New.FIELD,
    "chain_index": New.FIELD,
    "blockers_left": None,
    "depends_on": None,
    "dependency_policy": None,
    "waited_on": New.FIELD,
}

#: The columns an INSERT writes, in order.
INSERT_COLUMNS: Final = tuple(name for name, new in JOB_COLUMNS.items() if new is not None)
#: The enqueue options an INSERT takes as parameters, one per column of that name.
FIELD_COLUMNS: Final = tuple(
    name for name, new in JOB_COLUMNS.items() if new in (New.FIELD, New.FLOAT_FIELD)
)
