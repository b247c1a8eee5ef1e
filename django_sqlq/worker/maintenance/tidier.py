"""The tidier: on PostgreSQL, VACUUMs the jobs table (``QueueOps.tidy``) once this worker
has claimed TIDY_EVERY jobs since the last time, in a thread of its own, and then no sooner
than TIDY_SPACING times the last VACUUM's duration (a bound on its share of the time on a
big table). A queue that goes quiet (nothing to claim, nothing running, for QUIET_POLLS poll
intervals) after at least QUIET_MIN claims since the last VACUUM gets one too: no later
claim would, and without autovacuum the dead rows of the last jobs would stay until the
next burst. Nothing on SQLite."""

from __future__ import annotations

import logging
import time

from django.db import DatabaseError

from django_sqlq.db import ops_for
from django_sqlq.worker.context import WorkerContext
from django_sqlq.worker.maintenance.service import Service

logger = logging.getLogger("django_sqlq.worker")

TIDY_EVERY = 5_000
TIDY_SPACING = 1.0
TIDY_RETRY = 60.0  # seconds before another try after a failed VACUUM
QUIET_POLLS = 10  # poll intervals with nothing to claim and nothing running
QUIET_MIN = 100  # jobs claimed since the last VACUUM for a quiet queue's VACUUM


class Tidier(Service):
    name = "tidy"

    def __init__(self, context: WorkerContext) -> None:
        super().__init__()
        self.worker_id = context.worker_id
        self.database = context.database
        self.off = not ops_for(self.database).needs_tidy
        self.since = 0  # jobs claimed since the last tidy
        self.after = 0.0  # time.monotonic() before which no tidy starts

    def claimed(self, count: int) -> None:
        """``count`` jobs were claimed: start a tidy if it is time, unless one is running
        or the last one ended too recently."""
        self.since += count
        if self.off or self.since < TIDY_EVERY:
            return
        if time.monotonic() < self.after or self.running:
            return
        self.since = 0
        self.start()

    def quiet(self, seconds: float, poll_interval: float) -> None:
        """Nothing was claimed and nothing ran for ``seconds``: start a tidy if this worker
        claimed QUIET_MIN jobs since the last one and the queue has been quiet QUIET_POLLS
        poll intervals (not one lull in a stream)."""
        if self.off or self.since < QUIET_MIN or seconds < QUIET_POLLS * poll_interval:
            return
        if time.monotonic() < self.after or self.running:
            return
        self.since = 0
        self.start()

    def run(self) -> None:
        started = time.monotonic()
        try:
            ran = ops_for(self.database).tidy()
        except DatabaseError as exc:
            self.after = time.monotonic() + TIDY_RETRY
            logger.warning(
                "Worker %s: VACUUM of the jobs table failed (%s); trying again in %.0fs.",
                self.worker_id,
                exc,
                TIDY_RETRY,
            )
            return
        elapsed = time.monotonic() - started
        self.after = time.monotonic() + elapsed * TIDY_SPACING
        if ran:
            logger.debug("Worker %s: vacuumed the jobs table in %.3fs", self.worker_id, elapsed)
