"""The blockers table: what each blocked job still waits for."""

from __future__ import annotations

from typing import ClassVar

from django.db import models
from django.utils.translation import gettext_lazy as _

from django_sqlq.models.managers import QueueDatabaseManager


class JobBlocker(models.Model):
    """One thing a blocked job waits for: a job (``chain`` False) or a chain named by its
    first job's id (``chain`` True). Written with the blocked job, in its transaction, and
    deleted in the transaction that completes (or fails, or cancels) what it names: a row
    here always means "not done yet". Plain columns, not foreign keys: the pruner and the
    operators delete jobs with one raw DELETE each."""

    id = models.BigAutoField(primary_key=True)
    job_id = models.BigIntegerField(help_text=_("The blocked job."))
    blocker_id = models.BigIntegerField(help_text=_("The job, or the chain's first job."))
    chain = models.BooleanField(default=False)

    objects: ClassVar[models.Manager[JobBlocker]] = QueueDatabaseManager()  # type: ignore[assignment]

    class Meta:
        db_table = "sqlq_job_blocker"
        verbose_name = _("job blocker")
        verbose_name_plural = _("job blockers")
        indexes = [
            # Resolution: the rows naming the jobs a completion just finished.
            models.Index(fields=["blocker_id"], name="sqlq_job_blocker_idx"),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["job_id", "blocker_id", "chain"], name="sqlq_job_blocker_unique"
            )
        ]

    def __str__(self) -> str:
        kind = "chain" if self.chain else "job"
        return f"job {self.job_id} waits for {kind} {self.blocker_id}"
