"""What the admin's dashboard knows about the queue: counts per queue, throughput, workers,
and the alerts an operator should see first.

ORM aggregations only, each one bounded by an index, so the dashboard stays cheap on a table
of millions of finished rows:

- per-queue counts read only the scheduled, pending, processing and failed rows, one query per
  status, each served by that status's partial index (``sqlq_job_scheduled_idx``,
  ``sqlq_job_claim_idx``, ``sqlq_job_lease_idx``, ``sqlq_job_failed_idx``); completed rows are
  never counted; blocked jobs are found from the blockers' table (``sqlq_job_blocker``: a row
  there per thing a blocked job still waits for), then by primary key;
- throughput reads the rows that finished in the last day (``completed_at``);
- choices for the admin's filters read a fixed number of the newest rows (the primary key);
- retention reads the settings and one row of the maintenance table (the last prune).

Nothing here renders HTML; :mod:`django_sqlq.admin` and its templates do (the charts' bars
are computed here and drawn by a template as inline SVG).
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db.models import Count, Min, Q
from django.utils import formats, timezone
from django.utils.http import urlencode
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from django_sqlq.db import stats
from django_sqlq.models import Job, JobBlocker, JobStatus, Maintenance, WorkerProcess

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


def format_age(seconds: float) -> str:
    """A short, readable duration: "45 s", "3 min", "2 h 5 min", "3 d 4 h"."""
    seconds = max(0, int(seconds))
    if seconds < 60:
        return _("%d s") % seconds
    minutes = seconds // 60
    if minutes < 60:
        return _("%d min") % minutes
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return _("%(h)d h %(m)d min") % {"h": hours, "m": minutes}
    days, hours = divmod(hours, 24)
    return _("%(d)d d %(h)d h") % {"d": days, "h": hours}


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

    @property
    def last_hour(self) -> Bucket:
        return Bucket(
            start=self.minutes[0].start,
            completed=sum(b.completed for b in self.minutes),
            failed=sum(b.failed for b in self.minutes),
        )

    @property
    def last_day(self) -> Bucket:
        return Bucket(
            start=self.hours[0].start,
            completed=sum(b.completed for b in self.hours),
            failed=sum(b.failed for b in self.hours),
        )


# -- queries ------------------------------------------------------------------------------


def queue_rows(
    alias: str,
    now: datetime,
    *,
    configured: Sequence[str] = (),
    workers: Sequence[WorkerRow] = (),
) -> list[QueueRow]:
    """Pending (runnable now / scheduled later), processing, failed and blocked jobs per
    queue, and the oldest runnable job's scheduled time. Configured queues are listed even
    when empty."""
    jobs = Job.objects.using(alias)
    found: dict[str, dict[str, Any]] = defaultdict(dict)
    # One query per status, each served by that status's partial index (a single query
    # over several statuses makes the planners scan the table). A scheduled job whose time
    # has come (no worker has moved it to pending yet) counts as runnable.
    for waiting in (JobStatus.PENDING, JobStatus.SCHEDULED):
        for row in (
            jobs.filter(status=waiting)
            .values("queue")
            .annotate(
                runnable=Count("pk", filter=Q(scheduled_at__lte=now)),
                scheduled=Count("pk", filter=Q(scheduled_at__gt=now)),
                oldest=Min("scheduled_at", filter=Q(scheduled_at__lte=now)),
            )
            .order_by()
        ):
            counts = found[str(row["queue"])]
            counts["runnable"] = counts.get("runnable", 0) + row["runnable"]
            counts["scheduled"] = counts.get("scheduled", 0) + row["scheduled"]
            if row["oldest"] is not None:
                known = counts.get("oldest")
                counts["oldest"] = row["oldest"] if known is None else min(known, row["oldest"])
    for status in (JobStatus.PROCESSING, JobStatus.FAILED):
        for queue, n in (
            jobs.filter(status=status).values_list("queue").annotate(n=Count("pk")).order_by()
        ):
            found[queue][str(status)] = n
    # No index holds the blocked rows; the blockers' table names them (a blocked job has a
    # row there until it is released), and the primary key finds each.
    waiting_rows = JobBlocker.objects.using(alias).values("job_id")
    for queue, n in (
        jobs.filter(status=JobStatus.BLOCKED, pk__in=waiting_rows)
        .values_list("queue")
        .annotate(n=Count("pk"))
        .order_by()
    ):
        found[queue][str(JobStatus.BLOCKED)] = n
    live = [w for w in workers if w.alive]
    names = list(configured) + sorted(set(found) - set(configured))
    from django_sqlq.conf import get_settings

    limits = get_settings().QUEUE_LIMITS
    result = []
    for name in names:
        counts = found.get(name, {})
        result.append(
            QueueRow(
                name=name,
                runnable=counts.get("runnable", 0),
                scheduled=counts.get("scheduled", 0),
                processing=counts.get(JobStatus.PROCESSING, 0),
                failed=counts.get(JobStatus.FAILED, 0),
                blocked=counts.get(JobStatus.BLOCKED, 0),
                oldest_runnable_at=counts.get("oldest"),
                workers=sum(1 for w in live if w.serves(name)),
                configured=name in configured,
                now=now,
                limit=limits[name].describe() if name in limits else "",
            )
        )
    return result


def worker_rows(alias: str, now: datetime) -> list[WorkerRow]:
    """Workers that have not stopped: the live ones, then the ones that stopped reporting
    within the last day (a crash, a lost host), newest report first."""
    alive_since = now - timedelta(seconds=ALIVE_SECONDS)
    processes = list(
        WorkerProcess.objects.using(alias)
        .filter(stopped_at__isnull=True, last_seen_at__gte=now - LOST_WORKER_WINDOW)
        .order_by("-last_seen_at")[:MAX_WORKERS_SHOWN]
    )
    running: dict[str, int] = {}
    if processes:
        running = dict(
            Job.objects.using(alias)
            .processing()
            .filter(locked_by__in=[p.worker_id for p in processes])
            .values_list("locked_by")
            .annotate(n=Count("pk"))
            .order_by()
        )
    rows = [
        WorkerRow(
            worker_id=p.worker_id,
            hostname=p.hostname,
            pid=p.pid,
            queues=list(p.queues) if isinstance(p.queues, list) else [str(p.queues)],
            concurrency=p.concurrency,
            started_at=p.started_at,
            last_seen_at=p.last_seen_at,
            jobs_done=p.jobs_done,
            jobs_failed=p.jobs_failed,
            running=running.get(p.worker_id, 0),
            alive=p.last_seen_at >= alive_since,
            now=now,
        )
        for p in processes
    ]
    rows.sort(key=lambda w: not w.alive)  # stable: live first, each newest first
    return rows


def snapshot(
    alias: str, *, configured: Sequence[str] = (), now: datetime | None = None
) -> Snapshot:
    """The dashboard's live part: queues, workers and alerts. Seven small queries."""
    now = now or timezone.now()
    workers = worker_rows(alias, now)
    queues = queue_rows(alias, now, configured=configured, workers=workers)
    expired = Job.objects.using(alias).expired(now).count()
    newest_failure = (
        Job.objects.using(alias).failed().order_by("-id").values_list("completed_at", flat=True)
    ).first()
    snap = Snapshot(
        now=now,
        queues=queues,
        workers=workers,
        expired_leases=expired,
        newest_failure_at=newest_failure,
    )
    return replace(snap, alerts=alerts(snap))


