"""The jobs table and the workers table."""

from __future__ import annotations

import os
import socket
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


def _queue_alias() -> str | None:
    """``SQLQ["DATABASE"]``, or None while the setting is invalid (the checks report it)."""
    from django_sqlq.conf import get_settings
    from django_sqlq.exceptions import ConfigurationError

    try:
        return get_settings().DATABASE
    except ConfigurationError:
        return None


class QueueDatabaseManager(models.Manager[Any]):
    """A manager whose querysets use the queue database (``SQLQ["DATABASE"]``) unless told
    otherwise with ``using()`` or ``db_manager()``: ``Job.objects`` reads the table the
    workers and the admin use, with or without a database router."""

    def get_queryset(self) -> models.QuerySet[Any]:
        queryset = super().get_queryset()
        if self._db is None:
            alias = _queue_alias()
            if alias is not None:
                queryset = queryset.using(alias)
        return queryset


class Job(models.Model):
    """One background job. Only ``django_sqlq.lifecycle`` changes ``status`` (and
    ``django_sqlq.workflows``, which it calls, for jobs that wait for others)."""

    id = models.BigAutoField(primary_key=True)
    # Unique, so indexed: the tasks backend's get_result() and the admin's search find a
    # job by it. Time-ordered (version 7): every row version of a job (its INSERT, its
    # claim's and its completion's UPDATE) enters this index, and recent jobs' entries sit
    # together at its end, where random (version 4) ones, as before 0013, landed on a
    # random leaf page each.
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
    # Cancel and progress (issue 15). Nullable, without defaults: added without rewriting
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

    # Workflows (issue 16). Nullable, without defaults: added without rewriting the table,
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
                condition=Q(status__in=statuses.FINISHED),
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
            models.CheckConstraint(
                condition=Q(status__in=JobStatus.values), name="sqlq_job_status_valid"
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
            # (django_sqlq.db.base.UNIQUE_LIVE_SQL): change them together.
            models.UniqueConstraint(
                fields=["unique_key"],
                name="sqlq_job_unique_key_live",
                condition=Q(unique_key__isnull=False, status__in=statuses.LIVE),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.type} #{self.pk} ({self.status})"

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


class QueueQuerySet(models.QuerySet["Queue"]):
    def paused(self) -> QueueQuerySet:
        return self.filter(paused=True)


class Queue(models.Model):
    """The operator's state of one queue (issue 15): paused or not, and the recent starts
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
        ``schedules.stored_errors``)."""
        from django.core.exceptions import ValidationError

        from django_sqlq import schedules

        if self.payload is None:
            self.payload = {}
        if self.args is None:
            self.args = []
        if self.kwargs is None:
            self.kwargs = {}
        errors = schedules.stored_errors(self)
        if errors:
            raise ValidationError(errors)


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
