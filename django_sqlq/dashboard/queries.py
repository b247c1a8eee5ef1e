"""The dashboard's reads: counts per queue, throughput, workers, running jobs, retention.

ORM aggregations only, each one bounded by an index, so the dashboard stays cheap on a table
of millions of finished rows:

- per-queue counts read only the scheduled, pending, processing and failed rows, one query per
  status, each served by that status's partial index (``sqlq_job_scheduled_idx``,
  ``sqlq_job_claim_idx``, ``sqlq_job_lease_idx``, ``sqlq_job_failed_idx``); completed rows are
  never counted; blocked jobs are found from the blockers' table (``sqlq_job_blocker``: a row
  there per thing a blocked job still waits for), then by primary key;
- throughput reads the rows that finished in the last day (``completed_at``);
- choices for the admin's filters read a fixed number of the newest rows (the primary key);
- retention reads the settings and one row of the maintenance table (the last prune);
- the jobs asleep in durable steps are found from the steps' table (``sqlq_job_step``, far
  smaller than the jobs'), each job by primary key.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db.models import Count, Exists, Min, OuterRef, Q
from django.utils import timezone

from django_sqlq.conf import get_settings
from django_sqlq.dashboard.alerts import alerts
from django_sqlq.dashboard.rows import (
    ALIVE_SECONDS,
    LOST_WORKER_WINDOW,
    MAX_WORKERS_SHOWN,
    RECENT_ROWS,
    Bucket,
    KeptStatus,
    QueueRow,
    Retention,
    Snapshot,
    Throughput,
    WorkerRow,
)
from django_sqlq.db import stats
from django_sqlq.models import Job, JobBlocker, JobStatus, JobStep, StepState, WorkerProcess
from django_sqlq.retention import last_prune


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


def asleep_counts(alias: str) -> dict[str, int]:
    """The jobs asleep in a durable sleep (``sleeping``) and waiting for an event
    (``waiting``): scheduled jobs with a step in that state. One query, driven from the
    steps' table (its sleeping and waiting rows), each one's job read by primary key."""
    live = Job.objects.using(alias).filter(pk=OuterRef("job_id"), status=JobStatus.SCHEDULED)
    rows = (
        JobStep.objects.using(alias)
        .filter(Exists(live), state__in=[StepState.SLEEPING, StepState.WAITING])
        .values("state")
        .annotate(n=Count("job_id", distinct=True))
        .order_by()
    )
    return {str(row["state"]): int(row["n"]) for row in rows}


def snapshot(
    alias: str, *, configured: Sequence[str] = (), now: datetime | None = None
) -> Snapshot:
    """The dashboard's live part: queues, workers, alerts and the jobs asleep in durable
    steps. Eight small queries."""
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
    asleep = asleep_counts(alias)
    return replace(
        snap,
        alerts=alerts(snap),
        sleeping=asleep.get(StepState.SLEEPING, 0),
        waiting_for_event=asleep.get(StepState.WAITING, 0),
    )


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


def retention(alias: str) -> Retention:
    """The dashboard's retention panel: the settings, and one row (the last prune)."""
    conf = get_settings()
    labels = dict(JobStatus.choices)
    kept = [
        KeptStatus(status=status, label=str(labels[status]), seconds=seconds)
        for status, seconds in conf.KEEP_FINISHED.items()
    ]
    return Retention(kept=kept, interval=conf.PRUNE_INTERVAL, last=last_prune(alias))
