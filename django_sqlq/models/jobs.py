"""The jobs table: ``Job``, its statuses, its queryset, its proxies in the admin, and the
``Chain`` that names a chain of jobs."""

from __future__ import annotations

import os
import time
import uuid
from datetime import datetime
from typing import Any, ClassVar

from django.db import models
from django.db.models import Q
from django.db.models.functions import Now
from django.utils.translation import gettext_lazy as _

from django_sqlq import statuses
from django_sqlq.db.base import DatabaseNow
from django_sqlq.models.managers import QueueDatabaseManager, without_partial_index_warnings

PRIORITY_MIN = -100
PRIORITY_MAX = 100


class JobStatus(models.TextChoices):
    """The values of ``django_sqlq.statuses``, with their labels."""

    BLOCKED = statuses.BLOCKED, _("Blocked")
    SCHEDULED = statuses.SCHEDULED, _("Scheduled")
    PENDING = statuses.PENDING, _("Pending")
    PROCESSING = statuses.PROCESSING, _("Processing")
    COMPLETED = statuses.COMPLETED, _("Completed")
    FAILED = statuses.FAILED, _("Failed")
    CANCELLED = statuses.CANCELLED, _("Cancelled")


FINISHED_STATUSES = (JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELLED)


def any_status(values: tuple[str, ...]) -> Q:
    """``status = a OR status = b OR ...``, the condition of an index or a check over several
    statuses (``django_sqlq.db.dialect.any_status_sql`` is its SQL). Not ``status__in``:
    SQLite evaluates an IN list of more than two literals through a temporary b-tree, one
    look-up at every row an UPDATE changes, for each index and check that names ``status``,
    even where the row enters none of them: with two indexes and the check written that way,
    a third of the SQL time of a plain claim and completion (migration 0018)."""
    condition = Q(status=values[0])
    for value in values[1:]:
        condition |= Q(status=value)
    return condition


class DependencyPolicy(models.TextChoices):
    """What a blocked job does when a job it depends on fails for good or is cancelled
    (``enqueue(..., depends_on=..., on_dependency_failure=...)``)."""

    FAIL = "fail", _("Fail it")
    CANCEL = "cancel", _("Cancel it")
    RUN = "run", _("Run it anyway")


class JobQuerySet(models.QuerySet["Job"]):
    def pending(self) -> JobQuerySet:
        return self.filter(status=JobStatus.PENDING)

    def waiting(self) -> JobQuerySet:
        """Jobs that have not started: scheduled for later, or pending."""
        return self.filter(status__in=(JobStatus.SCHEDULED, JobStatus.PENDING))

    def blocked(self) -> JobQuerySet:
        """Jobs that wait for other jobs (``enqueue(..., depends_on=...)``)."""
        return self.filter(status=JobStatus.BLOCKED)

    def processing(self) -> JobQuerySet:
        return self.filter(status=JobStatus.PROCESSING)

    def completed(self) -> JobQuerySet:
        return self.filter(status=JobStatus.COMPLETED)

    def failed(self) -> JobQuerySet:
        return self.filter(status=JobStatus.FAILED)

    def cancelled(self) -> JobQuerySet:
        return self.filter(status=JobStatus.CANCELLED)

    def finished(self) -> JobQuerySet:
        return self.filter(status__in=FINISHED_STATUSES)

    def runnable(self, now: datetime | None = None) -> JobQuerySet:
        """Pending jobs whose scheduled time has come (by the database clock unless given)."""
        return self.pending().filter(scheduled_at__lte=now if now is not None else DatabaseNow())

    def scheduled(self, now: datetime | None = None) -> JobQuerySet:
        """Jobs that wait for a time still in the future (status ``scheduled``, and any
        ``pending`` job whose time was moved forward by hand)."""
        return self.waiting().filter(scheduled_at__gt=now if now is not None else DatabaseNow())

    def expired(self, now: datetime | None = None) -> JobQuerySet:
        """Processing jobs whose lease ran out: their worker is gone or stuck."""
        return self.processing().filter(
            lease_expires_at__lt=now if now is not None else DatabaseNow()
        )


