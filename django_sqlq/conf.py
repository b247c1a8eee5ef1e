"""A typed, lazy view of ``settings.SQLQ``.

Nothing is read at import time: every attribute access reads the settings again, so
``override_settings(SQLQ=...)`` in tests takes effect at once.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from types import MappingProxyType
from typing import Any

from django.conf import settings
from django.utils.module_loading import import_string

from django_sqlq import statuses, validation
from django_sqlq.exceptions import ConfigurationError, InvalidJobError
from django_sqlq.limits import QueueLimit, parse_queue_limits

MAX_INTERVAL = validation.MAX_INTERVAL_SECONDS
MAX_DELAY = validation.MAX_DELAY_SECONDS

DEFAULT_SQLITE_PRAGMAS: dict[str, str | int] = {
    # Before journal_mode: it takes effect only on a database without tables (a new one), so
    # that pruned rows' pages can be given back (the pruner's PRAGMA incremental_vacuum).
    "auto_vacuum": "incremental",
    "journal_mode": "wal",
    "busy_timeout": 10_000,
    "synchronous": "normal",
    # Bytes of -wal file kept after a checkpoint: a burst (or a long read holding the
    # checkpoints back) grows it, and without a limit it keeps its largest size for ever.
    # 4 MiB is what it holds between two automatic checkpoints (1,000 pages of 4 KiB).
    "journal_size_limit": 4 * 1024 * 1024,
}

DEFAULTS: dict[str, Any] = {
    "DATABASE": "default",
    "QUEUES": ["default"],
    "MAX_ATTEMPTS": 5,
    "LEASE_SECONDS": 60,
    "RETRY_BACKOFF": "exponential",
    "RETRY_BACKOFF_BASE": 2.0,
    "RETRY_BACKOFF_MAX": 3600.0,
    "KEEP_FINISHED": 7 * 86400,
    "POLL_INTERVAL": 1.0,
    "MAX_PAYLOAD_BYTES": 10 * 1024 * 1024,
    "SQLITE_PRAGMAS": DEFAULT_SQLITE_PRAGMAS,
    "TESTING": None,
    "LISTEN_DATABASE": None,
    "QUEUE_LIMITS": {},
    "SCHEDULE": {},
    "METRICS_TOKEN": None,
    "PRUNE_INTERVAL": 60.0,
    "CHECK_TYPES": True,
    "EVENT_RETENTION": 30 * 86400,
    "WAKE_CHECK_INTERVAL": None,
}

#: The statuses ``KEEP_FINISHED`` may name: those of finished jobs, the only ones pruned.
PRUNABLE_STATUSES: tuple[str, ...] = statuses.FINISHED

TESTING_MODES = (None, "inline")


@dataclass(frozen=True)
class Settings:
    """The effective ``SQLQ`` settings, defaults filled in and validated."""

    DATABASE: str
    QUEUES: tuple[str, ...]
    MAX_ATTEMPTS: int
    LEASE_SECONDS: float
    RETRY_BACKOFF: str
    RETRY_BACKOFF_BASE: float
    RETRY_BACKOFF_MAX: float
    #: Seconds to keep finished rows, per status (completed, failed, cancelled); None keeps
    #: them for ever. The setting may be one number, None or a dict; this is always the dict.
    KEEP_FINISHED: Mapping[str, int | None]
    POLL_INTERVAL: float
    MAX_PAYLOAD_BYTES: int
    SQLITE_PRAGMAS: Mapping[str, str | int]
    TESTING: str | None = None
    LISTEN_DATABASE: str | None = None
    #: Global per-queue limits (``SQLQ["QUEUE_LIMITS"]``, parsed): queue -> QueueLimit.
    QUEUE_LIMITS: Mapping[str, QueueLimit] = field(default_factory=dict)
    # Recurring jobs, by name: the raw entries (django_sqlq.schedules validates them).
    SCHEDULE: Mapping[str, Any] = field(default_factory=dict)
    METRICS_TOKEN: str | None = None
    PRUNE_INTERVAL: float = 60.0
    #: enqueue() refuses a job type no handler or @task answers to (after autodiscovery).
    CHECK_TYPES: bool = True
    #: Seconds an emitted event is kept for a waiter that comes later (None: for ever).
    EVENT_RETENTION: float | None = 30 * 86400
    #: Seconds between an idle worker's checks for other connections' commits, on the
    #: engines that check (SQLite, MariaDB); None: the engine's own (2 ms, 10 ms).
    WAKE_CHECK_INTERVAL: float | None = None

    @property
    def prunes(self) -> bool:
        """Whether any finished status is ever pruned."""
        return any(keep is not None for keep in self.KEEP_FINISHED.values())

    def backoff_function(self) -> Callable[[int], float] | None:
        """The user's dotted-path backoff policy, or None for the built-in exponential one."""
        if self.RETRY_BACKOFF == "exponential":
            return None
        try:
            func: Callable[[int], float] = import_string(self.RETRY_BACKOFF)
        except ImportError as exc:
            raise ConfigurationError(
                f"SQLQ['RETRY_BACKOFF'] = {self.RETRY_BACKOFF!r} cannot be imported: {exc}"
            ) from exc
        return func


