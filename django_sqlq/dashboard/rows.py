"""What the dashboard shows, as values: a queue's line, a worker's, an alert, the live
snapshot, throughput buckets and the retention panel; and the thresholds that decide
"alive" and "falling behind"."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.utils.translation import gettext as _

from django_sqlq.dashboard.durations import format_age
from django_sqlq.models import JobStatus, Maintenance

# A worker that has not reported for this long is shown as not responding. Workers report
# at least every 10 seconds (a third of the lease, at most 10 s), so this is 3 missed beats.
ALIVE_SECONDS = 30
# Runnable jobs that have waited this long mean the queue is not keeping up (or is stuck).
WAITING_ALERT_SECONDS = 300
# Workers shown that stopped reporting without saying goodbye, within this window.
LOST_WORKER_WINDOW = timedelta(days=1)
MAX_WORKERS_SHOWN = 50
# How many of the newest rows the filter choices are sampled from.
RECENT_ROWS = 1000


@dataclass(frozen=True)
class QueueRow:
    """One queue's line on the dashboard."""

    name: str
    runnable: int = 0
    scheduled: int = 0
    processing: int = 0
    failed: int = 0
    blocked: int = 0  # waiting for other jobs (depends_on)
    oldest_runnable_at: datetime | None = None
    workers: int = 0
    configured: bool = True
    now: datetime | None = None
    limit: str = ""  # its global limit (SQLQ["QUEUE_LIMITS"]), described: "concurrency 2"

    @property
    def oldest_wait(self) -> float | None:
        """Seconds the oldest runnable job has been waiting, or None when none waits."""
        if self.oldest_runnable_at is None or self.now is None:
            return None
        return max(0.0, (self.now - self.oldest_runnable_at).total_seconds())

    @property
    def oldest_wait_display(self) -> str:
        wait = self.oldest_wait
        return "" if wait is None else format_age(wait)

    @property
    def stuck(self) -> bool:
        return self.runnable > 0 and (
            self.workers == 0 or (self.oldest_wait or 0) >= WAITING_ALERT_SECONDS
        )


@dataclass(frozen=True)
class WorkerRow:
    """A worker process as it last reported itself."""

    worker_id: str
    hostname: str
    pid: int
    queues: list[str]
    concurrency: int
    started_at: datetime
    last_seen_at: datetime
    jobs_done: int
    jobs_failed: int
    running: int
    alive: bool
    now: datetime

    @property
    def last_seen_display(self) -> str:
        return _("%s ago") % format_age((self.now - self.last_seen_at).total_seconds())

    @property
    def queues_display(self) -> str:
        return ", ".join(str(q) for q in self.queues) if self.queues else "-"

    def serves(self, queue: str) -> bool:
        return "*" in self.queues or queue in self.queues


@dataclass(frozen=True)
class Alert:
    """Something an operator should look at. ``target`` names the admin list that shows it
    ("jobs", "failed", "workers" or ""), ``query`` the filters for that list."""

    level: str  # "error" or "warning"
    message: str
    target: str = ""
    query: str = ""


@dataclass(frozen=True)
class Snapshot:
    """Everything the dashboard's live part shows, read at ``now``."""

    now: datetime
    queues: list[QueueRow]
    workers: list[WorkerRow]
    expired_leases: int
    newest_failure_at: datetime | None
    alerts: list[Alert] = field(default_factory=list)
    # Jobs asleep in a durable sleep, and waiting for an event (context.sleep(),
    # wait_for_event()): scheduled, so also counted in the queues' "scheduled later".
    sleeping: int = 0
    waiting_for_event: int = 0

    @property
    def live_workers(self) -> list[WorkerRow]:
        return [w for w in self.workers if w.alive]

    @property
    def totals(self) -> QueueRow:
        return QueueRow(
            name="",
            runnable=sum(q.runnable for q in self.queues),
            scheduled=sum(q.scheduled for q in self.queues),
            processing=sum(q.processing for q in self.queues),
            failed=sum(q.failed for q in self.queues),
            blocked=sum(q.blocked for q in self.queues),
            oldest_runnable_at=min(
                (q.oldest_runnable_at for q in self.queues if q.oldest_runnable_at),
                default=None,
            ),
            workers=len(self.live_workers),
            now=self.now,
        )


@dataclass(frozen=True)
class Bucket:
    start: datetime
    completed: int = 0
    failed: int = 0

    @property
    def total(self) -> int:
        return self.completed + self.failed


@dataclass(frozen=True)
class Throughput:
    """Jobs that finished (completed, or failed for good) per minute over the last hour and
    per hour over the last day, oldest bucket first; the last bucket is the current one."""

    now: datetime
    minutes: list[Bucket]
    hours: list[Bucket]


@dataclass(frozen=True)
class KeptStatus:
    status: str
    label: str
    seconds: int | None

    @property
    def display(self) -> str:
        if self.seconds is None:
            return _("for ever")
        if self.seconds == 0:
            return _("pruned at once")
        return format_age(self.seconds)


@dataclass(frozen=True)
class Retention:
    """What is kept (``KEEP_FINISHED``, per finished status) and the last prune."""

    kept: list[KeptStatus]
    interval: float
    last: Maintenance | None

    @property
    def prunes(self) -> bool:
        return any(k.seconds is not None for k in self.kept)

    @property
    def last_details(self) -> str:
        if self.last is None or not self.last.last_details:
            return ""
        details = self.last.last_details
        return ", ".join(
            f"{label} {details[status]}"
            for status, label in JobStatus.choices
            if status in details
        )
