"""Retrying the worker's database statements through database trouble: log it, drop the
connection, back off, try again. A lost connection or a lock never turns a job's outcome
into another one. (How a failed *job* is retried is the retry policy's business, not
this module's.)"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from typing import TypeVar

from django.db import DatabaseError, connections

from django_sqlq.db import is_transient
from django_sqlq.worker.context import WorkerContext

logger = logging.getLogger("django_sqlq.worker")

T = TypeVar("T")


def reset_connection(alias: str) -> None:
    with contextlib.suppress(Exception):
        connections[alias].close()


def back_off(context: WorkerContext, what: str, exc: DatabaseError, failures: int) -> float:
    """Log a transient database error, drop the connection; returns seconds to wait."""
    delay = min(5.0, 0.05 * 2.0**failures)
    logger.warning(
        "Worker %s: database error during %s (%s: %s); retrying in %.2fs",
        context.worker_id,
        what,
        type(exc).__name__,
        exc,
        delay,
    )
    reset_connection(context.database)
    return delay


def with_retry(context: WorkerContext, what: str, func: Callable[[], T]) -> T:
    """Run a database write until it succeeds. Gives up only on a non-transient error, or
    at once after a forced stop."""
    failures = 0
    while True:
        try:
            return func()
        except DatabaseError as exc:
            if not is_transient(exc) or context.forced.is_set():
                raise
            failures += 1
            time.sleep(back_off(context, what, exc, failures))
