"""The worker: claims jobs, runs their handlers, records outcomes, keeps its leases alive.

Threads, each with its own database connection:

- the main thread claims up to as many jobs as there are free slots, in one statement,
  and hands them to the runner threads;
- ``concurrency`` runner threads run handlers and write each outcome (fenced by worker id
  and attempt number);
- one heartbeat thread renews the leases of all the jobs this worker holds in one
  statement (until the last running job is finished, also after SIGTERM), records the
  worker's liveness, and returns expired leases of dead workers to the queue.

Signal handlers only set an event. On stop the worker claims nothing more, lets running
jobs finish, gives back jobs it claimed but did not start, and returns. A second signal
gives back the unstarted jobs, records each interrupted attempt as failed at once (retried
or failed by its attempts, fenced like every outcome; a job whose outcome cannot be written
is left to its lease), and exits.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import queue as queue_module
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from django.db import DatabaseError, connections

from django_sqlq import lifecycle, registry, validation
from django_sqlq.conf import Settings, get_settings
from django_sqlq.db import (
    is_missing_table,
    is_transient,
    ops_for,
)
from django_sqlq.db.base import ClaimedJob
from django_sqlq.exceptions import (
    SQLQError,
)
from django_sqlq.models import Job, WorkerProcess
from django_sqlq.worker.completer import FLUSH_INTERVAL, Completer
from django_sqlq.worker.inbox import STOP
from django_sqlq.worker.maintenance import Heartbeat, HeldJobs, Reaper, Service, Tidier
from django_sqlq.worker.pool import RunnerPool
from django_sqlq.worker.retry import back_off, with_retry
from django_sqlq.worker.signals import ForcedStop, worker_signals

logger = logging.getLogger("django_sqlq.worker")
# A line per job (started: DEBUG, finished: INFO). sqlq_worker shows them from -v 2; at the
# default verbosity a summary line every SUMMARY_INTERVAL seconds stands in for them.
job_logger = logging.getLogger("django_sqlq.worker.jobs")

Clock = Callable[[], datetime]

# Fast jobs are claimed ahead, up to MAX_PREFETCH or about PREFETCH_WINDOW seconds of work.
MAX_PREFETCH = 200
PREFETCH_WINDOW = 0.05
# A claimed job waits at most PREFETCH_HOLD seconds for one of this worker's threads; then
# it is given back to the queue (and other workers are woken), and this worker prefetches
# nothing for PREFETCH_COOLDOWN seconds. So prefetch never keeps a job from another
# worker's free thread for longer than that.
PREFETCH_HOLD = 0.5
PREFETCH_COOLDOWN = 5.0
# While jobs are being finished, one summary line at most every SUMMARY_INTERVAL seconds.
SUMMARY_INTERVAL = 5.0
# Scheduled jobs moved to pending per statement, oldest first, when their time has come.
PROMOTE_BATCH = 1000


class WorkerError(SQLQError, RuntimeError):
    """The worker cannot start (for example: the jobs table does not exist)."""


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class _Inbox:
    """Claimed jobs waiting for a runner thread: a deque under one condition, so that a
    batch of claimed jobs is handed over with one notify (queue.Queue notifies per item).
    Each item carries the time it was put in, so that jobs waiting too long can be given
    back (see PREFETCH_HOLD)."""

    def __init__(self) -> None:
        self._items: deque[tuple[float, Any]] = deque()
        self._ready = threading.Condition()

    def __len__(self) -> int:
        return len(self._items)

    def put_many(self, items: Sequence[Any]) -> None:
        now = time.monotonic()
        with self._ready:
            self._items.extend((now, item) for item in items)
            self._ready.notify(len(items))

    def put(self, item: Any) -> None:
        self.put_many([item])

    def get(self) -> Any:
        try:
            return self._items.popleft()[1]  # atomic: no lock needed when there is work
        except IndexError:
            pass
        with self._ready:
            while not self._items:
                self._ready.wait()
            return self._items.popleft()[1]

    def get_nowait(self) -> Any:
        with self._ready:
            if not self._items:
                raise queue_module.Empty
            return self._items.popleft()[1]

    def oldest(self) -> float | None:
        """When the item that has waited longest was put in, or None if empty."""
        try:
            return self._items[0][0]
        except IndexError:
            return None

    def take_older_than(self, cutoff: float) -> list[Any]:
        """Remove and return the items put in before ``cutoff`` (the oldest come first)."""
        taken: list[Any] = []
        with self._ready:
            while True:
                try:
                    item = self._items.popleft()  # a runner may take items meanwhile
                except IndexError:
                    break
                if item[0] >= cutoff or item[1] is STOP:
                    self._items.appendleft(item)
                    break
                taken.append(item[1])
        return taken


class _ChangeWatch:
    """Tells an idle worker that the jobs table may have changed, cheaply.

    SQLite: ``PRAGMA data_version`` moves when any other connection commits; checked every
    ``interval`` seconds. PostgreSQL: a LISTEN connection in a thread wakes the worker when
    an enqueue commits (see db.postgresql.listen). Either way, polling the table every
    ``poll_interval`` remains the fallback (for scheduled jobs coming due and for lost
    notifications).
    """

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.flag = threading.Event()
        self.ops = ops_for(worker.database)
        self.interval = self.ops.change_check_interval(worker.poll_interval)
        self.last = self._version()
        # SQLQ["LISTEN_DATABASE"]: LISTEN through another alias of the queue's database
        # (a direct connection beside a transaction-mode pooler).
        listen_alias = worker.conf.LISTEN_DATABASE
        if worker.database != worker.conf.DATABASE:
            listen_alias = None
        self.listener = self.ops.listen(
            queues=worker.queues,
            wake=self._notified,
            stop=worker.stop_event,
            logger=logger,
            alias=listen_alias,
            probe=self._probe,
        )

    def _probe(self, token: str) -> None:
        """Send a NOTIFY the way enqueues do: through the queue's database alias (called
        from the LISTEN thread, on a connection of that thread's own)."""
        try:
            ops_for(self.worker.database).notify([token])
        finally:
            connections[self.worker.database].close()

    def _notified(self) -> None:
        self.flag.set()
        self.worker.wake()

    def _version(self) -> Any:
        try:
            return self.ops.data_version()
        except DatabaseError:
            return None

    def seen(self) -> bool:
        """True once after something changed since the last call."""
        if self.flag.is_set():
            self.flag.clear()
            return True
        version = self._version()
        if version is not None and version != self.last:
            self.last = version
            return True
        return False


