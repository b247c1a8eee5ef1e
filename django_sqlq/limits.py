"""Per-queue limits: ``SQLQ["QUEUE_LIMITS"]``, parsed and validated.

    SQLQ = {"QUEUE_LIMITS": {
        "video": {"concurrency": 2},          # at most 2 video jobs running, on all workers
        "sms": {"rate": "10/s"},              # at most 10 sms jobs started in any second
        "reports": {"concurrency": 1, "rate": "100/h"},
    }}

Both are global (every worker, every host) and enforced by the claim itself: see
``QueueOps.claim`` and docs/howto/queue-control.md. A worker's own per-queue limit is
``sqlq_worker --queue NAME:N``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, NamedTuple

from django_sqlq import validation
from django_sqlq.exceptions import ConfigurationError, InvalidJobError

#: The largest ``concurrency`` and the largest N of a rate: the rate's window keeps the
#: start time of each of the last N claims in the queue's row.
MAX_LIMIT = 10_000
#: The longest rate period: a day.
MAX_PERIOD = 86_400.0

_UNITS = {"s": 1.0, "sec": 1.0, "second": 1.0, "m": 60.0, "min": 60.0, "minute": 60.0}
_UNITS.update({"h": 3600.0, "hour": 3600.0, "d": 86400.0, "day": 86400.0})
_PERIOD_NAMES = {1.0: "s", 60.0: "min", 3600.0: "h", 86400.0: "d"}
_RATE = re.compile(r"^\s*(\d+)\s*/\s*(\d+(?:\.\d+)?)?\s*([a-z]+)\s*$")


class QueueLimit(NamedTuple):
    """One queue's global limits; None: no limit of that kind."""

    concurrency: int | None = None
    rate: int | None = None  # at most this many starts...
    period: float | None = None  # ...in any window of this many seconds

    def describe(self) -> str:
        parts = []
        if self.concurrency is not None:
            parts.append(f"concurrency {self.concurrency}")
        if self.rate is not None and self.period is not None:
            unit = _PERIOD_NAMES.get(self.period, f"{self.period:g}s")
            parts.append(f"rate {self.rate}/{unit}")
        return ", ".join(parts)


def parse_rate(text: str) -> tuple[int, float]:
    """``"10/s"``, ``"100/m"``, ``"5/10s"``, ``"1000/h"``, ``"50/d"`` -> (count, seconds)."""
    match = _RATE.match(text) if isinstance(text, str) else None
    if match is None or match.group(3) not in _UNITS:
        raise ValueError(
            f"a rate is 'N/unit' or 'N/<number><unit>' with unit s, m, h or d "
            f"(e.g. '10/s', '600/m', '5/10s'), got {text!r}"
        )
    count = int(match.group(1))
    period = float(match.group(2) or 1) * _UNITS[match.group(3)]
    if not 1 <= count <= MAX_LIMIT:
        raise ValueError(f"a rate's count must be between 1 and {MAX_LIMIT}, got {count}")
    if not 0 < period <= MAX_PERIOD:
        raise ValueError(f"a rate's period must be > 0 and at most a day, got {text!r}")
    return count, period


def _concurrency(key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_LIMIT:
        raise ConfigurationError(
            f"{key}['concurrency'] must be an integer between 1 and {MAX_LIMIT}, got {value!r}."
        )
    return value


def parse_queue_limits(value: Any) -> dict[str, QueueLimit]:
    """``SQLQ["QUEUE_LIMITS"]`` -> {queue: QueueLimit}. Raises ConfigurationError naming the
    key at fault."""
    if not isinstance(value, Mapping):
        raise ConfigurationError(
            "SQLQ['QUEUE_LIMITS'] must be a dict of queue name -> "
            "{'concurrency': N, 'rate': 'N/period'}."
        )
    limits: dict[str, QueueLimit] = {}
    for name, spec in value.items():
        try:
            validation.check_name("queue name", name, max_length=100)
        except InvalidJobError as exc:
            raise ConfigurationError(f"SQLQ['QUEUE_LIMITS']: {exc}") from None
        key = f"SQLQ['QUEUE_LIMITS'][{name!r}]"
        if not isinstance(spec, Mapping) or not spec:
            raise ConfigurationError(
                f"{key} must be a dict with 'concurrency' and/or 'rate', got {spec!r}."
            )
        unknown = set(spec) - {"concurrency", "rate"}
        if unknown:
            raise ConfigurationError(
                f"{key} has unknown key(s) {', '.join(sorted(map(str, unknown)))}; "
                "known: 'concurrency', 'rate'."
            )
        concurrency = _concurrency(key, spec["concurrency"]) if "concurrency" in spec else None
        rate = period = None
        if "rate" in spec:
            try:
                rate, period = parse_rate(spec["rate"])
            except ValueError as exc:
                raise ConfigurationError(f"{key}['rate']: {exc}.") from None
        limits[name] = QueueLimit(concurrency, rate, period)
    return limits


def parse_queue_option(value: str) -> tuple[str, int | None]:
    """``sqlq_worker --queue``: ``NAME`` or ``NAME:N`` (at most N of this worker's threads
    on that queue). A suffix after the last ``:`` that is not a number is part of the name
    (queue names may hold ``:``); an empty or non-positive one is an error."""
    name, sep, suffix = value.rpartition(":")
    if not sep or not (suffix == "" or re.fullmatch(r"\s*[-+]?\d+\s*", suffix)):
        return value, None
    if not name:
        raise ValueError(f"{value!r}: the queue name before ':' is missing")
    if suffix == "":
        raise ValueError(f"{value!r}: give a number of threads after ':' (e.g. {name}:4)")
    limit = int(suffix)
    if not 1 <= limit <= MAX_LIMIT:
        raise ValueError(
            f"{value!r}: the number of threads after ':' must be between 1 and {MAX_LIMIT}"
        )
    return name, limit
