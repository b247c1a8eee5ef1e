"""The retry policy: whether a failed attempt is retried, and after how long.

One place decides it for every path that records a failed attempt (the worker's failure
writer, the in-process runner of ``testing``/inline mode): a job is retried while it has
attempts left (``attempts < max_attempts``), unless it was cancelled or its attempt cannot
be retried (``retry=False``: its result could not be stored); it waits out a backoff
first, exponential (``RETRY_BACKOFF_BASE`` * 2^(attempts-1), capped at
``RETRY_BACKOFF_MAX``, +-25% jitter) or the user's own ``SQLQ["RETRY_BACKOFF"]`` function.
The statement that writes the attempt (``db/outcomes.OutcomeOps.fail``) only applies the
decision, fenced by worker and attempt.

The reaper's retry of an expired lease is not a failed attempt of a handler and has no
backoff: its statement (``db/upkeep.py``) decides it alone.
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Callable
from dataclasses import dataclass

from django_sqlq.conf import Settings, get_settings
from django_sqlq.validation import MAX_DELAY_SECONDS

logger = logging.getLogger("django_sqlq.worker")


def backoff_seconds(
    attempts: int, conf: Settings | None = None, rand: Callable[[], float] = random.random
) -> float:
    """Seconds to wait before attempt ``attempts + 1``: exponential, capped, with jitter.

    ``SQLQ["RETRY_BACKOFF"]`` may name a function ``f(attempts) -> seconds`` instead.
    """
    conf = conf or get_settings()
    if conf.RETRY_BACKOFF != "exponential":
        try:
            custom = conf.backoff_function()
            value = float(custom(attempts)) if custom is not None else math.nan
        except Exception:
            # A policy that cannot be imported, raises or answers what is not a number must
            # not keep the failed attempt from being recorded (the job would wait for its
            # lease and lose its error): the built-in policy stands in, and the log says so.
            logger.exception(
                "SQLQ['RETRY_BACKOFF'] = %r failed for attempts=%d; using the exponential "
                "backoff instead",
                conf.RETRY_BACKOFF,
                attempts,
            )
        else:
            # A policy's answer is bounded as a delay at enqueue is: nothing past 100 years,
            # no NaN (SQLite's date functions would store NULL, PostgreSQL refuses it).
            return min(MAX_DELAY_SECONDS, max(0.0, value)) if not math.isnan(value) else 0.0
    delay = min(conf.RETRY_BACKOFF_MAX, conf.RETRY_BACKOFF_BASE * 2 ** max(attempts - 1, 0))
    # +-25% jitter, so jobs that failed together do not all retry in the same instant.
    return float(min(conf.RETRY_BACKOFF_MAX, delay * (0.75 + 0.5 * rand())))


@dataclass(frozen=True)
class RetryPolicy:
    """Decides a failed attempt. ``backoff(attempts)``: the seconds before the next attempt
    (a ``Worker(backoff=...)`` in tests; by default :func:`backoff_seconds` on the
    settings)."""

    backoff: Callable[[int], float]

    @classmethod
    def from_settings(cls, conf: Settings | None = None) -> RetryPolicy:
        """The policy ``settings.SQLQ`` describes (read at each failure, as settings are)."""
        return cls(lambda attempts: backoff_seconds(attempts, conf))

    def retry_in(
        self, attempts: int, max_attempts: int, *, retry: bool = True, cancel: bool = False
    ) -> float | None:
        """Seconds before attempt ``attempts + 1`` (0: pending at once), or None: no retry
        (its attempts are spent, ``retry=False``, or it was cancelled).
        The backoff is asked only for an attempt that is retried."""
        if cancel or not retry or attempts >= max_attempts:
            return None
        return self.backoff(attempts)
