"""Bounds at the door: the one place that says which names, times and durations django_sqlq
accepts. ``enqueue``, ``bulk_enqueue``, ``@handler``, the tasks backend, ``settings.SQLQ`` and
``sqlq_worker``'s options all check with these functions, so a value one of them accepts is
one every engine, Python's ``datetime`` and ``threading`` can hold.

Why bounds at all: PostgreSQL stores dates up to the year 294276 but Python's ``datetime``
ends at 9999, so a row dated later can be written and then never read again (the admin's
job list fails on it); ``threading`` refuses waits longer than ``threading.TIMEOUT_MAX``;
SQLite's date functions silently return NULL outside 0000-9999.
"""

from __future__ import annotations

import math
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone

from django_sqlq.exceptions import InvalidJobError

# The furthest a job can be put off (``delay``, retry backoff, ``KEEP_FINISHED``): 100 years.
MAX_DELAY_SECONDS = 100 * 365 * 86400
# ``run_at`` must fall in [RUN_AT_MIN, RUN_AT_MAX): far from the ends of ``datetime``, so
# that converting it to any time zone (the admin does) cannot overflow.
RUN_AT_MIN = datetime(1970, 1, 1, tzinfo=UTC)
RUN_AT_MAX = datetime(9000, 1, 1, tzinfo=UTC)
# A job's timeout: positive, and no longer than a thread can wait.
MAX_TIMEOUT = float(threading.TIMEOUT_MAX)
# The worker's waits (poll interval, lease): at most a day.
MAX_INTERVAL_SECONDS = 86400.0
# A job's unique_key is stored in a varchar(255).
MAX_UNIQUE_KEY = 255
# A worker id is stored in locked_by and sqlq_worker.worker_id (varchar(255)).
MAX_WORKER_ID = 255


def number_text(value: float) -> str:
    """A bound as a person reads it in a message: ``3153600000``, ``86400``, ``0.5``; not
    ``3.1536e+09`` (``f"{x:g}"``); 100 years is named."""
    text = str(int(value)) if float(value).is_integer() else repr(float(value))
    return f"{text} (100 years)" if value == MAX_DELAY_SECONDS else text


def check_name(what: str, value: object, *, max_length: int) -> str:
    """A job type or queue name: a non-empty string of at most ``max_length`` characters
    that every engine can store (no NUL, no lone surrogate: PostgreSQL refuses both)."""
    if not isinstance(value, str) or not value.strip():
        raise InvalidJobError(f"A {what} must be a non-empty string, got {value!r}.")
    if len(value) > max_length:
        raise InvalidJobError(
            f"A {what} is at most {max_length} characters; got one of {len(value)}."
        )
    if "\x00" in value:
        raise InvalidJobError(
            f"A {what} cannot hold a NUL character (\\x00): {value!r}; PostgreSQL refuses it, "
            "and django_sqlq refuses it on every engine."
        )
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidJobError(
            f"A {what} cannot hold a lone surrogate: {value!r} is not valid UTF-8."
        ) from None
    return value


def check_worker_id(value: object) -> str:
    """A worker id (``--worker-id``, ``Worker(worker_id=)``): a name every engine can store
    in ``locked_by``; PostgreSQL refused anything else at every claim, for ever."""
    return check_name("worker id", value, max_length=MAX_WORKER_ID)


