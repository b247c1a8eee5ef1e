"""What this worker has done, per queue, for the Prometheus view: attempts completed,
failed and retried, and histograms of the attempts' run time and pickup latency (from the
job's ``scheduled_at`` to the start of its attempt).

Cumulative since the worker started, in memory (a few increments under a lock per job), and
written to the worker's row (``WorkerProcess.stats``) by each heartbeat and at stop: the
view (:mod:`django_sqlq.metrics`) sums the rows of every worker, on every host, in one
query, so one scrape of the web site sees them all, at most a heartbeat (10 s) late.
No dependency on ``prometheus-client``: the worker records, the view formats.
"""

from __future__ import annotations

import bisect
import threading
from datetime import datetime
from typing import Any

from django.conf import settings
from django.utils.dateparse import parse_datetime

#: The histograms' upper bounds, in seconds (a last bucket, +Inf, follows). Run times and
#: pickup latencies of a job queue range from milliseconds to hours.
BUCKETS: tuple[float, ...] = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    300.0,
    1800.0,
    3600.0,
)
#: The format of ``WorkerProcess.stats``; the view skips rows of another format.
VERSION = 1


class Histogram:
    """Counts per bucket (not cumulative; the last is +Inf) and the sum of the values."""

    __slots__ = ("counts", "sum")

    def __init__(self) -> None:
        self.counts = [0] * (len(BUCKETS) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(BUCKETS, value)] += 1
        self.sum += value

    def as_json(self) -> dict[str, Any]:
        return {"counts": list(self.counts), "sum": self.sum}


class QueueStats:
    __slots__ = ("completed", "failed", "pickup", "retried", "run")

    def __init__(self) -> None:
        self.completed = 0
        self.failed = 0  # failed for good
        self.retried = 0  # failed attempts that will be retried
        self.run = Histogram()
        self.pickup = Histogram()

    def as_json(self) -> dict[str, Any]:
        return {
            "completed": self.completed,
            "failed": self.failed,
            "retried": self.retried,
            "run_seconds": self.run.as_json(),
            "pickup_seconds": self.pickup.as_json(),
        }


class WorkerStats:
    """One worker's counts. Runner threads record; the heartbeat reads (``as_json``)."""

    def __init__(self) -> None:
        self._queues: dict[str, QueueStats] = {}
        self._lock = threading.Lock()
        # Read once: reading a setting costs about as much as the rest of a job's counting.
        self._naive_is_utc = bool(settings.USE_TZ)

    def _queue(self, name: str) -> QueueStats:
        found = self._queues.get(name)
        if found is None:
            found = self._queues[name] = QueueStats()
        return found

    def ran(self, queue: str, scheduled_at: Any, started: float, seconds: float) -> None:
        """An attempt of a job due at ``scheduled_at`` started at ``started`` (time.time())
        and its handler returned or raised ``seconds`` later. One call (one lock) per
        attempt, after it ran: a few microseconds off the handler's path."""
        waited = seconds_between(scheduled_at, started, naive_is_utc=self._naive_is_utc)
        run_bucket = bisect.bisect_left(BUCKETS, seconds)
        with self._lock:
            stats = self._queues.get(queue) or self._queue(queue)
            run = stats.run  # Histogram.observe(), inlined: this runs once a job
            run.counts[run_bucket] += 1
            run.sum += seconds
            if waited is not None:
                stats.pickup.observe(waited)

    def completed(self, queue: str) -> None:
        with self._lock:
            self._queue(queue).completed += 1

    def completed_many(self, counts: dict[str, int]) -> None:
        """``counts[queue]`` attempts of that queue completed (a batch the completer wrote)."""
        if not counts:
            return
        with self._lock:
            for queue, count in counts.items():
                self._queue(queue).completed += count

    def failed(self, queue: str, *, retried: bool) -> None:
        with self._lock:
            stats = self._queue(queue)
            if retried:
                stats.retried += 1
            else:
                stats.failed += 1

    def as_json(self) -> dict[str, Any]:
        with self._lock:
            queues = {name: stats.as_json() for name, stats in self._queues.items()}
        return {"version": VERSION, "buckets": list(BUCKETS), "queues": queues}


_EPOCH = datetime(1970, 1, 1)


def seconds_between(value: Any, later: float, *, naive_is_utc: bool | None = None) -> float | None:
    """Seconds from ``value`` (a ``scheduled_at`` as the claim returns it: a datetime, or
    SQLite's text) to ``later`` (a time.time() of this host); None if it cannot be read.
    A naive ``value`` is UTC when ``naive_is_utc`` (default: ``settings.USE_TZ``), else
    local time.
    Never negative: a host whose clock is behind the database's sees 0, not a negative
    wait. (No tzinfo juggling: replace(tzinfo=...) alone costs a microsecond.)"""
    if isinstance(value, str):
        try:
            parsed: datetime | None = datetime.fromisoformat(value)
        except ValueError:
            parsed = parse_datetime(value)
    else:
        parsed = value
    if not isinstance(parsed, datetime):
        return None
    if naive_is_utc is None:
        naive_is_utc = bool(settings.USE_TZ)
    if parsed.tzinfo is None and naive_is_utc:
        stamp = (parsed - _EPOCH).total_seconds()  # naive UTC, as SQLite stores it
    else:
        stamp = parsed.timestamp()  # aware, or naive local time (Django sets the process's)
    return max(0.0, later - stamp)
