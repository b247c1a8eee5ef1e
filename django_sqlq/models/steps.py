"""The durable steps' tables: what each job recorded of its steps, sleeps and waits
(``JobStep``), and the events emitted for waiting jobs (``Event``)."""

from __future__ import annotations

from typing import Any, ClassVar

from django.db import models
from django.db.models.functions import Now
from django.utils.translation import gettext_lazy as _

from django_sqlq.models.managers import QueueDatabaseManager, without_partial_index_warnings

#: The longest step name and event key.
MAX_STEP_NAME = 200
MAX_EVENT_KEY = 255


class StepKind(models.TextChoices):
    STEP = "step", _("step")
    SLEEP = "sleep", _("sleep")
    EVENT = "event", _("wait for event")


class StepState(models.TextChoices):
    DONE = "done", _("done")
    SLEEPING = "sleeping", _("sleeping")
    WAITING = "waiting", _("waiting")
    TIMED_OUT = "timed_out", _("timed out")


class JobStep(models.Model):
    """One recorded step of a job (``context.step()``, ``sleep()``, ``wait_for_event()``),
    keyed by the job and the step's name: every later attempt of the job reads it back
    instead of running the step again. A plain job id, not a foreign key: the pruner and the
    operators delete jobs with one raw DELETE each, and the pruner deletes the steps of the
    jobs that are gone."""

    id = models.BigAutoField(primary_key=True)
    job_id = models.BigIntegerField(help_text=_("The job that recorded the step."))
    name = models.CharField(max_length=MAX_STEP_NAME)
    kind = models.CharField(max_length=8, choices=StepKind.choices, default=StepKind.STEP)
    state = models.CharField(max_length=10, choices=StepState.choices, default=StepState.DONE)
    # The step's JSON result; a received event's payload.
    result = models.JSONField(null=True, blank=True)
    # wait_for_event(): the key waited for.
    wait_key = models.CharField(max_length=MAX_EVENT_KEY, null=True, blank=True)  # noqa: DJ001
    # sleep(): when it ends; wait_for_event(): when it times out.
    wake_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(db_default=Now())
    updated_at = models.DateTimeField(db_default=Now())

    objects: ClassVar[models.Manager[JobStep]] = QueueDatabaseManager()  # type: ignore[assignment]

    class Meta:
        db_table = "sqlq_job_step"
        verbose_name = _("job step")
        verbose_name_plural = _("job steps")
        ordering = ["job_id", "id"]
        indexes = [
            # The steps asleep, and only they (a done step, which every step() records,
            # enters no index but the unique one): emit_event()'s waiters of a key (state =
            # 'waiting' AND wait_key = key), and the dashboard's count of the jobs asleep.
            models.Index(
                fields=["state", "wait_key"],
                name="sqlq_job_step_asleep_idx",
                condition=models.Q(state__in=["sleeping", "waiting"]),
            ),
        ]
        constraints = [
            # Read back by (job, name) on every attempt; and the fence of a step's writes:
            # two attempts of one job cannot both record it (the second rolls back).
            models.UniqueConstraint(fields=["job_id", "name"], name="sqlq_job_step_unique")
        ]

    def __str__(self) -> str:
        return f"job {self.job_id} step {self.name!r} ({self.state})"

    @classmethod
    def check(cls, **kwargs: Any) -> list[Any]:
        # MariaDB: a plain index serves the sleeping and waiting steps (migration 0015).
        return without_partial_index_warnings(super().check(**kwargs))


class Event(models.Model):
    """An event emitted by ``django_sqlq.emit_event()``: the first emit of a key wins, and
    is kept for waiters that come later until retention removes it (``EVENT_RETENTION``)."""

    id = models.BigAutoField(primary_key=True)
    key = models.CharField(max_length=MAX_EVENT_KEY, unique=True)
    payload = models.JSONField(null=True, blank=True)
    emitted_at = models.DateTimeField(db_default=Now())

    objects: ClassVar[models.Manager[Event]] = QueueDatabaseManager()  # type: ignore[assignment]

    class Meta:
        db_table = "sqlq_event"
        verbose_name = _("event")
        verbose_name_plural = _("events")
        indexes = [
            # Retention: the oldest events first.
            models.Index(fields=["emitted_at"], name="sqlq_event_emitted_idx"),
        ]

    def __str__(self) -> str:
        return f"event {self.key!r}"