def new_uuid() -> uuid.UUID:
    """A new job's public id: a version 7 UUID (RFC 9562), the Unix time in milliseconds
    followed by 74 random bits (``os.urandom``): unguessable, and ordered by creation time
    so that new entries of the unique index go to its end. The INSERTs of ``enqueue()``
    write the same from SQL (``QueueOps.uuid_sql``)."""
    value = (time.time_ns() // 1_000_000 & (1 << 48) - 1) << 80
    value |= int.from_bytes(os.urandom(10), "big") & ((1 << 80) - 1)
    value = value & ~(0xF << 76) | 0x7 << 76  # version 7
    value = value & ~(0x3 << 62) | 0x2 << 62  # the RFC's variant
    return uuid.UUID(int=value)


class Job(models.Model):
    """One background job. Only ``django_sqlq.lifecycle`` changes ``status`` (and
    ``django_sqlq.workflows``, which it calls, for jobs that wait for others)."""

    id = models.BigAutoField(primary_key=True)
    # Unique, so indexed: the tasks backend's get_result() and the admin's search find a
    # job by it. Time-ordered (version 7): every row version of a job (its INSERT, its
    # claim's and its completion's UPDATE) enters this index, and recent jobs' entries sit
    # together at its end, where random (version 4) ones would land on a random leaf page
    # each.
    uuid = models.UUIDField(
        default=new_uuid,
        unique=True,
        editable=False,
        help_text=_("The job's unguessable public id: the tasks backend's result id."),
    )
    queue = models.CharField(max_length=100, default="default")
    type = models.CharField(max_length=255)
    payload = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=16, choices=JobStatus.choices, default=JobStatus.PENDING)
    priority = models.SmallIntegerField(
        default=0, help_text=_("From -100 to 100; higher runs first.")
    )
    attempts = models.PositiveIntegerField(default=0, help_text=_("Attempts started."))
    max_attempts = models.PositiveIntegerField(default=5)
    timeout = models.FloatField(
        null=True, blank=True, help_text=_("Seconds an attempt may run; empty: no limit.")
    )
    last_error = models.TextField(blank=True, default="")
    errors = models.JSONField(
        default=list, blank=True, help_text=_("One entry per failed or lost attempt.")
    )
    scheduled_at = models.DateTimeField(db_default=Now())
    created_at = models.DateTimeField(db_default=Now())
    updated_at = models.DateTimeField(db_default=Now())
    started_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    locked_by = models.CharField(max_length=255, blank=True, default="")
    locked_at = models.DateTimeField(null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    result = models.JSONField(null=True, blank=True)
    # NULL, not '', for "no key": NULLs never collide in the unique index, and the partial
    # indexes leave them out.
    unique_key = models.CharField(  # noqa: DJ001
        max_length=255,
        null=True,
        blank=True,
        help_text=_(
            "While a job with this key is scheduled, pending or processing, enqueueing "
            "another with the same key returns this one instead."
        ),
    )
    # Cancel and progress. Nullable, without defaults: added without rewriting
    # the table on either engine.
    cancel_requested_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text=_("When cancel() asked the worker running this job to stop it."),
    )
    progress = models.FloatField(
        null=True, blank=True, help_text=_("What the handler last reported, from 0 to 1.")
    )
    progress_message = models.CharField(  # noqa: DJ001 (NULL: nothing reported)
        max_length=255, null=True, blank=True
    )
    progress_at = models.DateTimeField(null=True, blank=True)
    # The enqueuing request's trace context (W3C ``traceparent``/``tracestate``, as JSON
    # text), written only when OpenTelemetry is installed: the worker's run span continues
    # that trace (django_sqlq.tracing).
    trace = models.TextField(  # noqa: DJ001
        null=True,
        blank=True,
        editable=False,
        help_text=_("The trace context of the code that enqueued the job (OpenTelemetry)."),
    )

    # Workflows. Nullable, without defaults: added without rewriting the table,
    # and NULL on every job that is neither in a chain nor waits for others.
    chain_id = models.BigIntegerField(
        null=True,
        blank=True,
        editable=False,
        help_text=_(
            "The id of the chain's first job, on every step of a chain "
            "(context.continue_with()); empty for a job that never continued."
        ),
    )
    chain_index = models.PositiveIntegerField(
        null=True, blank=True, editable=False, help_text=_("The step's position: 0 first.")
    )
    blockers_left = models.PositiveIntegerField(
        null=True,
        blank=True,
        editable=False,
        help_text=_("Of the jobs and chains a blocked job waits for, those not done yet."),
    )
    depends_on = models.JSONField(
        null=True,
        blank=True,
        editable=False,
        help_text=_("What the job was enqueued to wait for: [{'job': id} or {'chain': id}, ...]."),
    )
    dependency_policy = models.CharField(  # noqa: DJ001 (NULL: no dependencies)
        max_length=8,
        null=True,
        blank=True,
        choices=DependencyPolicy.choices,
        editable=False,
        help_text=_("What the job does when one of its dependencies fails or is cancelled."),
    )

    # True once a job waits for this one (or for its chain, of which this is the last
    # step): its completion then releases them; NULL (most jobs) completes on the plain path.
    waited_on = models.BooleanField(null=True, blank=True, editable=False)

    #: Set on the Jobs that ``enqueue()`` and ``bulk_enqueue()`` return: True when the call
    #: wrote this row, False when it returned an existing job with the same ``unique_key``
    #: instead (as ``get_or_create()``'s ``created``). None on jobs read from the database,
    #: and until the row is written when that waits for the caller's commit.
    created: bool | None = None

    objects: ClassVar[JobQuerySet] = QueueDatabaseManager.from_queryset(JobQuerySet)()  # type: ignore[assignment]

    class Meta:
        db_table = "sqlq_job"
        ordering = ["-id"]
        verbose_name = _("job")
        verbose_name_plural = _("jobs")
        permissions = [
            ("retry_job", _("Can retry jobs")),
            ("cancel_job", _("Can cancel jobs")),
        ]
        # Every index names the queries that read it (docs/explanation/partial-index.md has
        # the list). Claims and completions change ``status``, so on PostgreSQL no UPDATE of
        # a job is HOT: each writes a new row version and an entry into every index that is
        # not partial (the primary key, ``uuid``) and into each partial index whose
        # condition the new version meets. An index earns its place by a reader that needs
        # it; partial ones take only the rows their readers look for.
        indexes = [
            # The claim (QueueOps.claim_ids_sql): runnable jobs of a queue in claim order;
            # pending_queues() skips through it. Entered at enqueue, never again on the plain
            # path. Partial, so finished rows (millions, on a busy site) never enter it.
            models.Index(
                fields=["queue", "-priority", "scheduled_at", "id"],
                name="sqlq_job_claim_idx",
                condition=Q(status="pending"),
            ),
            # Future jobs, kept out of the claim's index: promote() moves those that come
            # due to pending (oldest first), next_due_in() tells an idle worker when to
            # wake. Jobs enqueued to run now never enter it.
            models.Index(
                fields=["scheduled_at"],
                name="sqlq_job_scheduled_idx",
                condition=Q(status="scheduled"),
            ),
            # The reaper (reap(): expired leases), running_counts() of the queue limits and
            # the dashboard's expired leases and running jobs: among the few processing
            # rows. Each claim enters a job once.
            models.Index(
                fields=["lease_expires_at"],
                name="sqlq_job_lease_idx",
                condition=Q(status="processing"),
            ),
            # The operators' list of failures, newest first (the Failed jobs admin), the
            # dashboard's and the metrics' failed counts. Partial: claims and completions
            # never touch it (a plain index on status would be rewritten by every claim).
            models.Index(fields=["-id"], name="sqlq_job_failed_idx", condition=Q(status="failed")),
            # Finished rows by status and time: the pruner (a status's oldest rows first,
            # per status so that pruning completed jobs after a day never walks the failed
            # ones kept for a month; prune() and prunable() repeat this condition, so that
            # SQLite's planner can use it) and the dashboard's throughput (a range of
            # completed_at per status, db.stats.FINISHED_SQL). Each job enters it once,
            # when it finishes. (Until 0013 a second, plain index on completed_at served
            # the dashboard: every enqueue, claim and completion wrote an entry in it.)
            models.Index(
                fields=["status", "completed_at"],
                name="sqlq_job_finished_idx",
                condition=any_status(statuses.FINISHED),
            ),
            # A key's jobs, finished ones too: holder_sql() (the job that holds a key) and
            # unique_for's look among recently finished ones. Partial: jobs without a key
            # never enter it.
            models.Index(
                fields=["unique_key"],
                name="sqlq_job_unique_key_idx",
                condition=Q(unique_key__isnull=False),
            ),
            # cancel_requests(): the cancel requests among a worker's running jobs (read
            # twice a second by each busy worker). Partial: only requested, still running
            # jobs ever enter it.
            models.Index(
                fields=["locked_by"],
                name="sqlq_job_cancel_idx",
                condition=Q(status="processing", cancel_requested_at__isnull=False),
            ),
        ]
        constraints = [
            # Every UPDATE that changes a status evaluates it (see any_status()).
            models.CheckConstraint(
                condition=any_status(statuses.ALL), name="sqlq_job_status_valid"
            ),
            # A chain's steps, in order (the admin's chain page, chain_last_step(),
            # has_next_step(), depends_on=[chain]); unique: a step is written once, in the
            # transaction that completes the step before it. Partial: jobs outside chains
            # never enter it.
            models.UniqueConstraint(
                fields=["chain_id", "chain_index"],
                name="sqlq_job_chain_step_unique",
                condition=Q(chain_id__isnull=False),
            ),
            models.CheckConstraint(
                condition=Q(priority__gte=PRIORITY_MIN, priority__lte=PRIORITY_MAX),
                name="sqlq_job_priority_range",
            ),
            models.CheckConstraint(
                condition=Q(max_attempts__gte=1), name="sqlq_job_max_attempts_positive"
            ),
            # One live job per unique_key, across processes and hosts. enqueue()'s
            # INSERT ... ON CONFLICT names this index by its columns and this condition
            # (django_sqlq.db.insert.UNIQUE_LIVE_SQL): change them together. The key first:
            # for the jobs without one (nearly all), the statuses are never read.
            models.UniqueConstraint(
                fields=["unique_key"],
                name="sqlq_job_unique_key_live",
                condition=Q(unique_key__isnull=False) & any_status(statuses.LIVE),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.type} #{self.pk} ({self.status})"

    @classmethod
    def check(cls, **kwargs: Any) -> list[Any]:
        # MariaDB: its shapes of the partial indexes come from migration 0015.
        return without_partial_index_warnings(super().check(**kwargs))

    @property
    def is_finished(self) -> bool:
        return self.status in FINISHED_STATUSES

    @property
    def chain(self) -> Chain:
        """The chain this job starts or belongs to, for ``depends_on=[job.chain]``: done
        when its last step completes (a job that never continues is a chain of one)."""
        if self.pk is None:
            raise ValueError(
                f"{self!r} is not written yet (enqueued on another database, it is written "
                "when the caller's transaction commits): it has no chain to wait for yet."
            )
        return Chain(self.chain_id if self.chain_id is not None else self.pk)


class Chain:
    """A chain of jobs (a job and the steps that continued it), named by its first job's
    id: ``enqueue(..., depends_on=[Chain(id)])`` waits until its last step completes."""

    __slots__ = ("id",)

    def __init__(self, id: int) -> None:
        if isinstance(id, bool) or not isinstance(id, int):
            raise TypeError(f"Chain() takes the id of the chain's first job, got {id!r}.")
        self.id = id

    def __repr__(self) -> str:
        return f"Chain({self.id})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Chain) and other.id == self.id

    def __hash__(self) -> int:
        return hash(("chain", self.id))

    def jobs(self, using: str | None = None) -> JobQuerySet:
        """Its steps, first first (the first job too, once it has continued)."""
        jobs = Job.objects.all() if using is None else Job.objects.using(using)
        return jobs.filter(Q(pk=self.id) | Q(chain_id=self.id)).order_by("chain_index", "id")


class FailedJob(Job):
    """Failed jobs, listed on their own in the admin."""

    class Meta:
        proxy = True
        verbose_name = _("failed job")
        verbose_name_plural = _("failed jobs")


class QueueDashboard(Job):
    """No data of its own: the queue dashboard's entry in the admin index, beside the lists.
    Its admin page opens the dashboard, which needs the view permission on jobs."""

    class Meta:
        proxy = True
        verbose_name = _("queue dashboard")
        verbose_name_plural = _("queue dashboard")
        default_permissions = ()
