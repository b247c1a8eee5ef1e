"""Staging: scheduled jobs (delayed, or retries in backoff) become pending when their time
comes, just before a claim. Cheap when none is due: the worker knows when the next one
is, re-reads that (one index probe) only when woken or every poll interval, and learns of
the retries its own runners schedule (no NOTIFY or enqueue tells it about those)."""

from __future__ import annotations

import math
import threading
import time

from django_sqlq import lifecycle
from django_sqlq.worker.context import WorkerContext

# Scheduled jobs moved to pending per statement, oldest first, when their time has come.
PROMOTE_BATCH = 1000
# How soon due jobs that another transaction holds (none could be promoted) are tried again.
HELD_RETRY = 0.05


class Stager:
    def __init__(self, context: WorkerContext) -> None:
        self.context = context
        self.database = context.database
        self.due_at = 0.0  # time.monotonic() when the next scheduled job is due
        self.checked = 0.0  # when due_at was last read from the database
        # The earliest retry this worker's runners scheduled since due_at was last read: a
        # retry in backoff is a scheduled job the database read may not have seen.
        self.retry_due_at = math.inf
        self._lock = threading.Lock()

    def stage(self, *, recheck: bool) -> None:
        """Move the scheduled jobs whose time has come to pending, before a claim. Cheap
        when none is due: the worker knows when the next one is (``due_at``), and re-reads
        that (one index probe) only when told to."""
        if recheck:
            self._learn_next_due()
        if time.monotonic() < self.due_at:
            return
        moved = lifecycle.promote(self.database, limit=PROMOTE_BATCH, now=self.context.now())
        if moved == PROMOTE_BATCH:
            self.due_at = 0.0  # more are due: promote again before the next claim
            return
        self._learn_next_due()
        if not moved and self.due_at <= time.monotonic():
            # Due, yet none moved: another transaction holds them (promote() skips locked
            # rows). Tried again shortly, not at once: an idle worker read the due time and
            # promoted in a loop as fast as the database answered (MariaDB: 212 -> 1,773
            # queries a second from 2 idle workers while a transaction held due rows).
            self.due_at = time.monotonic() + min(self.context.poll_interval, HELD_RETRY)

    def _learn_next_due(self) -> None:
        with self._lock:
            self.retry_due_at = math.inf  # retries written from here on may not be read
        seconds = lifecycle.next_due_in(self.database, now=self.context.now())
        self.checked = time.monotonic()
        due_at = math.inf if seconds is None else self.checked + max(seconds, 0.0)
        with self._lock:
            self.due_at = min(due_at, self.retry_due_at)

    def retry_scheduled(self, retry_in: float) -> None:
        """A runner scheduled a retry: wake for it when it comes due (it is a scheduled job
        like any other, but no NOTIFY or enqueue tells this worker about it)."""
        at = time.monotonic() + retry_in
        with self._lock:
            self.retry_due_at = min(self.retry_due_at, at)
            self.due_at = min(self.due_at, at)
