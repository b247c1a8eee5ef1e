"""Which tick of a schedule is due, and enqueueing it once whatever the number of workers:
:func:`enqueue_tick` writes a ``ScheduleTick`` row (unique on name and tick time) and the job
in one transaction; a worker that loses the race to the row writes nothing. Which tick is
due is decided by :func:`due_tick` (see its docstring, and docs/howto/recurring-jobs.md)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Subquery
from django.utils import timezone as dj_timezone

from django_sqlq.api import enqueue
from django_sqlq.db import ops_for
from django_sqlq.exceptions import ConfigurationError
from django_sqlq.models import Job, ScheduleTick
from django_sqlq.recurrence.definition import SKIP, Schedule, find_task, origin

# Tick rows kept per schedule: the newest is what every worker compares with; the others
# are history for the admin. Older ones are deleted by the worker that wrote a new one.
KEEP_TICKS: Final = 10


def due_tick(
    schedule: Schedule, *, now: datetime, last: LastTick | None, watching_since: datetime
) -> datetime | None:
    """The tick to enqueue now, or None. Only ever the latest tick at or before ``now``
    (never a burst of catch-ups):

    - it is due if no worker recorded it yet (``last``, the newest recorded tick, is
      older) and it fell while this worker was watching (at or after ``watching_since``);
    - a tick that fell before this worker was watching and that no worker recorded was
      missed (every worker was down): ``run_once`` enqueues it (once: the tick row decides),
      ``skip`` does not. A schedule with no recorded tick at all was never seen (nor one
      whose cron or time zone changed since its last tick): nothing from before
      ``watching_since`` runs, whatever the policy. Nor does a stored schedule's whose
      last recorded tick is older than its row (a schedule deleted, then added again under
      the same name: a new schedule, whose history starts when it was saved).
    """
    if (
        last is not None
        and last.enqueued_at is not None
        and schedule.created_at is not None
        and last.enqueued_at < schedule.created_at
    ):
        last = None
    latest = schedule.latest_tick(now)
    if latest is None or (last is not None and latest <= last.tick_at):
        return None
    if latest >= watching_since:
        return latest
    if last is None or last.spec != schedule.spec or schedule.missed == SKIP:
        return None
    return latest


def enqueue_tick(schedule: Schedule, tick: datetime, *, database: str) -> int | None:
    """Enqueue ``schedule``'s job for ``tick`` unless a worker already did: the tick's row
    and the job are written in one transaction. Returns the job id, or None when the tick
    was already taken."""
    ticks = ScheduleTick.objects.using(database)
    stored = to_db(tick)
    # Read outside the transaction: on SQLite a transaction that reads first and then
    # writes cannot wait for the write lock (it fails with "database is locked").
    if ticks.filter(name=schedule.name, tick_at=stored).exists():
        return None
    try:
        with transaction.atomic(using=database):
            row_id = _claim_tick(schedule, stored, database=database)
            if row_id is None:
                return None  # another worker wrote this tick first (its transaction decided)
            job_id = enqueue_job(schedule, run_at=tick, database=database)
            ticks.filter(pk=row_id).update(job_id=job_id)
            trim(schedule.name, database=database)  # in the same commit: one fsync
    except IntegrityError:
        return None  # the same, where the engine raised instead
    return job_id


def _claim_tick(schedule: Schedule, stored: datetime, *, database: str) -> int | None:
    """Insert the tick's row unless it exists: ``INSERT ... ON CONFLICT DO NOTHING`` on the
    (name, tick_at) constraint, so that a worker that loses the race writes nothing and
    PostgreSQL logs no unique-violation ERROR for it (one per losing worker and tick). On
    PostgreSQL it waits for a transaction that inserted the same tick and has not committed
    yet. The row's id, or None when the tick was taken."""
    return ops_for(database).insert_tick(schedule.name, stored, schedule.spec)


def trim(name: str, *, database: str) -> int:
    """Delete the tick rows of ``name`` older than its KEEP_TICKS newest (one statement)."""
    ticks = ScheduleTick.objects.using(database).filter(name=name)
    oldest_kept = ticks.order_by("-tick_at").values("tick_at")[KEEP_TICKS - 1 : KEEP_TICKS]
    deleted, _ = ticks.filter(tick_at__lt=Subquery(oldest_kept)).delete()
    return deleted


def enqueue_job(schedule: Schedule, *, run_at: datetime | None, database: str) -> int:
    """Enqueue one job of ``schedule`` (scheduled at ``run_at``, None: now); its id. In the
    caller's transaction when it is on the queue database. The admin's "run now" calls it
    too, without a tick row."""
    if schedule.task is None:
        options: dict[str, Any] = {"queue": schedule.queue or "default", "using": database}
        if schedule.priority is not None:
            options["priority"] = schedule.priority
        return int(enqueue(schedule.target, schedule.payload, run_at=run_at, **options).pk)
    task = find_task(schedule.task)
    if task is None:
        raise ConfigurationError(f"{origin(schedule.source, schedule.name)}: not a @task.")
    changes: dict[str, Any] = {}
    if run_at is not None:
        changes["run_after"] = run_at
    if schedule.queue is not None:
        changes["queue_name"] = schedule.queue
    if schedule.priority is not None:
        changes["priority"] = schedule.priority
    if changes:
        task = task.using(**changes)
    result = task.enqueue(*schedule.args, **schedule.kwargs)
    return int(Job.objects.using(database).values_list("pk", flat=True).get(uuid=result.id))


@dataclass(frozen=True)
class LastTick:
    """A schedule's newest recorded tick, and the ``spec`` it ran under."""

    tick_at: datetime
    spec: str
    enqueued_at: datetime | None = None  # when a worker recorded it


def last_ticks(names: list[str], *, database: str) -> dict[str, LastTick]:
    """The newest recorded tick of each schedule that has one (one query over at most about
    KEEP_TICKS rows per schedule)."""
    rows = (
        ScheduleTick.objects.using(database)
        .filter(name__in=names)
        .order_by("-tick_at")
        .values_list("name", "tick_at", "spec", "enqueued_at")
    )
    found: dict[str, LastTick] = {}
    for name, tick_at, spec, enqueued_at in rows:
        if name not in found:
            found[name] = LastTick(from_db(tick_at), spec, from_db(enqueued_at))
    return found


def to_db(moment: datetime) -> datetime:
    """An aware time as Django stores it: as it is under USE_TZ, else naive in TIME_ZONE."""
    return moment if settings.USE_TZ else dj_timezone.make_naive(moment)


def from_db(moment: datetime) -> datetime:
    """A stored time, aware (naive ones are in TIME_ZONE, as Django wrote them)."""
    return moment if dj_timezone.is_aware(moment) else dj_timezone.make_aware(moment)


def describe(schedule: Schedule, now: datetime) -> str:
    """One line for the worker's start: name, cron, time zone, next run."""
    upcoming = schedule.next_tick(now)
    return (
        f"Schedule {schedule.name}: {schedule.target} cron={schedule.cron!r} "
        f"tz={schedule.timezone} missed={schedule.missed} "
        f"next={upcoming.astimezone(schedule.tz).isoformat() if upcoming else 'never'}"
    )
