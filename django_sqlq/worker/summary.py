"""The summary line: at the default verbosity, one line of counts every SUMMARY_INTERVAL
seconds in which jobs were finished stands in for a line per job."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from django_sqlq.worker.core import Worker

logger = logging.getLogger("django_sqlq.worker")

SUMMARY_INTERVAL = 5.0


class Summary:
    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.at = 0.0  # time.monotonic() of the last line (or of the start)
        self.counts = (0, 0, 0, 0)  # jobs done, failed, retried, cancelled at that time

    def start(self) -> None:
        self.at = time.monotonic()

    def next_at(self) -> float | None:
        """When the next line is due, or None while no job was finished since the last."""
        worker = self.worker
        finished = (worker.jobs_done, worker.jobs_failed, worker.completer.jobs_cancelled)
        if finished == (self.counts[0], self.counts[1], self.counts[3]):
            return None
        return self.at + SUMMARY_INTERVAL

    def log(self) -> None:
        """Log the line if SUMMARY_INTERVAL has passed and jobs were finished meanwhile."""
        now = time.monotonic()
        elapsed = now - self.at
        if elapsed < SUMMARY_INTERVAL:
            return
        worker = self.worker
        counts = (
            worker.jobs_done,
            worker.jobs_failed,
            worker.jobs_retried,
            worker.completer.jobs_cancelled,
        )
        done, failed, retried, cancelled = (
            a - b for a, b in zip(counts, self.counts, strict=True)
        )
        self.at, self.counts = now, counts
        if done or failed or cancelled:
            logger.info(
                "Worker %s: %d completed, %d failed, %d retried, %d cancelled in %.1fs "
                "(%.1f jobs/s); %d running",
                worker.worker_id,
                done,
                failed - retried,
                retried,
                cancelled,
                elapsed,
                (done + failed + cancelled) / elapsed,
                len(worker.pool.running),
            )