def _number(
    key: str, value: Any, *, minimum: float, maximum: float | None = None, integer: bool = False
) -> Any:
    kind = int if integer else (int, float)
    if (
        isinstance(value, bool)
        or not isinstance(value, kind)
        or not math.isfinite(value)
        or value < minimum
        or (maximum is not None and value > maximum)
    ):
        expected = "an integer" if integer else "a number"
        bounds = (
            f">= {validation.number_text(minimum)}"
            if maximum is None
            else f"between {validation.number_text(minimum)} and {validation.number_text(maximum)}"
        )
        raise ConfigurationError(f"SQLQ[{key!r}] must be {expected} {bounds}, got {value!r}.")
    return value


def _flag(key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigurationError(f"SQLQ[{key!r}] must be True or False, got {value!r}.")
    return value


_cache: tuple[Any, Settings] | None = None
#: What a project without ``settings.SQLQ`` (or with an empty one) reads: one object, so that
#: the cache below recognises it (a new ``{}`` per call missed it every time, and every
#: ``enqueue()`` of a project on the defaults validated the whole settings again).
_NO_SETTINGS: Mapping[str, Any] = MappingProxyType({})


def clear_cache(**kwargs: Any) -> None:
    """``setting_changed`` receiver (connected in AppConfig.ready)."""
    global _cache
    _cache = None


def get_settings() -> Settings:
    """Read and validate ``settings.SQLQ``. Raises ConfigurationError naming the bad key.

    The result is cached until ``settings.SQLQ`` is replaced (override_settings does that,
    and sends ``setting_changed``, which clears the cache too).
    """
    global _cache
    user: Any = getattr(settings, "SQLQ", None) or _NO_SETTINGS
    cached = _cache
    if cached is not None and cached[0] is user:
        return cached[1]
    result = _read(user)
    _cache = (user, result)
    return result


def _check_pragmas(pragmas: Any) -> None:
    if not isinstance(pragmas, Mapping):
        raise ConfigurationError("SQLQ['SQLITE_PRAGMAS'] must be a dict of pragma -> value.")
    for name, value in pragmas.items():
        # Checked here, not only when a connection opens: a value that cannot go into a
        # PRAGMA statement would make every connection to the queue database fail, while
        # the system checks said nothing.
        if not isinstance(name, str) or not name.replace("_", "").isalnum():
            raise ConfigurationError(
                f"SQLQ['SQLITE_PRAGMAS'] has {name!r}, which is not a pragma name."
            )
        if not isinstance(value, int) and not (
            isinstance(value, str) and value and value.replace("_", "").replace("-", "").isalnum()
        ):
            raise ConfigurationError(
                f"SQLQ['SQLITE_PRAGMAS'][{name!r}] must be an integer or a word (letters, "
                f"digits, '_', '-'), got {value!r}."
            )


def _schedule(schedule: Any) -> dict[str, Any]:
    """``SQLQ["SCHEDULE"]``: a dict; its entries are checked by ``django_sqlq.schedules``
    (system check E030, and the worker at start), so that one bad entry does not stop
    enqueue()."""
    if not isinstance(schedule, Mapping):
        raise ConfigurationError(
            "SQLQ['SCHEDULE'] must be a dict of schedule name -> {'type' or 'task', 'cron', "
            f"...}}, got {type(schedule).__name__}."
        )
    return dict(schedule)


def _check_token(token: Any) -> str | None:
    if token is not None and (not isinstance(token, str) or len(token.strip()) < 16):
        raise ConfigurationError(
            "SQLQ['METRICS_TOKEN'] must be None or a secret string of at least 16 characters "
            "(the bearer token Prometheus sends to the metrics view)."
        )
    return token


def _keep_finished(value: Any) -> dict[str, int | None]:
    """``KEEP_FINISHED``: seconds (one number for every finished status), None (keep for
    ever), or a dict of status -> seconds or None; a status the dict leaves out keeps the
    default (7 days). Seconds may be given as a ``timedelta``."""

    def seconds(label: str, item: Any) -> int | None:
        if item is None:
            return None
        if isinstance(item, timedelta):
            # Whole seconds, rounded up (kept a fraction of a second longer, never shorter).
            item = math.ceil(item.total_seconds())
        if isinstance(item, bool) or not isinstance(item, int) or not 0 <= item <= MAX_DELAY:
            raise ConfigurationError(
                f"{label} must be None (keep for ever), a number of seconds (an integer "
                f"from 0 to {validation.number_text(MAX_DELAY)}) or a timedelta, got "
                f"{item!r}.{dict_form}"
            )
        return item

    if not isinstance(value, Mapping):
        # The whole setting may also be a dict per status: say so where it went wrong.
        dict_form = (
            " It may also be a dict per finished status: {'completed': 86400, 'failed': "
            "timedelta(days=30), 'cancelled': None}."
        )
        return dict.fromkeys(PRUNABLE_STATUSES, seconds("SQLQ['KEEP_FINISHED']", value))
    dict_form = ""
    unknown = [key for key in value if key not in PRUNABLE_STATUSES]
    if unknown:
        raise ConfigurationError(
            f"SQLQ['KEEP_FINISHED'] has the key {unknown[0]!r}, which is not a finished "
            f"status: its keys are {', '.join(map(repr, PRUNABLE_STATUSES))} (scheduled, "
            "pending and processing jobs are never pruned)."
        )
    default = DEFAULTS["KEEP_FINISHED"]
    return {
        status: seconds(f"SQLQ['KEEP_FINISHED'][{status!r}]", value.get(status, default))
        for status in PRUNABLE_STATUSES
    }


def _read(user: Any) -> Settings:
    if not isinstance(user, Mapping):
        raise ConfigurationError("settings.SQLQ must be a dict.")
    unknown = set(user) - set(DEFAULTS)
    if unknown:
        raise ConfigurationError(
            f"Unknown SQLQ setting(s): {', '.join(sorted(unknown))}. "
            f"Known keys: {', '.join(sorted(DEFAULTS))}."
        )
    merged = {**DEFAULTS, **user}
    queues = merged["QUEUES"]
    if (
        isinstance(queues, str)
        or not queues
        or not all(isinstance(q, str) and q and len(q) <= 100 for q in queues)
    ):
        raise ConfigurationError(
            "SQLQ['QUEUES'] must be a non-empty list of queue names (strings of 1-100 chars)."
        )
    for name in queues:
        try:
            validation.check_name("queue name", name, max_length=100)
        except InvalidJobError as exc:
            raise ConfigurationError(f"SQLQ['QUEUES']: {exc}") from None
    if not isinstance(merged["DATABASE"], str):
        raise ConfigurationError("SQLQ['DATABASE'] must be a database alias (a string).")
    backoff = merged["RETRY_BACKOFF"]
    if not isinstance(backoff, str) or not backoff:
        raise ConfigurationError(
            "SQLQ['RETRY_BACKOFF'] must be 'exponential' or a dotted path to "
            "f(attempts) -> seconds."
        )
    listen = merged["LISTEN_DATABASE"]
    if listen is not None and (not isinstance(listen, str) or not listen):
        raise ConfigurationError(
            "SQLQ['LISTEN_DATABASE'] must be None or a database alias (a string)."
        )
    token = _check_token(merged["METRICS_TOKEN"])
    pragmas = merged["SQLITE_PRAGMAS"]
    _check_pragmas(pragmas)
    if merged["TESTING"] not in TESTING_MODES:
        raise ConfigurationError(
            f"SQLQ['TESTING'] must be None or 'inline', got {merged['TESTING']!r}."
        )
    schedule = _schedule(merged["SCHEDULE"])
    return Settings(
        DATABASE=merged["DATABASE"],
        QUEUES=tuple(queues),
        MAX_ATTEMPTS=_number(
            "MAX_ATTEMPTS", merged["MAX_ATTEMPTS"], minimum=1, maximum=2**31 - 1, integer=True
        ),
        LEASE_SECONDS=_number(
            "LEASE_SECONDS", merged["LEASE_SECONDS"], minimum=0.1, maximum=MAX_INTERVAL
        ),
        RETRY_BACKOFF=backoff,
        RETRY_BACKOFF_BASE=_number(
            "RETRY_BACKOFF_BASE", merged["RETRY_BACKOFF_BASE"], minimum=0, maximum=MAX_DELAY
        ),
        RETRY_BACKOFF_MAX=_number(
            "RETRY_BACKOFF_MAX", merged["RETRY_BACKOFF_MAX"], minimum=0, maximum=MAX_DELAY
        ),
        KEEP_FINISHED=_keep_finished(merged["KEEP_FINISHED"]),
        POLL_INTERVAL=_number(
            "POLL_INTERVAL", merged["POLL_INTERVAL"], minimum=0.001, maximum=MAX_INTERVAL
        ),
        MAX_PAYLOAD_BYTES=_number(
            "MAX_PAYLOAD_BYTES", merged["MAX_PAYLOAD_BYTES"], minimum=1, integer=True
        ),
        SQLITE_PRAGMAS=dict(pragmas),
        TESTING=merged["TESTING"],
        LISTEN_DATABASE=listen,
        QUEUE_LIMITS=parse_queue_limits(merged["QUEUE_LIMITS"]),
        SCHEDULE=schedule,
        METRICS_TOKEN=token,
        PRUNE_INTERVAL=_number(
            "PRUNE_INTERVAL", merged["PRUNE_INTERVAL"], minimum=0.01, maximum=MAX_INTERVAL
        ),
        CHECK_TYPES=_flag("CHECK_TYPES", merged["CHECK_TYPES"]),
        EVENT_RETENTION=None
        if merged["EVENT_RETENTION"] is None
        else _number("EVENT_RETENTION", merged["EVENT_RETENTION"], minimum=0, maximum=MAX_DELAY),
        WAKE_CHECK_INTERVAL=None
        if merged["WAKE_CHECK_INTERVAL"] is None
        else _number(
            "WAKE_CHECK_INTERVAL", merged["WAKE_CHECK_INTERVAL"], minimum=0.001, maximum=60
        ),
    )
