"""The heartbeat: keeps this worker's leases and its row in the workers table alive.

Every third of ``lease_seconds`` (at most every 10 s) it renews the leases of all the jobs
the worker holds, in one statement, records the worker's liveness and counts, and, every
half lease (at most every 30 s), runs the reaper. It stops only once the last running job
is finished, also after SIGTERM: until then the running jobs need their leases renewed,
or another worker would take them over mid-run.
"""

from __future__ import annotations

import logging
import time

from django.db import DatabaseError

from django_sqlq import lifecycle
from django_sqlq.models import WorkerProcess
from django_sqlq.worker.context import Counts, HeldJobs, WorkerContext
from django_sqlq.worker.dbretry import reset_connection
from django_sqlq.worker.maintenance.reaper import Reaper
from django_sqlq.worker.maintenance.service import PeriodicService
from django_sqlq.worker.stats import WorkerStats

logger = logging.getLogger("django_sqlq.worker")


class Heartbeat(PeriodicService):
    name = "heartbeat"

    def __init__(
        self,
        context: WorkerContext,
        *,
        held: HeldJobs,
        reaper: Reaper,
        counts: Counts,
        stats: WorkerStats,
    ) -> None:
        super().__init__()
        self.context = context
        self.held = held
        self.reaper = reaper
        self.counts = counts
        self.stats = stats
        self.interval = max(0.05, min(context.lease_seconds / 3, 10.0))
        self.reap_every = max(self.interval, min(context.lease_seconds / 2, 30.0))
        self.last_reap = 0.0

    def run(self) -> None:
        self.last_reap = time.monotonic()  # the worker reaps once as it starts
        super().run()

    def tick(self) -> None:
        context = self.context
        try:
            held = self.held.sorted()
            if held:
                lifecycle.extend_leases(
                    context.database,
                    worker_id=context.worker_id,
                    lease_seconds=context.lease_seconds,
                    now=context.now(),
                    job_ids=held,
                )
            WorkerProcess.objects.using(context.database).heartbeat(
                context.worker_id,
                jobs_done=self.counts.done,
                jobs_failed=self.counts.failed,
                stats=self.stats.as_json(),
            )
            if time.monotonic() - self.last_reap >= self.reap_every:
                self.last_reap = time.monotonic()
                self.reaper.reap()
        except DatabaseError as exc:
            logger.warning(
                "Worker %s: heartbeat failed (%s: %s); will retry",
                context.worker_id,
                type(exc).__name__,
                exc,
            )
            reset_connection(context.database)
