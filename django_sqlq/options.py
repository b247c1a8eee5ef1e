"""A job's type, payload and options, checked as ``enqueue()`` checks them.

``enqueue()``, ``bulk_enqueue()`` and a chain's next step (``context.continue_with()``) all
check their input here, before anything is written: bad input raises in the caller.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from django_sqlq import registry, validation
from django_sqlq.conf import Settings
from django_sqlq.exceptions import InvalidJobError, UnknownQueueError
from django_sqlq.jsoncodec import encode_json
from django_sqlq.models import PRIORITY_MAX, PRIORITY_MIN

#: What names a job type: a registered name, a dotted path, or the handler itself.
Target = str | Callable[..., Any]


def _validate_int(name: str, value: Any, low: int, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidJobError(f"{name} must be an integer, got {value!r}.")
    if value < low or (high is not None and value > high):
        bounds = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise InvalidJobError(f"{name} must be {bounds}, got {value}.")
    return value


def job_fields(
    conf: Settings,
    type_name: str,
    *,
    queue: str,
    priority: int,
    run_at: datetime | None,
    delay: float | timedelta | None,
    max_attempts: int | None,
    timeout: float | None,
) -> dict[str, Any]:
    """The Job fields the options make. A delay is not a field: it is returned under
    ``_delay_seconds``, to add to the database's clock when the row is written."""
    if not isinstance(queue, str) or queue not in conf.QUEUES:
        raise UnknownQueueError(
            f"Unknown queue {queue!r}. Known queues: {', '.join(conf.QUEUES)} "
            "(add it to SQLQ['QUEUES'])."
        )
    _validate_int("priority", priority, PRIORITY_MIN, PRIORITY_MAX)
    if max_attempts is None:
        max_attempts = conf.MAX_ATTEMPTS
    _validate_int("max_attempts", max_attempts, 1, 2**31 - 1)
    # Only a timeout given here is stored: the handler's own (@handler(timeout=...)) is read
    # by the worker when the job runs, so it holds even where the handler was never imported.
    timeout = validation.check_timeout(timeout)
    fields: dict[str, Any] = {
        "type": type_name,
        "queue": queue,
        "priority": priority,
        "max_attempts": max_attempts,
        "timeout": timeout,
    }
    scheduled = validation.schedule(run_at, delay)
    if isinstance(scheduled, datetime):
        fields["scheduled_at"] = scheduled
    elif scheduled is not None:
        # Added to the database's clock when the row is written, so that web hosts with
        # skewed clocks agree with the workers.
        fields["_delay_seconds"] = scheduled
    return fields


def job_type(conf: Settings, target: Target) -> str:
    """The job type to store for ``target``; with ``SQLQ["CHECK_TYPES"]``, one a handler or
    a @task answers to (UnknownJobTypeError naming the close names otherwise)."""
    type_name = registry.type_name_for(target)
    if conf.CHECK_TYPES:
        registry.check_known(type_name)
    return type_name


def checked_job(
    conf: Settings,
    target: Target,
    payload: Any,
    *,
    queue: str,
    priority: int,
    run_at: datetime | None,
    delay: float | timedelta | None,
    max_attempts: int | None,
    timeout: float | None,
) -> tuple[dict[str, Any], Any, str, float | None]:
    """One job's type, payload and options checked (bad input raises): its fields, its
    payload (``{}`` for None), the payload's JSON text, and the delay to add to the
    database's clock (None: ``fields`` hold ``scheduled_at``, or run now)."""
    type_name = job_type(conf, target)
    if payload is None:
        payload = {}
    encoded = encode_json(payload, limit=conf.MAX_PAYLOAD_BYTES)
    fields = job_fields(
        conf,
        type_name,
        queue=queue,
        priority=priority,
        run_at=run_at,
        delay=delay,
        max_attempts=max_attempts,
        timeout=timeout,
    )
    return fields, payload, encoded, fields.pop("_delay_seconds", None)
