"""The summary line: at the default verbosity, one line of counts every SUMMARY_INTERVAL
seconds in which jobs were finished stands in for a line per job."""

from __future__ import annotations

import logging
import time
from collections.abc import Sized

from django_sqlq.worker.context import Counts

logger = logging.getLogger("django_sqlq.worker")

SUMMARY_INTERVAL = 5.0


class Summary:
    def __init__(self, worker_id: str, counts: Counts, running: Sized) -> None:
        self.worker_id = worker_id
        self.totals = counts  # the worker's, updated as jobs finish
        self.running = running  # the jobs running now (the runner pool's)
        self.at = 0.0  # time.monotonic() of the last line (or of the start)
        self.counts = (0, 0, 0, 0)  # jobs done, failed, retried, cancelled at that time

    def start(self) -> None:
        self.at = time.monotonic()

    def next_at(self) -> float | None:
        """When the next line is due, or None while no job was finished since the last."""
        totals = self.totals
        finished = (totals.done, totals.failed, totals.cancelled)
        if finished == (self.counts[0], self.counts[1], self.counts[3]):
            return None
        return self.at + SUMMARY_INTERVAL

    def log(self) -> None:
        """Log the line if SUMMARY_INTERVAL has passed and jobs were finished meanwhile."""
        now = time.monotonic()
        elapsed = now - self.at
        if elapsed < SUMMARY_INTERVAL:
            return
        totals = self.totals
        counts = (totals.done, totals.failed, totals.retried, totals.cancelled)
        done, failed, retried, cancelled = (
            a - b for a, b in zip(counts, self.counts, strict=True)
        )
        self.at, self.counts = now, counts
        if done or failed or cancelled:
            logger.info(
                "Worker %s: %d completed, %d failed, %d retried, %d cancelled in %.1fs "
                "(%.1f jobs/s); %d running",
                self.worker_id,
                done,
                failed - retried,
                retried,
                cancelled,
                elapsed,
                (done + failed + cancelled) / elapsed,
                len(self.running),
            )