def seconds(
    name: str,
    value: Any,
    *,
    maximum: float,
    allow_zero: bool = False,
    error: type[ValueError] = InvalidJobError,
) -> float:
    """A number of seconds: finite, > 0 (>= 0 with ``allow_zero``), at most ``maximum``.
    Raises ``error`` (InvalidJobError unless told) naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise error(f"{name} must be a number of seconds, got {value!r}.")
    number = float(value)
    low_ok = number >= 0 if allow_zero else number > 0
    if not (math.isfinite(number) and low_ok and number <= maximum):
        low = ">= 0" if allow_zero else "> 0"
        raise error(f"{name} must be a finite number of seconds {low} and <= "
                    f"{number_text(maximum)}, got {value!r}.")  # fmt: skip
    return number


def check_timeout(value: Any, *, what: str = "timeout") -> float | None:
    """A job's or handler's timeout: None, or seconds in (0, threading.TIMEOUT_MAX]."""
    if value is None:
        return None
    return seconds(what, value, maximum=MAX_TIMEOUT)


def check_delay(delay: Any) -> float:
    """``delay``: seconds or a timedelta, in [0, MAX_DELAY_SECONDS]."""
    if isinstance(delay, timedelta):
        value: Any = delay.total_seconds()
    elif isinstance(delay, (int, float)) and not isinstance(delay, bool):
        value = delay
    else:
        raise InvalidJobError(f"delay must be seconds or a timedelta, got {delay!r}.")
    if not (math.isfinite(value) and 0 <= value <= MAX_DELAY_SECONDS):
        raise InvalidJobError(
            f"delay must be a finite number of seconds >= 0 and at most {MAX_DELAY_SECONDS} "
            f"(100 years), got {delay!r}."
        )
    return float(value)


def check_run_at(run_at: Any, *, what: str = "run_at") -> datetime:
    """``run_at``: a datetime (aware under USE_TZ; without it naive local time, or aware,
    returned as naive local time) between RUN_AT_MIN and RUN_AT_MAX."""
    if not isinstance(run_at, datetime):
        raise InvalidJobError(f"{what} must be a datetime, got {run_at!r}.")
    if settings.USE_TZ and timezone.is_naive(run_at):
        raise InvalidJobError(
            f"{what} is a naive datetime ({run_at.isoformat()}) while USE_TZ is True; "
            "pass an aware datetime, e.g. timezone.now() + timedelta(...)."
        )
    if timezone.is_aware(run_at):
        try:
            in_range = RUN_AT_MIN <= run_at < RUN_AT_MAX
        except OverflowError:  # pragma: no cover - an offset past the ends of datetime
            in_range = False
    else:
        in_range = RUN_AT_MIN.replace(tzinfo=None) <= run_at < RUN_AT_MAX.replace(tzinfo=None)
    if not in_range:
        raise InvalidJobError(
            f"{what} must be between {RUN_AT_MIN.date()} and {RUN_AT_MAX.date()}, "
            f"got {run_at.isoformat()}."
        )
    if not settings.USE_TZ and timezone.is_aware(run_at):
        # Stored as Django stores times without USE_TZ: naive, in TIME_ZONE (SQLite refuses
        # an aware one; Django's tasks framework accepts one for run_after).
        return timezone.make_naive(run_at)
    return run_at


def schedule(run_at: Any, delay: Any) -> datetime | float | None:
    """When the job may run: None (now), a datetime, or seconds from now (added to the
    database's clock when the row is written, so hosts with skewed clocks agree)."""
    if run_at is not None and delay is not None:
        raise InvalidJobError("Give run_at or delay, not both.")
    if run_at is not None:
        return check_run_at(run_at)
    if delay is not None:
        value = check_delay(delay)
        return value or None
    return None


def check_unique_key(value: object) -> str:
    """A job's ``unique_key``: a string of 1 to MAX_UNIQUE_KEY characters every engine can
    store."""
    if not isinstance(value, str):
        raise InvalidJobError(f"unique_key must be a string, got {_type_and_value(value)}.")
    return check_name("unique_key", value, max_length=MAX_UNIQUE_KEY)


def _type_and_value(value: object) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 60 else text[:57] + '...'}"


def check_unique(unique_key: object, unique_for: object) -> float | None:
    """``unique_for``: None, or a positive timedelta (at most MAX_DELAY_SECONDS) given with a
    ``unique_key``. Returns it in seconds."""
    if unique_for is None:
        return None
    if unique_key is None:
        raise InvalidJobError("unique_for needs a unique_key: it says how long that key stays "
                              "taken after its job finished.")  # fmt: skip
    if not isinstance(unique_for, timedelta):
        raise InvalidJobError(
            f"unique_for must be a timedelta, got {_type_and_value(unique_for)}."
        )
    value = unique_for.total_seconds()
    if not 0 < value <= MAX_DELAY_SECONDS:
        raise InvalidJobError(
            f"unique_for must be a positive timedelta of at most 100 years, got {unique_for!r}."
        )
    return value
