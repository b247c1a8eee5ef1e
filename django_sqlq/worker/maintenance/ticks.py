"""The recurring-jobs ticker (``Scheduler``): enqueues the ticks of the recurring jobs
(``django_sqlq.schedules``).

Every worker runs it; there is no leader. At each pass it reads the newest recorded tick of
every schedule (one query), enqueues the ones that are due (``schedules.due_tick``; the tick
row's unique constraint lets one worker win each tick), then sleeps until the next tick of
any schedule (at most MAX_SLEEP, so that an injected or stepped clock is seen). On a
database error it logs, resets its connection and tries again after RETRY_SECONDS.

The schedules stored in the database (``DatabaseSchedule``, edited in the admin) are read
at each pass (one query over the enabled rows; unchanged rows are not parsed again), and
the scheduler passes at least every STORED_POLL_SECONDS: an added, edited, disabled or
deleted schedule is seen within that, without a restart. A stored schedule is watched from
the pass that first read it enabled: ticks from before (while it was disabled, or before it
existed) are missed ones, under its ``missed`` policy, as a code schedule's while every
worker was down.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from django.db import DatabaseError
from django.utils import timezone

from django_sqlq import registry, schedules
from django_sqlq.exceptions import SQLQError
from django_sqlq.worker.context import WorkerContext
from django_sqlq.worker.dbretry import reset_connection
from django_sqlq.worker.maintenance.service import PeriodicService

if TYPE_CHECKING:
    from django_sqlq.schedules import Schedule

logger = logging.getLogger("django_sqlq.worker")

MAX_SLEEP = 60.0
MIN_SLEEP = 0.01
RETRY_SECONDS = 5.0
STORED_POLL_SECONDS = 5.0  # how soon an edit in the admin is seen


class Scheduler(PeriodicService):
    name = "scheduler"

    def __init__(self, context: WorkerContext) -> None:
        super().__init__()
        self.context = context
        self.schedules: dict[str, Schedule] = {}
        self.watching_since: datetime | None = None
        self.active = True  # False for a --burst worker: no ticks
        self.stored: dict[str, Schedule] = {}  # the database's, as of the last pass
        self.stored_since: dict[str, datetime] = {}  # when this worker began watching each
        self._parsed: dict[Any, Schedule | str] = {}  # by row id and content
        self._stored_problem: str | None = None  # the last error reading the table, logged
        self._logged_errors: set[tuple[str, str]] = set()  # rows that cannot run, logged

    def now(self) -> datetime:
        """This host's clock (or the worker's injected one), aware: ticks are instants."""
        if self.context.clock is None:
            return datetime.now(UTC)
        now = self.context.clock()
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
                self.context.worker_id,
                schedules.describe(schedule, now),
                "" if active else " (not run by a --burst worker)",
            )

    def start(self) -> None:
        if self.active:  # also without code schedules: the database may get some
            super().start()

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                self.enqueue_due()
                wait = min(self.seconds_to_next(), STORED_POLL_SECONDS)
            except DatabaseError as exc:
                logger.warning(
                    "Worker %s: enqueueing recurring jobs failed (%s: %s); trying again in %.0fs",
                    self.context.worker_id,
                    type(exc).__name__,
                    exc,
                    RETRY_SECONDS,
                )
                reset_connection(self.context.database)
                wait = RETRY_SECONDS
            except Exception:  # a bug must not end recurring jobs on this worker
                logger.exception("Worker %s: the scheduler failed", self.context.worker_id)
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
            self.stored_since = {name: min(at, now) for name, at in self.stored_since.items()}
        # Where enqueue() writes jobs (SQLQ["DATABASE"]): the tick row must share the job's
        # transaction, whatever --database this worker serves.
        database = self.context.conf.DATABASE
        self.read_stored(now, database=database)
        every = {**self.stored, **self.schedules}  # names are unique: read_stored saw to it
        if not every:
            return []
        last = schedules.last_ticks(list(every), database=database)
        won = []
        for schedule in every.values():
            since = self.stored_since.get(schedule.name, self.watching_since)
            tick = schedules.due_tick(
                schedule, now=now, last=last.get(schedule.name), watching_since=since
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
                    self.context.worker_id,
                    schedule.name,
                    tick.isoformat(),
                    exc,
                )
                continue
            if job_id is None:
                continue
            won.append((schedule.name, tick, job_id))
            missed = tick < since
            # A routine tick is a DEBUG line (-v 3): an every-second schedule would otherwise
            # log a line a second. A missed tick run at start is rare and worth an INFO line.
            logger.log(
                logging.INFO if missed else logging.DEBUG,
                "Worker %s: schedule %s: enqueued job %d for the tick of %s%s",
                self.context.worker_id,
                schedule.name,
                job_id,
                tick.isoformat(),
                " (missed while no worker ran)" if missed else "",
            )
        if won:
            self.context.wake()
        return won

    def read_stored(self, now: datetime, *, database: str) -> None:
        """Read the database's schedules (one query): log each new or changed one as at
        start, and each that cannot run (once per version of its row); a schedule read for
        the first time (or enabled again) is watched from ``now``. If the table cannot be
        read, say so once and keep what was read last: the code schedules go on."""
        try:
            found = schedules.stored(database=database, code=self.schedules, cache=self._parsed)
        except DatabaseError as exc:
            problem = f"{type(exc).__name__}: {exc}"
            if problem != self._stored_problem:
                self._stored_problem = problem
                logger.warning(
                    "Worker %s: cannot read the schedules stored in the database (%s); "
                    "the others still run",
                    self.context.worker_id,
                    problem,
                )
            return
        self._stored_problem = None
        for name, schedule in found.schedules.items():
            if self.stored.get(name) != schedule:
                logger.info(
                    "Worker %s: %s (in the database)",
                    self.context.worker_id,
                    schedules.describe(schedule, now),
                )
        logged = set(self._logged_errors)
        for name, error in found.errors.items():
            if (name, error) not in logged:
                logger.error("Worker %s: %s; not run", self.context.worker_id, error)
        self._logged_errors = set(found.errors.items())
        gone = set(self.stored) - set(found.schedules)
        for name in sorted(gone):
            logger.info(
                "Worker %s: schedule %s was disabled or removed from the database",
                self.context.worker_id,
                name,
            )
        self.stored = found.schedules
        self.stored_since = {name: self.stored_since.get(name, now) for name in found.schedules}

    def seconds_to_next(self, now: datetime | None = None) -> float:
        """Seconds until the next tick of any schedule (at most MAX_SLEEP)."""
        now = now or self.now()
        ticks = [s.next_tick(now) for s in [*self.schedules.values(), *self.stored.values()]]
        soonest = min((tick for tick in ticks if tick is not None), default=None)
        if soonest is None:
            return MAX_SLEEP
        return max(MIN_SLEEP, min(MAX_SLEEP, (soonest - now).total_seconds()))
