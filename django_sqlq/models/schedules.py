"""The schedules' tables: the ticks enqueued, and the schedules stored in the database."""

from __future__ import annotations

from typing import Any, ClassVar

from django.core.exceptions import ValidationError
from django.db import models
from django.db.models.functions import Now
from django.utils.translation import gettext_lazy as _

from django_sqlq.models.managers import QueueDatabaseManager
from django_sqlq.recurrence.rows import stored_errors


class ScheduleTick(models.Model):
    """A tick of a recurring job that a worker enqueued (see ``django_sqlq.schedules``).

    The unique constraint on (name, tick_at) is what makes each tick enqueued once: every
    worker that finds the tick due tries to insert this row, in the same transaction as the
    job, and only one insert can win. ``job_id`` is a plain column, not a foreign key: the
    job may be pruned long before this row, which must outlive it (it is what tells the
    workers the tick was done). The worker keeps the newest few rows per schedule."""

    id = models.BigAutoField(primary_key=True)
    name = models.CharField(max_length=200)
    tick_at = models.DateTimeField()
    job_id = models.BigIntegerField(null=True, blank=True)
    enqueued_at = models.DateTimeField(db_default=Now())
    # The schedule's cron and time zone when this tick ran: a schedule whose definition
    # changed since its last tick is new, and its missed ticks are not caught up.
    spec = models.CharField(max_length=300, blank=True, default="")

    objects = QueueDatabaseManager()

    class Meta:
        db_table = "sqlq_schedule_tick"
        verbose_name = _("schedule")
        verbose_name_plural = _("schedules")
        constraints = [
            models.UniqueConstraint(fields=["name", "tick_at"], name="sqlq_schedule_tick_unique")
        ]

    def __str__(self) -> str:
        return f"{self.name} @ {self.tick_at.isoformat()}"


class DatabaseSchedule(models.Model):
    """A recurring job stored in the database and edited in the admin, beside
    ``SQLQ["SCHEDULE"]`` and the decorators' (see ``django_sqlq.schedules``). Running
    workers read the enabled rows at each pass of their scheduler; each tick is enqueued
    once through the same tick table (``ScheduleTick``, by ``name``). Names are unique
    across both kinds: ``clean()`` refuses one a code schedule uses."""

    RUN_ONCE = "run_once"
    SKIP = "skip"
    MISSED_CHOICES: ClassVar[list[tuple[str, Any]]] = [
        (RUN_ONCE, _("run the last missed tick once")),
        (SKIP, _("skip missed ticks")),
    ]

    name = models.CharField(
        max_length=200, unique=True, help_text=_("Unique among all schedules, code ones too.")
    )
    enabled = models.BooleanField(
        default=True, help_text=_("A disabled schedule enqueues nothing; its history stays.")
    )
    type = models.CharField(
        max_length=255, blank=True, default="",
        help_text=_("A job type: a @handler's name or a dotted path. Or give a task."),
    )  # fmt: skip
    task = models.CharField(
        max_length=255, blank=True, default="",
        help_text=_("Or a @task's dotted path (Django's tasks framework)."),
    )  # fmt: skip
    cron = models.CharField(
        max_length=100,
        help_text=_("Five fields (minute hour day month weekday), or six with seconds first."),
    )
    timezone = models.CharField(
        max_length=64, default="UTC", help_text=_("An IANA name, such as Europe/Paris.")
    )
    payload = models.JSONField(
        default=dict, blank=True, help_text=_("What a job type's handler receives (JSON).")
    )
    args = models.JSONField(
        default=list, blank=True, help_text=_("A task's arguments (JSON list).")
    )
    kwargs = models.JSONField(
        default=dict, blank=True, help_text=_("A task's keyword arguments (JSON object).")
    )
    queue = models.CharField(
        max_length=100, blank=True, default="",
        help_text=_("Empty: 'default' for a job type, the task's own queue for a task."),
    )  # fmt: skip
    priority = models.SmallIntegerField(
        null=True, blank=True, help_text=_("-100 to 100, higher first; empty: the default.")
    )
    missed = models.CharField(max_length=20, choices=MISSED_CHOICES, default=RUN_ONCE)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = QueueDatabaseManager()

    class Meta:
        db_table = "sqlq_schedule"
        verbose_name = _("database schedule")
        verbose_name_plural = _("database schedules")
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        """Everything the worker would refuse, named by field (see
        ``recurrence.rows.stored_errors``)."""
        if self.payload is None:
            self.payload = {}
        if self.args is None:
            self.args = []
        if self.kwargs is None:
            self.kwargs = {}
        errors = stored_errors(self)
        if errors:
            raise ValidationError(errors)
