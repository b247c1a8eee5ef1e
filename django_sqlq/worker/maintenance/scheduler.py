"""The scheduler: enqueues the ticks of recurring jobs (``django_sqlq.schedules``).

Every worker runs it; there is no leader. At each pass it reads the newest recorded tick of
every schedule (one query), enqueues the ones that are due (``schedules.due_tick``; the tick
row's unique constraint lets one worker win each tick), then sleeps until the next tick of
any schedule (at most MAX_SLEEP, so that an injected or stepped clock is seen). On a
database error it logs, resets its connection and tries again after RETRY_SECONDS.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from django.db import DatabaseError
from django.utils import timezone

from django_sqlq import registry, schedules
from django_sqlq.exceptions import SQLQError
from django_sqlq.worker.maintenance.service import PeriodicService
from django_sqlq.worker.retry import reset_connection

if TYPE_CHECKING:
    from django_sqlq.schedules import Schedule
    from django_sqlq.worker.core import Worker

logger = logging.getLogger("django_sqlq.worker")

MAX_SLEEP = 60.0
MIN_SLEEP = 0.01
RETRY_SECONDS = 5.0


class Scheduler(PeriodicService):
    name = "scheduler"

    def __init__(self, worker: Worker) -> None:
        super().__init__()
        self.worker = worker
        self.schedules: dict[str, Schedule] = {}
        self.watching_since: datetime | None = None
        self.enqueued = 0  # ticks this worker won
        self.active = True  # False for a --burst worker: no ticks

    def now(self) -> datetime:
        """This host's clock (or the worker's injected one), aware: ticks are instants."""
        if self.worker.clock is None:
            return datetime.now(UTC)
        now = self.worker.clock()
        return now if timezone.is_aware(now) else timezone.make_aware(now)

    def prepare(self, *, active: bool = True) -> None:
        """Import the apps' jobs.py and tasks.py (as the worker does at start; a test that
        calls this alone needs no import of its own), load and check the declared schedules
        and log one line per schedule. Raises ConfigurationError naming a bad entry. Not
        ``active`` (a --burst worker): checked and logged, no tick enqueued."""
        registry.autodiscover()
        self.active = active
        self.schedules = schedules.load()
        schedules.check_targets(self.schedules)
        now = self.now()
        for schedule in self.schedules.values():
            logger.info(
                "Worker %s: %s%s",
                self.worker.worker_id,
                schedules.describe(schedule, now),
                "" if active else " (not run by a --burst worker)",
            )

    def start(self) -> None:
        if self.schedules and self.active:
            super().start()

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                self.enqueue_due()
                wait = self.seconds_to_next()
            except DatabaseError as exc:
                logger.warning(
                    "Worker %s: enqueueing recurring jobs failed (%s: %s); trying again in %.0fs",
                    self.worker.worker_id,
                    type(exc).__name__,
                    exc,
                    RETRY_SECONDS,
                )
                reset_connection(self.worker.database)
                wait = RETRY_SECONDS
            except Exception:  # a bug must not end recurring jobs on this worker
                logger.exception("Worker %s: the scheduler failed", self.worker.worker_id)
                wait = RETRY_SECONDS
            self.stopping.wait(wait)

    def enqueue_due(self, now: datetime | None = None) -> list[tuple[str, datetime, int]]:
        """Enqueue every schedule's due tick; returns (name, tick, job id) for those this
        worker won."""
        now = now or self.now()
        if self.watching_since is None or now < self.watching_since:
            # From now on (also after the clock stepped back: a tick that falls from here,
            # while this worker runs, is not one it missed).
            self.watching_since = now
        if not self.schedules:
            return []
        # Where enqueue() writes jobs (SQLQ["DATABASE"]): the tick row must share the job's
        # transaction, whatever --database this worker serves.
        database = self.worker.conf.DATABASE
        last = schedules.last_ticks(list(self.schedules), database=database)
        won = []
        for schedule in self.schedules.values():
            tick = schedules.due_tick(
                schedule, now=now, last=last.get(schedule.name), watching_since=self.watching_since
            )
            if tick is None:
                continue
            try:
                job_id = schedules.enqueue_tick(schedule, tick, database=database)
            except (SQLQError, ValueError, TypeError) as exc:
                # This schedule's job cannot be enqueued (its payload grew past
                # MAX_PAYLOAD_BYTES, its @task was removed...): say so, serve the others.
                logger.error(
                    "Worker %s: schedule %s: cannot enqueue the tick of %s: %s",
                    self.worker.worker_id,
                    schedule.name,
                    tick.isoformat(),
                    exc,
                )
                continue
            if job_id is None:
                continue
            self.enqueued += 1
            won.append((schedule.name, tick, job_id))
            missed = tick < self.watching_since
            # A routine tick is a DEBUG line (-v 3): an every-second schedule would otherwise
            # log a line a second. A missed tick run at start is rare and worth an INFO line.
            logger.log(
                logging.INFO if missed else logging.DEBUG,
                "Worker %s: schedule %s: enqueued job %d for the tick of %s%s",
                self.worker.worker_id,
                schedule.name,
                job_id,
                tick.isoformat(),
                " (missed while no worker ran)" if missed else "",
            )
        if won:
            self.worker.wake()
        return won

    def seconds_to_next(self, now: datetime | None = None) -> float:
        """Seconds until the next tick of any schedule (at most MAX_SLEEP)."""
        now = now or self.now()
        ticks = [s.next_tick(now) for s in self.schedules.values()]
        soonest = min((tick for tick in ticks if tick is not None), default=None)
        if soonest is None:
            return MAX_SLEEP
        return max(MIN_SLEEP, min(MAX_SLEEP, (soonest - now).total_seconds()))
