"""How the worker's parts meet database trouble: log it, drop the connection, back off,
try again. A lost connection or a lock never turns a job's outcome into another one."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from django.db import DatabaseError, connections

from django_sqlq.db import is_transient

if TYPE_CHECKING:
    from django_sqlq.worker.core import Worker

logger = logging.getLogger("django_sqlq.worker")

T = TypeVar("T")


def reset_connection(alias: str) -> None:
    with contextlib.suppress(Exception):
        connections[alias].close()


def back_off(worker: Worker, what: str, exc: DatabaseError, failures: int) -> float:
    """Log a transient database error, drop the connection; returns seconds to wait."""
    delay = min(5.0, 0.05 * 2.0**failures)
    logger.warning(
        "Worker %s: database error during %s (%s: %s); retrying in %.2fs",
        worker.worker_id,
        what,
        type(exc).__name__,
        exc,
        delay,
    )
    reset_connection(worker.database)
    return delay


def with_retry(worker: Worker, what: str, func: Callable[[], T]) -> T:
    """Run a database write until it succeeds. Gives up only on a non-transient error, or
    at once after a forced stop."""
    failures = 0
    while True:
        try:
            return func()
        except DatabaseError as exc:
            if not is_transient(exc) or worker.forced:
                raise
            failures += 1
            time.sleep(back_off(worker, what, exc, failures))