class Worker:
    """Runs jobs from the queue database until stopped (or, with ``burst``, until idle)."""

    def __init__(
        self,
        *,
        queues: Sequence[str] | None = None,
        exclude_queues: Sequence[str] = (),
        all_queues: bool = False,
        concurrency: int = 1,
        poll_interval: float | None = None,
        database: str | None = None,
        worker_id: str | None = None,
        max_jobs: int | None = None,
        lease_seconds: float | None = None,
        clock: Clock | None = None,
        backoff: Callable[[int], float] | None = None,
        settings: Settings | None = None,
        on_ready: Callable[[Worker], None] | None = None,
    ) -> None:
        conf = settings or get_settings()
        self.on_ready = on_ready
        self.conf = conf
        self.database = database or conf.DATABASE
        # None serves every queue (the tasks backend's "*"), less exclude_queues.
        self.queues: tuple[str, ...] | None = (
            None if all_queues else tuple(queues) if queues is not None else conf.QUEUES
        )
        self.exclude_queues = tuple(exclude_queues)
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.concurrency = concurrency
        self.poll_interval = validation.seconds(
            "poll_interval",
            poll_interval if poll_interval is not None else conf.POLL_INTERVAL,
            maximum=validation.MAX_INTERVAL_SECONDS,
            allow_zero=True,
            error=ValueError,
        )
        self.worker_id = (
            validation.check_worker_id(worker_id) if worker_id else default_worker_id()
        )
        self.max_jobs = max_jobs
        self.lease_seconds = validation.seconds(
            "lease_seconds",
            lease_seconds if lease_seconds is not None else conf.LEASE_SECONDS,
            maximum=validation.MAX_INTERVAL_SECONDS,
            error=ValueError,
        )
        self.clock = clock
        if backoff is None:
            conf.backoff_function()  # a policy that cannot be imported: an error at start
        self.backoff = backoff or (lambda attempts: lifecycle.backoff_seconds(attempts, conf))

        self.stop_event = threading.Event()
        self.wakeup = threading.Event()
        self.held = HeldJobs()
        self.completer = Completer(self)
        self.pool = RunnerPool(self)
        self._no_prefetch_until = 0.0  # see _give_back_waiting
        self._summary_at = 0.0
        self._summary_counts = (0, 0, 0)
        self.jobs_claimed = 0
        self.claims = 0  # claim statements run; each starts at the next queue (fairness)
        self._due_at = 0.0  # time.monotonic() when the next scheduled job is due (see _stage)
        self._due_checked = 0.0  # when _due_at was last read from the database
        # The earliest retry this worker's runners scheduled since _due_at was last read: a
        # retry in backoff is a scheduled job the database read may not have seen.
        self._retry_due_at = math.inf
        self._due_lock = threading.Lock()
        self.forced = False
        self.tidier = Tidier(self)
        self.reaper = Reaper(self)
        self.heartbeat = Heartbeat(self)
        # Maintenance started with the runners, stopped once they are done.
        self.services: list[Service] = [self.heartbeat]

    @property
    def jobs_done(self) -> int:
        return self.completer.jobs_done

    @property
    def jobs_failed(self) -> int:
        """Failed attempts, retried or not."""
        return self.completer.jobs_failed

    @property
    def jobs_retried(self) -> int:
        """Failed attempts that will be retried."""
        return self.completer.jobs_retried

    # -- public ------------------------------------------------------------------------

    def now(self) -> datetime | None:
        """The injected clock, or None: the database's clock."""
        return self.clock() if self.clock is not None else None

    def stop(self) -> None:
        """Ask the worker to stop gracefully (what SIGTERM does). Safe from any thread."""
        self.stop_event.set()
        self.wakeup.set()

    def wake(self) -> None:
        self.wakeup.set()

    def run(self, *, burst: bool = False, install_signal_handlers: bool = True) -> int:
        """Work until stopped; with ``burst``, until no runnable job is left. Returns the
        number of jobs this worker finished (completed or failed attempts)."""
        self._check_ready()
        registry.autodiscover()
        logger.info(
            "Worker %s starting: queues=%s concurrency=%d database=%s",
            self.worker_id,
            ",".join(self.queues) if self.queues is not None else "*",
            self.concurrency,
            self.database,
        )
        self._register()
        self.pool.start()
        for service in self.services:
            service.start()
        signals = worker_signals(self) if install_signal_handlers else contextlib.nullcontext()
        forced = False
        try:
            with signals:
                try:
                    self.reaper.reap()
                    self._summary_at = time.monotonic()
                    if self.on_ready is not None:
                        self.on_ready(self)  # sqlq_worker prints the ready line itself
                    else:
                        logger.info("Worker %s ready", self.worker_id)
                    self._loop(burst=burst)
                finally:
                    # Claim nothing more; give back what was claimed and not started, wait
                    # for the running jobs. Not after a second signal: it may have arrived
                    # before this point (still in the loop), and waiting for the running
                    # jobs is what it cancels; the except clause below does the rest.
                    self.stop_event.set()
                    if not self.forced:
                        self._release_unstarted()
                        self.pool.stop()
                        self.completer.flush(force=True)
                        self.tidier.join()
        except ForcedStop:
            forced = True
            self.forced = True  # from here on, database writes are tried once, not retried
            self._release_unstarted()
            try:
                self.completer.flush(
                    force=True
                )  # finished jobs are not lost, if the database answers
            except DatabaseError:
                logger.exception("Worker %s could not record finished jobs", self.worker_id)
        finally:
            self.stop_event.set()
            for service in self.services:
                service.stop()
            if not forced:
                for service in self.services:
                    service.join(timeout=5)
            else:
                # Out of the except clause: the tasks framework's task_finished logging
                # would attach the ForcedStop it finds in sys.exc_info() as a traceback.
                self.completer.record_interrupted(list(self.pool.running.values()))
            self._unregister()
            connections.close_all()
        logger.info(
            "Worker %s stopped: %d done, %d failed, %d retried",
            self.worker_id,
            self.jobs_done,
            self.jobs_failed - self.jobs_retried,
            self.jobs_retried,
        )
        return self.jobs_done + self.jobs_failed

    # -- the main loop -----------------------------------------------------------------

    def _loop(self, *, burst: bool) -> None:
        failures = 0
        last_claim = 0.0
        queue_may_have_more = True
        changes = _ChangeWatch(self)
        while not self.stop_event.is_set():
            # Claim first, then write completions: the runners start on the new jobs while
            # this thread waits on the completions' statement.
            limit = self._claim_limit()
            idle = self.pool.busy == 0 and not self.completer.pending
            due = time.monotonic() - last_claim >= self.poll_interval
            # (While the batches come back full, nothing else needs looking at.)
            woke = (
                limit > 0
                and not queue_may_have_more
                and ((idle and burst) or due or changes.seen())
            )
            coming_due = time.monotonic() >= self._due_at
            if limit > 0 and (queue_may_have_more or woke or coming_due):
                try:
                    # Re-read the next due time when woken, and at least every poll interval
                    # during a long drain (another process may have scheduled an earlier job).
                    stale = time.monotonic() - self._due_checked >= self.poll_interval
                    self._stage(recheck=woke or stale)
                    claimed = lifecycle.claim(
                        self.database,
                        queues=self.queues,
                        worker_id=self.worker_id,
                        limit=limit,
                        lease_seconds=self.lease_seconds,
                        now=self.now(),
                        exclude_queues=self.exclude_queues,
                        turn=self.claims,
                    )
                    self.claims += 1
                    failures = 0
                except DatabaseError as exc:
                    failures += 1
                    self._database_trouble("claim", exc, failures)
                    self.completer.flush(idle=self.pool.busy == 0)
                    continue
                last_claim = time.monotonic()
                queue_may_have_more = len(claimed) == limit
                if claimed:
                    self.held.add(job.id for job in claimed)
                    with self.pool.busy_lock:
                        self.pool.busy += len(claimed)
                    self.jobs_claimed += len(claimed)
                    self.tidier.claimed(len(claimed))
                    self.pool.inbox.put_many(claimed)
                    self.completer.flush(idle=self.pool.busy == 0)
                    continue
                if burst and idle:
                    return  # nothing runnable, nothing running, nothing left to write
            self.completer.flush(idle=self.pool.busy == 0)
            self._give_back_waiting()
            self._summarise()
            if self.max_jobs is not None and self.jobs_claimed >= self.max_jobs and idle:
                return
            self.wakeup.wait(self._wait_time(last_claim, changes))
            self.wakeup.clear()

    def _stage(self, *, recheck: bool) -> None:
        """Move the scheduled jobs whose time has come to pending, before a claim. Cheap
        when none is due: the worker knows when the next one is (``_due_at``), and re-reads
        that (one index probe) only when told to."""
        if recheck:
            self._learn_next_due()
        if time.monotonic() < self._due_at:
            return
        moved = lifecycle.promote(self.database, limit=PROMOTE_BATCH, now=self.now())
        if moved == PROMOTE_BATCH:
            self._due_at = 0.0  # more are due: promote again before the next claim
        else:
            self._learn_next_due()

    def _learn_next_due(self) -> None:
        with self._due_lock:
            self._retry_due_at = math.inf  # retries written from here on may not be read
        seconds = lifecycle.next_due_in(self.database, now=self.now())
        self._due_checked = time.monotonic()
        due_at = math.inf if seconds is None else self._due_checked + max(seconds, 0.0)
        with self._due_lock:
            self._due_at = min(due_at, self._retry_due_at)

    def _retry_scheduled(self, retry_in: float) -> None:
        """A runner scheduled a retry: wake for it when it comes due (it is a scheduled job
        like any other, but no NOTIFY or enqueue tells this worker about it)."""
        at = time.monotonic() + retry_in
        with self._due_lock:
            self._retry_due_at = min(self._retry_due_at, at)
            self._due_at = min(self._due_at, at)

    def _claim_limit(self) -> int:
        """How many jobs to claim now: free slots, plus a prefetch window when jobs are fast
        (so that one statement claims many), refilled at half capacity. A thread with no
        job waiting for it always gets a claim, whatever runs on the other threads."""
        with self.pool.busy_lock:
            in_hand = self.pool.busy
        capacity = self.concurrency + self._prefetch()
        # The runners wake this thread when the jobs in hand fall to this level, so that the
        # next claim runs while they work through the rest.
        self.pool.refill_at = capacity - (capacity + 1) // 2
        free = capacity - in_hand
        waiting = len(self.pool.inbox)
        idle_threads = self.concurrency - (in_hand - waiting)
        if in_hand and waiting >= idle_threads and free < (capacity + 1) // 2:
            free = 0  # every free thread has a job waiting: refill later, in one batch
        if self.max_jobs is not None:
            free = min(free, self.max_jobs - self.jobs_claimed)
        return max(free, 0)

    def _prefetch(self) -> int:
        """Extra jobs held ready beyond the running ones: about PREFETCH_WINDOW seconds of
        work at the recent pace, none while jobs take long (they would wait in line)."""
        if self.pool.avg_runtime is None or time.monotonic() < self._no_prefetch_until:
            return 0
        return min(MAX_PREFETCH, int(PREFETCH_WINDOW / max(self.pool.avg_runtime, 1e-4)))

    def _give_back_waiting(self) -> None:
        """Give back the claimed jobs that have waited PREFETCH_HOLD seconds for a thread
        (its threads are held up by slower jobs than the prefetch expected), so that other
        workers' free threads run them; and prefetch nothing for a while."""
        oldest = self.pool.inbox.oldest()
        if oldest is None or time.monotonic() - oldest < PREFETCH_HOLD:
            return
        stale = self.pool.inbox.take_older_than(time.monotonic() - PREFETCH_HOLD)
        if not stale:
            return
        self._no_prefetch_until = time.monotonic() + PREFETCH_COOLDOWN
        ids = [job.id for job in stale]
        try:
            with_retry(
                self,
                "release",
                lambda: lifecycle.release(
                    self.database, ids, worker_id=self.worker_id, now=self.now()
                ),
            )
            ops_for(self.database).notify(sorted({job.queue for job in stale}))
        except DatabaseError:
            # Not given back: run them here after all, once a thread is free.
            logger.exception("Worker %s could not give back jobs %s", self.worker_id, ids)
            self.pool.inbox.put_many(stale)
            return
        self.held.discard(ids)
        with self.pool.busy_lock:
            self.pool.busy -= len(stale)
        self.jobs_claimed -= len(stale)
        logger.debug(
            "Worker %s gave back %d job(s) that waited %.2fs for a thread",
            self.worker_id,
            len(stale),
            PREFETCH_HOLD,
        )

    def _summarise(self) -> None:
        """Every SUMMARY_INTERVAL seconds in which jobs were finished: one line of counts."""
        now = time.monotonic()
        elapsed = now - self._summary_at
        if elapsed < SUMMARY_INTERVAL:
            return
        counts = (self.jobs_done, self.jobs_failed, self.jobs_retried)
        done, failed, retried = (a - b for a, b in zip(counts, self._summary_counts, strict=True))
        self._summary_at, self._summary_counts = now, counts
        if done or failed:
            logger.info(
                "Worker %s: %d completed, %d failed, %d retried in %.1fs (%.1f jobs/s); "
                "%d running",
                self.worker_id,
                done,
                failed - retried,
                retried,
                elapsed,
                (done + failed) / elapsed,
                len(self.pool.running),
            )

    def _wait_time(self, last_claim: float, changes: _ChangeWatch) -> float:
        now = time.monotonic()
        wait = max(0.0, self.poll_interval - (now - last_claim))
        # Wake when the next scheduled job comes due, to start it within the pickup latency.
        # (Once due, it is staged at the next claim: when a slot is free.)
        until_due = self._due_at - now
        if until_due > 0:
            wait = min(wait, until_due)
        if self.completer.pending:
            wait = min(wait, max(0.0, self.completer.since + FLUSH_INTERVAL - now))
        oldest = self.pool.inbox.oldest()
        if oldest is not None:
            wait = min(wait, max(0.0, oldest + PREFETCH_HOLD - now))
        if (self.jobs_done, self.jobs_failed) != self._summary_counts[:2]:
            wait = min(wait, max(0.0, self._summary_at + SUMMARY_INTERVAL - now))
        return min(wait, changes.interval)

    def _database_trouble(self, what: str, exc: DatabaseError, failures: int) -> None:
        """Log a database error, drop the connection if it is broken, and back off."""
        if not is_transient(exc) and is_missing_table(exc):
            raise WorkerError(
                "The jobs table does not exist: run `python manage.py migrate` first."
            ) from exc
        self.stop_event.wait(back_off(self, what, exc, failures))

    def _release_unstarted(self) -> None:
        unstarted: list[ClaimedJob] = []
        while True:
            try:
                item = self.pool.inbox.get_nowait()
            except queue_module.Empty:
                break
            if item is not STOP:
                unstarted.append(item)
        if not unstarted:
            return
        ids = [job.id for job in unstarted]
        try:
            released = with_retry(
                self,
                "release",
                lambda: lifecycle.release(
                    self.database, ids, worker_id=self.worker_id, now=self.now()
                ),
            )
        except DatabaseError:
            logger.exception("Worker %s could not give back jobs %s", self.worker_id, ids)
            return
        self.held.discard(ids)
        with self.pool.busy_lock:
            self.pool.busy -= len(unstarted)
        logger.info("Worker %s gave back %d unstarted job(s): %s", self.worker_id, released, ids)

    # -- bookkeeping -------------------------------------------------------------------

    def _check_ready(self) -> None:
        if connections[self.database].in_atomic_block:
            # A TestCase (or transaction.atomic()) around the worker: its threads' own
            # connections cannot see what this one has not committed (on SQLite they wait
            # on its write lock for ever), and it would close this connection at the end.
            raise WorkerError(
                f"A worker cannot run inside a transaction on database {self.database!r} (a "
                "TestCase, or transaction.atomic()): its threads use their own connections, "
                "which do not see uncommitted jobs. In a test, run the jobs in the test's "
                "transaction with django_sqlq.testing.run_jobs(), or use TransactionTestCase "
                "(pytest: django_db(transaction=True))."
            )
        try:
            Job.objects.using(self.database).only("id").first()
        except DatabaseError as exc:
            if is_missing_table(exc):
                raise WorkerError(
                    f"The jobs table does not exist in database {self.database!r}: "
                    "run `python manage.py migrate` first."
                ) from exc
            # Unreachable (down, wrong host or credentials, a missing directory): one line
            # naming the database and the cause, not a traceback; the process manager
            # restarts the worker.
            raise WorkerError(unreachable(self.database, exc)) from exc

    def _register(self) -> None:
        try:
            WorkerProcess.objects.using(self.database).register(
                self.worker_id,
                queues=list(self.queues) if self.queues is not None else ["*"],
                concurrency=self.concurrency,
            )
        except DatabaseError as exc:
            logger.warning("Worker %s could not register itself: %s", self.worker_id, exc)

    def _unregister(self) -> None:
        try:
            WorkerProcess.objects.using(self.database).deregister(
                self.worker_id, jobs_done=self.jobs_done, jobs_failed=self.jobs_failed
            )
        except DatabaseError as exc:
            logger.warning("Worker %s could not record its stop: %s", self.worker_id, exc)


def unreachable(alias: str, exc: BaseException) -> str:
    """One line naming the database ``alias``, its engine and why it cannot be used."""
    cause = " ".join(str(exc).split()) or type(exc).__name__
    engine = connections[alias].settings_dict.get("ENGINE", "?")
    return f"Cannot use database {alias!r} ({engine}): {type(exc).__name__}: {cause}"
