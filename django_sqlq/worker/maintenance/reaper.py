"""The reaper: returns the jobs whose lease ran out (their worker died, or lost its
database) to pending, or fails them when their attempts are spent. Any worker does it:
once as it starts, then from the heartbeat's thread."""

from __future__ import annotations

import logging

from django.db import DatabaseError

from django_sqlq import lifecycle
from django_sqlq.db import is_missing_table
from django_sqlq.logs import job_extra
from django_sqlq.worker.context import WorkerContext
from django_sqlq.worker.dbretry import reset_connection

logger = logging.getLogger("django_sqlq.worker")


class Reaper:
    def __init__(self, context: WorkerContext) -> None:
        self.context = context

    def reap(self) -> None:
        context = self.context
        try:
            reaped = lifecycle.reap(context.database, now=context.now())
        except DatabaseError as exc:
            if is_missing_table(exc):
                raise
            logger.warning("Worker %s: reaping expired leases failed: %s", context.worker_id, exc)
            reset_connection(context.database)
            return
        for job_id, job_type, status, attempts, queue in reaped:
            logger.warning(
                "Job id=%s type=%s: lease expired during attempt %d; now %s",
                job_id,
                job_type,
                attempts,
                status,
                extra=job_extra(job_id, job_type, queue, attempts),
            )
        if reaped:
            context.wake()
