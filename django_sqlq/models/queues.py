"""The queues table: the operator's state of each queue (paused, rate-limit window)."""

from __future__ import annotations

from typing import ClassVar

from django.db import models
from django.db.models.functions import Now
from django.utils.translation import gettext_lazy as _

from django_sqlq.models.managers import QueueDatabaseManager


class QueueQuerySet(models.QuerySet["Queue"]):
    def paused(self) -> QueueQuerySet:
        return self.filter(paused=True)


class Queue(models.Model):
    """The operator's state of one queue: paused or not, and the recent starts
    its rate limit counts. A queue without a row is running; rows are written by
    ``pause_queue()``/``resume_queue()`` and by workers serving a queue with a global limit.
    Jobs refer to queues by name only: enqueueing never needs a row."""

    name = models.CharField(max_length=100, primary_key=True)
    paused = models.BooleanField(default=False)
    paused_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(db_default=Now())
    #: Start times (seconds since the epoch, by the database's clock) of the latest claims of
    #: this queue, at most as many as its rate limit allows per period (a sliding window).
    recent_starts = models.JSONField(default=list, blank=True)

    objects: ClassVar[QueueQuerySet] = QueueDatabaseManager.from_queryset(QueueQuerySet)()  # type: ignore[assignment]

    class Meta:
        db_table = "sqlq_queue"
        ordering = ["name"]
        verbose_name = _("queue")
        verbose_name_plural = _("queues")

    def __str__(self) -> str:
        return self.name
