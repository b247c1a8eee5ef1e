"""The maintenance table: the lease and the last run of each duty one worker at a time does."""

from __future__ import annotations

from typing import ClassVar

from django.db import models
from django.utils.translation import gettext_lazy as _

from django_sqlq.models.managers import QueueDatabaseManager


class Maintenance(models.Model):
    """One row per maintenance duty that only one worker at a time may do, across hosts (the
    pruner: ``duty = "prune"``): who holds it now (a lease, which runs out if its holder dies)
    and what its last run did, for the admin's dashboard. Written by
    ``django_sqlq.db`` (the lease) and ``django_sqlq.retention`` (the record)."""

    duty = models.CharField(max_length=50, unique=True)
    holder = models.CharField(max_length=255, blank=True, default="")
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    last_run_at = models.DateTimeField(null=True, blank=True)
    last_run_by = models.CharField(max_length=255, blank=True, default="")
    last_deleted = models.PositiveBigIntegerField(
        default=0, help_text=_("Rows the last run deleted.")
    )
    last_details = models.JSONField(
        default=dict, blank=True, help_text=_("The last run's rows deleted per status.")
    )
    last_seconds = models.FloatField(null=True, blank=True)
    total_deleted = models.PositiveBigIntegerField(default=0)

    objects: ClassVar[models.Manager[Maintenance]] = QueueDatabaseManager()  # type: ignore[assignment]

    class Meta:
        db_table = "sqlq_maintenance"
        verbose_name = _("maintenance duty")
        verbose_name_plural = _("maintenance duties")

    def __str__(self) -> str:
        return self.duty
