"""argparse ``type=`` validators of the commands' options: numbers, seconds, queue names,
worker ids, a tasks backend's alias. Each raises ``argparse.ArgumentTypeError`` with the
reason, which argparse prints after the option's name."""

from __future__ import annotations

import argparse
import re

from django_sqlq import compat, statuses, validation
from django_sqlq.exceptions import InvalidJobError
from django_sqlq.limits import parse_queue_option
from django_sqlq.models import PRIORITY_MAX, PRIORITY_MIN
from django_sqlq.validation import MAX_DELAY_SECONDS, MAX_INTERVAL_SECONDS, number_text

MAX_LIMIT = 100_000  # sqlq_jobs list --limit
BIGINT_MAX = 2**63 - 1
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")


def positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {number}")
    return number


# Threads per worker and processes per supervisor: more than this is a typo, not a plan
# (each thread holds a database connection; the server's max_connections comes first).
MAX_WORKERS = 1000


def worker_count(value: str) -> int:
    """--concurrency, --processes: 1 to MAX_WORKERS."""
    number = positive_int(value)
    if number > MAX_WORKERS:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_WORKERS}, got {number}")
    return number


def positive_float(value: str) -> float:
    """Seconds: > 0 and at most a day (validation.MAX_INTERVAL_SECONDS)."""
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number") from None
    if not (number > 0 and number <= MAX_INTERVAL_SECONDS):
        raise argparse.ArgumentTypeError(
            f"must be a number of seconds > 0 and <= "
            f"{number_text(MAX_INTERVAL_SECONDS)}, got {value}"
        )
    return number


def queue_name(value: str) -> str:
    if not value or len(value) > 100:
        raise argparse.ArgumentTypeError("a queue name is 1 to 100 characters")
    try:
        return validation.check_name("queue name", value, max_length=100)
    except InvalidJobError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def queue_option(value: str) -> tuple[str, int | None]:
    """--queue: ``NAME``, or ``NAME:N`` for at most N of this worker's threads on it."""
    try:
        name, most = parse_queue_option(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return queue_name(name), most


def queue_name_list(value: str) -> list[str]:
    """db_worker's --queue-name: a comma-separated list, or ``*`` for every queue."""
    names = [queue_name(name.strip()) for name in value.split(",")]
    if "*" in names and len(names) > 1:
        raise argparse.ArgumentTypeError("'*' (every queue) cannot be combined with names")
    return names


def queue_list(value: str) -> list[str]:
    """db_worker's --exclude-queues: a comma-separated list of queue names."""
    names = [queue_name(name.strip()) for name in value.split(",")]
    if "*" in names:
        raise argparse.ArgumentTypeError("cannot exclude '*'")
    return names


def interval_seconds(value: str) -> float:
    """db_worker's --interval: seconds, zero or more, at most a day."""
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number") from None
    if not (number >= 0 and number <= MAX_INTERVAL_SECONDS):
        raise argparse.ArgumentTypeError(
            f"must be a number of seconds >= 0 and <= "
            f"{number_text(MAX_INTERVAL_SECONDS)}, got {value}"
        )
    return number


def worker_name(value: str) -> str:
    """--worker-id: what locked_by can hold (validation.check_worker_id)."""
    try:
        return validation.check_worker_id(value)
    except InvalidJobError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def tasks_backend(value: str) -> str:
    """db_worker's --backend: the alias of a django_sqlq tasks backend in settings.TASKS."""
    if not compat.AVAILABLE:
        raise argparse.ArgumentTypeError(compat.INSTALL_HINT)
    # Django's tasks framework is optional: the backend module needs it.
    from django_sqlq.backend import SQLQBackend
    from django_sqlq.compat import InvalidTaskBackend, task_backends

    try:
        backend = task_backends[value]
    except InvalidTaskBackend as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if not isinstance(backend, SQLQBackend):
        raise argparse.ArgumentTypeError(
            f"TASKS[{value!r}] is {type(backend).__module__}.{type(backend).__qualname__}, "
            "not django_sqlq.backend.SQLQBackend"
        )
    return value


def job_id(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a job id (a whole number)") from None
    if not 0 < number <= BIGINT_MAX:
        raise argparse.ArgumentTypeError(f"{value!r} is not a job id (1 or more)")
    return number


def status_list(value: str) -> list[str]:
    names = [name.strip().lower() for name in value.split(",") if name.strip()]
    unknown = [name for name in names if name not in statuses.ALL]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"{value!r}: statuses are {', '.join(statuses.ALL)} (repeat --status, or "
            "separate them with commas)"
        )
    return names


def limit_value(value: str) -> int:
    number = positive_int(value)
    if number > MAX_LIMIT:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_LIMIT}, got {number}")
    return number


def priority_value(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None
    if not PRIORITY_MIN <= number <= PRIORITY_MAX:
        raise argparse.ArgumentTypeError(
            f"must be between {PRIORITY_MIN} and {PRIORITY_MAX}, got {number}"
        )
    return number


def duration(value: str) -> float:
    """``--older-than``: seconds ("3600"), or a number and a unit, in any sequence: "7d",
    "12h", "30m", "45s", "2w", "1d12h"."""
    text = value.strip().lower()
    try:
        seconds = float(text)
    except ValueError:
        parts = _DURATION.findall(text)
        if not parts or "".join(n + u for n, u in parts) != text:
            raise argparse.ArgumentTypeError(
                f"{value!r} is not a duration: give seconds (3600) or a number with a unit "
                "s, m, h, d or w (30m, 12h, 7d, 1d12h)"
            ) from None
        seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    if not 0 <= seconds <= MAX_DELAY_SECONDS:
        raise argparse.ArgumentTypeError(
            f"must be between 0 and {number_text(MAX_DELAY_SECONDS)} seconds, got {value!r}"
        )
    return seconds