#: Running jobs the dashboard lists (with their progress), oldest lease first.
RUNNING_ROWS = 20


def running_jobs(alias: str, limit: int = RUNNING_ROWS) -> list[Job]:
    """Up to ``limit`` processing jobs, read through the partial index of leases (only
    processing rows are in it), without their payload, result or errors."""
    return list(
        Job.objects.using(alias)
        .processing()
        .order_by("lease_expires_at")
        .defer("payload", "result", "errors", "last_error")[:limit]
    )


def alerts(snap: Snapshot) -> list[Alert]:
    """What is wrong, worst first: nobody works, a queue nobody serves or that falls behind,
    leases of dead workers, failed jobs waiting for an operator."""
    found: list[Alert] = []
    live = snap.live_workers
    waiting = sum(q.runnable for q in snap.queues)
    if not live and waiting:
        lost = [w for w in snap.workers if not w.alive]
        message = ngettext(
            "No worker is running: %(n)d job is waiting.",
            "No worker is running: %(n)d jobs are waiting.",
            waiting,
        ) % {"n": waiting}
        if lost:
            message += " " + _("The last worker reported %(ago)s (%(id)s).") % {
                "ago": lost[0].last_seen_display,
                "id": lost[0].worker_id,
            }
        else:
            message += " " + _("Start one with: python manage.py sqlq_worker")
        found.append(Alert("error", message, "workers"))
    for queue in snap.queues:
        if not queue.runnable:
            continue
        query = urlencode({"queue": queue.name, "when": "due"})
        if live and not queue.workers:
            found.append(
                Alert(
                    "error",
                    ngettext(
                        "No running worker serves queue “%(q)s”: %(n)d job is waiting.",
                        "No running worker serves queue “%(q)s”: %(n)d jobs are waiting.",
                        queue.runnable,
                    )
                    % {"q": queue.name, "n": queue.runnable},
                    "jobs",
                    query,
                )
            )
        elif live and (queue.oldest_wait or 0) >= WAITING_ALERT_SECONDS:
            found.append(
                Alert(
                    "warning",
                    ngettext(
                        "Queue “%(q)s” is falling behind: %(n)d job is waiting, "
                        "the oldest for %(age)s.",
                        "Queue “%(q)s” is falling behind: %(n)d jobs are waiting, "
                        "the oldest for %(age)s.",
                        queue.runnable,
                    )
                    % {"q": queue.name, "n": queue.runnable, "age": queue.oldest_wait_display},
                    "jobs",
                    query,
                )
            )
    if snap.expired_leases:
        found.append(
            Alert(
                "warning",
                ngettext(
                    "%(n)d running job's worker stopped renewing its lease; a worker will "
                    "return it to the queue.",
                    "%(n)d running jobs' workers stopped renewing their leases; a worker will "
                    "return them to the queue.",
                    snap.expired_leases,
                )
                % {"n": snap.expired_leases},
                "jobs",
                urlencode({"status__exact": JobStatus.PROCESSING}),
            )
        )
    failed = sum(q.failed for q in snap.queues)
    if failed:
        message = ngettext(
            "%(n)d job failed and waits for an operator.",
            "%(n)d jobs failed and wait for an operator.",
            failed,
        ) % {"n": failed}
        if snap.newest_failure_at is not None:
            message += " " + _("The last one failed %(ago)s ago.") % {
                "ago": format_age((snap.now - snap.newest_failure_at).total_seconds())
            }
        found.append(Alert("warning", message, "failed"))
    return found


