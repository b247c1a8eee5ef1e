"""The pruner: every ``SQLQ["PRUNE_INTERVAL"]`` seconds, deletes the finished jobs older than
``SQLQ["KEEP_FINISHED"]`` (``django_sqlq.retention.prune``). Every worker runs one; the
``prune`` lease in the maintenance table lets one pass run at a time across all workers and
hosts, and the others skip their turn. Nothing runs when every status is kept for ever."""

from __future__ import annotations

import logging

from django.db import DatabaseError

from django_sqlq import retention
from django_sqlq.worker.context import WorkerContext
from django_sqlq.worker.dbretry import reset_connection
from django_sqlq.worker.maintenance.service import PeriodicService

logger = logging.getLogger("django_sqlq.worker")


class Pruner(PeriodicService):
    name = "prune"

    def __init__(self, context: WorkerContext) -> None:
        super().__init__()
        self.context = context
        self.interval = context.conf.PRUNE_INTERVAL
        self.last: retention.PruneResult | None = None

    def start(self) -> None:
        if self.context.conf.prunes:
            super().start()

    def tick(self) -> None:
        context = self.context
        try:
            result = retention.prune(
                context.database,
                keep=context.conf.KEEP_FINISHED,
                holder=context.worker_id,
                now=context.now(),
                stop=self.stopping,
            )
        except retention.PrunerBusy as busy:
            logger.debug("Worker %s: not pruning: %s", context.worker_id, busy)
            return
        except DatabaseError as exc:
            logger.warning(
                "Worker %s: pruning finished jobs failed (%s: %s); will retry",
                context.worker_id,
                type(exc).__name__,
                exc,
            )
            reset_connection(context.database)
            return
        self.last = result
        if result.total:  # routine: a DEBUG line (-v 3), one per pass that deleted jobs
            logger.debug(
                "Worker %s: pruned %d finished job(s) (%s) in %.2fs",
                context.worker_id,
                result.total,
                ", ".join(f"{status} {n}" for status, n in result.deleted.items() if n),
                result.seconds,
            )
