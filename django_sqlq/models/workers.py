"""The workers table: each ``sqlq_worker`` process as it last reported itself."""

from __future__ import annotations

import os
import socket
from typing import Any, ClassVar

from django.db import models
from django.db.models.functions import Now
from django.utils.translation import gettext_lazy as _

from django_sqlq.db.base import DatabaseNow
from django_sqlq.models.managers import QueueDatabaseManager


class WorkerProcessQuerySet(models.QuerySet["WorkerProcess"]):
    """The workers' queryset: their rows as Solid Queue's Registrable keeps them: written at
    start, touched by each heartbeat, marked stopped at the end (see django_sqlq.worker)."""

    def register(self, worker_id: str, *, queues: list[str], concurrency: int) -> None:
        """Record this process as the worker ``worker_id``, started now."""
        self.update_or_create(
            worker_id=worker_id,
            defaults={
                "hostname": socket.gethostname(),
                "pid": os.getpid(),
                "queues": queues,
                "concurrency": concurrency,
                "stopped_at": None,
                "stats": {},  # a worker id used again starts its counts again
            },
        )

    def heartbeat(
        self,
        worker_id: str,
        *,
        jobs_done: int,
        jobs_failed: int,
        stats: dict[str, Any] | None = None,
    ) -> int:
        """Record that the worker is alive, with its counts so far."""
        extra = {} if stats is None else {"stats": stats}
        return self.filter(worker_id=worker_id).update(
            last_seen_at=DatabaseNow(), jobs_done=jobs_done, jobs_failed=jobs_failed, **extra
        )

    def deregister(
        self,
        worker_id: str,
        *,
        jobs_done: int,
        jobs_failed: int,
        stats: dict[str, Any] | None = None,
    ) -> int:
        """Record that the worker stopped, with its final counts."""
        extra = {} if stats is None else {"stats": stats}
        return self.filter(worker_id=worker_id).update(
            stopped_at=DatabaseNow(),
            last_seen_at=DatabaseNow(),
            jobs_done=jobs_done,
            jobs_failed=jobs_failed,
            **extra,
        )


class WorkerProcess(models.Model):
    """A running (or recently stopped) ``sqlq_worker`` process, as it last reported itself."""

    worker_id = models.CharField(max_length=255, unique=True)
    hostname = models.CharField(max_length=255)
    pid = models.PositiveIntegerField()
    queues = models.JSONField(default=list)
    concurrency = models.PositiveIntegerField(default=1)
    started_at = models.DateTimeField(db_default=Now())
    last_seen_at = models.DateTimeField(db_default=Now())
    stopped_at = models.DateTimeField(null=True, blank=True)
    jobs_done = models.PositiveBigIntegerField(default=0)
    jobs_failed = models.PositiveBigIntegerField(default=0)
    # Per queue: attempts completed/failed/retried and the histograms of run time and
    # pickup latency, cumulative since the worker started (django_sqlq.worker.stats); the
    # Prometheus view sums them over the workers.
    stats = models.JSONField(default=dict, blank=True)

    objects: ClassVar[WorkerProcessQuerySet] = QueueDatabaseManager.from_queryset(  # type: ignore[assignment]
        WorkerProcessQuerySet
    )()

    class Meta:
        db_table = "sqlq_worker"
        ordering = ["-last_seen_at"]
        verbose_name = _("worker")
        verbose_name_plural = _("workers")

    def __str__(self) -> str:
        return self.worker_id