_hour_cache: dict[tuple[str, datetime], tuple[int, int]] = {}
_hour_cache_lock = threading.Lock()


def clear_cache() -> None:
    """Forget the cached per-hour counts (tests call this between tests)."""
    with _hour_cache_lock:
        _hour_cache.clear()


def _finished_per_minute(
    alias: str, since: datetime, until: datetime
) -> dict[datetime, dict[str, int]]:
    """Completed and failed jobs per UTC minute with ``since <= completed_at < until``: one
    query, a range of ``sqlq_job_finished_idx`` per status."""
    rows = (
        Job.objects.using(alias)
        .filter(
            stats.finished(),
            completed_at__gte=since,
            completed_at__lt=until,
            status__in=[JobStatus.COMPLETED, JobStatus.FAILED],
        )
        .annotate(minute=stats.finished_minute(alias))
        .values("minute", "status")
        .annotate(n=Count("pk"))
        .order_by()
    )
    counts: dict[datetime, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for row in rows:
        counts[stats.as_minute(row["minute"])][row["status"]] += row["n"]
    return counts


def throughput(alias: str, *, now: datetime | None = None, cache: bool = False) -> Throughput:
    """Completed and failed jobs per minute (last hour) and per hour (last day). Buckets are
    whole UTC minutes and hours; the last one is the current, partial one.

    The last hour is counted on every call. With ``cache``, the counts of hours that are over
    are kept in this process, so a dashboard refreshing itself reads only the last hour's
    rows (plus, once an hour, the hour that just ended) however busy the day was."""
    now = now or timezone.now()
    utc_now = now.astimezone(UTC)
    this_minute = utc_now.replace(second=0, microsecond=0)
    this_hour = this_minute.replace(minute=0)
    first_minute = this_minute - timedelta(minutes=59)
    first_hour = this_hour - timedelta(hours=23)
    end = this_minute + timedelta(minutes=1)

    per_minute = _finished_per_minute(alias, first_minute, end)
    minutes = [
        Bucket(start, per_minute[start][JobStatus.COMPLETED], per_minute[start][JobStatus.FAILED])
        if start in per_minute
        else Bucket(start)
        for start in (first_minute + timedelta(minutes=i) for i in range(60))
    ]

    hour_starts = [first_hour + timedelta(hours=i) for i in range(24)]
    cached: dict[datetime, tuple[int, int]] = {}
    if cache:
        with _hour_cache_lock:
            for key in [k for k in _hour_cache if k[0] == alias and k[1] < first_hour]:
                del _hour_cache[key]
            cached = {h: _hour_cache[(alias, h)] for h in hour_starts if (alias, h) in _hour_cache}
    # Rows before the minutes' window, for the hours not cached: one more range read.
    unread = [h for h in hour_starts if h not in cached and h < first_minute]
    earlier = _finished_per_minute(alias, unread[0], first_minute) if unread else {}
    totals: dict[datetime, list[int]] = defaultdict(lambda: [0, 0])
    for counts in (earlier, per_minute):
        for minute, by_status in counts.items():
            total = totals[minute.replace(minute=0)]
            total[0] += by_status[JobStatus.COMPLETED]
            total[1] += by_status[JobStatus.FAILED]
    hours = {h: cached[h] if h in cached else (totals[h][0], totals[h][1]) for h in hour_starts}
    if cache:
        # An hour is kept once it ended more than a minute ago (late commits land first).
        with _hour_cache_lock:
            for hour in hour_starts:
                if hour + timedelta(hours=1, minutes=1) <= utc_now:
                    _hour_cache[(alias, hour)] = hours[hour]
    return Throughput(
        now=now,
        minutes=minutes,
        hours=[Bucket(h, *hours[h]) for h in hour_starts],
    )


def recent_values(alias: str, field_name: str, limit: int = RECENT_ROWS) -> list[str]:
    """Distinct values of ``field_name`` among the newest ``limit`` jobs: a bounded,
    primary-key ordered read, never a scan of the whole table."""
    newest = Job.objects.using(alias).order_by("-id").values_list(field_name, flat=True)[:limit]
    return sorted(set(newest))


def bounded_count(queryset: Any, limit: int) -> int:
    """``min(count, limit + 1)``: a ``COUNT`` over a ``LIMIT``-ed subquery, so at most
    ``limit + 1`` rows are read however large the table is."""
    return int(queryset.order_by().values("pk")[: limit + 1].count())


# -- charts: geometry for the dashboard's SVG template -------------------------------------


@dataclass(frozen=True)
class ChartBar:
    x: float
    width: float
    completed_y: float
    completed_height: float
    failed_y: float
    failed_height: float
    title: str


@dataclass(frozen=True)
class Chart:
    """A stacked bar chart (completed below, failed above), drawn by an SVG template."""

    width: int
    height: int
    plot_top: int
    plot_bottom: int
    bars: list[ChartBar]
    labels: list[tuple[float, str]]
    peak: int
    unit: str
    completed: int
    failed: int

    @property
    def plot_height(self) -> int:
        return self.plot_bottom - self.plot_top


def chart(buckets: Sequence[Bucket], *, label_every: int, label_format: str, unit: str) -> Chart:
    """Bars for ``buckets`` on a 600 x 130 canvas, scaled to the busiest bucket, with a time
    label (in the current time zone) every ``label_every`` bars."""
    width, height, top, bottom = 600, 130, 12, 110
    peak = max((b.total for b in buckets), default=0)
    scale = (bottom - top) / peak if peak else 0.0
    step = width / max(1, len(buckets))
    bars, labels = [], []
    for i, bucket in enumerate(buckets):
        completed = bucket.completed * scale
        failed = bucket.failed * scale
        start = timezone.localtime(bucket.start)
        stamp = formats.date_format(start, label_format)
        bars.append(
            ChartBar(
                x=round(i * step + 1, 2),
                width=round(max(1.0, step - 2), 2),
                completed_y=round(bottom - completed, 2),
                completed_height=round(completed, 2),
                failed_y=round(bottom - completed - failed, 2),
                failed_height=round(failed, 2),
                title=_("%(when)s: %(c)d completed, %(f)d failed")
                % {"when": stamp, "c": bucket.completed, "f": bucket.failed},
            )
        )
        if i % label_every == 0:
            labels.append((round(i * step + 1, 2), stamp))
    return Chart(
        width=width,
        height=height,
        plot_top=top,
        plot_bottom=bottom,
        bars=bars,
        labels=labels,
        peak=peak,
        unit=unit,
        completed=sum(b.completed for b in buckets),
        failed=sum(b.failed for b in buckets),
    )


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


def retention(alias: str) -> Retention:
    """The dashboard's retention panel: the settings, and one row (the last prune)."""
    from django_sqlq.conf import get_settings

    conf = get_settings()
    labels = dict(JobStatus.choices)
    kept = [
        KeptStatus(status=status, label=str(labels[status]), seconds=seconds)
        for status, seconds in conf.KEEP_FINISHED.items()
    ]
    last = Maintenance.objects.using(alias).filter(duty="prune").first()
    return Retention(kept=kept, interval=conf.PRUNE_INTERVAL, last=last)
