"""The claimer: the worker's main loop (Solid Queue's ``Poller``, River's producer).

Each turn it claims up to as many jobs as there are free slots, in one statement, and puts
them in the runner pool's inbox; then it has the completer write what has finished. Fast
jobs are claimed ahead (prefetch, about PREFETCH_WINDOW seconds of work), refilled at half
capacity. A claimed job that waits PREFETCH_HOLD seconds for a thread is given back to the
queue (and other workers are woken), and this worker prefetches nothing for
PREFETCH_COOLDOWN seconds: prefetch never keeps a job from another worker's free thread
for longer than that. Between turns it sleeps until woken (a runner finished, a
notification, the change watch) or until something is due: the poll interval, the next
scheduled job, a flush, a give-back, the summary line.
"""

from __future__ import annotations

import logging
import queue as queue_module
import time
from typing import TYPE_CHECKING

from django.db import DatabaseError

from django_sqlq import lifecycle
from django_sqlq.db import is_missing_table, is_transient, ops_for
from django_sqlq.db.columns import ClaimedJob
from django_sqlq.schema import migrate_command
from django_sqlq.worker.changes import ChangeWatch
from django_sqlq.worker.completer import FLUSH_INTERVAL
from django_sqlq.worker.inbox import STOP
from django_sqlq.worker.retry import back_off, with_retry
from django_sqlq.worker.startup import WorkerError
from django_sqlq.worker.summary import Summary

if TYPE_CHECKING:
    from django_sqlq.worker.core import Worker

logger = logging.getLogger("django_sqlq.worker")

MAX_PREFETCH = 200
PREFETCH_WINDOW = 0.05
PREFETCH_HOLD = 0.5
PREFETCH_COOLDOWN = 5.0


#: Transient database errors in a row after which a --burst worker stops.
BURST_TRIES = 5


class Claimer:
    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.worker_id = worker.worker_id
        self.database = worker.database
        self.concurrency = worker.concurrency
        self.max_jobs = worker.max_jobs
        self.pool = worker.pool
        self.completer = worker.completer
        self.summary = Summary(worker)
        self.jobs_claimed = 0
        self.claims = 0  # claim statements run; each starts at the next queue (fairness)
        self.no_prefetch_until = 0.0  # see give_back_waiting

    def loop(self, *, burst: bool) -> None:
        worker, pool, completer = self.worker, self.pool, self.completer
        staging = worker.staging
        failures = 0
        last_claim = 0.0
        quiet_since = time.monotonic()  # since when claims found nothing while nothing ran
        queue_may_have_more = True
        changes = ChangeWatch(worker)
        control = worker.queue_control
        while not worker.stop_event.is_set():
            # Claim first, then write completions: the runners start on the new jobs while
            # this thread waits on the completions' statement.
            limit = self.limit()
            idle = pool.busy == 0 and not completer.pending
            due = time.monotonic() - last_claim >= worker.poll_interval
            # (While the batches come back full, nothing else needs looking at.)
            # The paused queues, read at most once a second (a resume is a reason to claim).
            resumed = control.refresh()
            woke = (
                limit > 0
                and not queue_may_have_more
                and ((idle and burst) or due or resumed or changes.seen())
            )
            if woke:
                resumed = control.refresh(woke=True)
            coming_due = time.monotonic() >= staging.due_at
            if limit > 0 and (queue_may_have_more or woke or coming_due):
                try:
                    # Re-read the next due time when woken, and at least every poll interval
                    # during a long drain (another process may have scheduled an earlier job).
                    stale = time.monotonic() - staging.checked >= worker.poll_interval
                    staging.stage(recheck=woke or stale)
                    claimed = lifecycle.claim(
                        self.database,
                        queues=worker.queues,
                        worker_id=self.worker_id,
                        limit=limit,
                        lease_seconds=worker.lease_seconds,
                        now=worker.now(),
                        exclude_queues=control.exclude,
                        turn=self.claims,
                        caps=control.caps(),
                        limits=control.limits,
                    )
                    self.claims += 1
                    failures = 0
                except DatabaseError as exc:
                    failures += 1
                    self._database_trouble("claim", exc, failures, burst=burst)
                    completer.flush(idle=pool.busy == 0)
                    continue
                last_claim = time.monotonic()
                queue_may_have_more = len(claimed) == limit or control.full()
                if claimed or not idle:
                    quiet_since = last_claim
                if claimed:
                    control.claimed(job.queue for job in claimed)
                    worker.held.add(job.id for job in claimed)
                    with pool.busy_lock:
                        pool.busy += len(claimed)
                    self.jobs_claimed += len(claimed)
                    worker.tidier.claimed(len(claimed))
                    pool.inbox.put_many(claimed)
                    completer.flush(idle=pool.busy == 0)
                    continue
                if burst and idle:
                    return  # nothing runnable, nothing running, nothing left to write
                worker.tidier.quiet(last_claim - quiet_since, worker.poll_interval)
            completer.flush(idle=pool.busy == 0)
            self.give_back_waiting()
            self.summary.log()
            if self.max_jobs is not None and self.jobs_claimed >= self.max_jobs and idle:
                return
            worker.wakeup.wait(self.wait_time(last_claim, changes.interval))
            worker.wakeup.clear()

    def limit(self) -> int:
        """How many jobs to claim now: free slots, plus a prefetch window when jobs are fast
        (so that one statement claims many), refilled at half capacity. A thread with no
        job waiting for it always gets a claim, whatever runs on the other threads."""
        pool = self.pool
        with pool.busy_lock:
            in_hand = pool.busy
        capacity = self.concurrency + self.prefetch()
        # The runners wake this thread when the jobs in hand fall to this level, so that the
        # next claim runs while they work through the rest.
        pool.refill_at = capacity - (capacity + 1) // 2
        free = capacity - in_hand
        waiting = len(pool.inbox)
        idle_threads = self.concurrency - (in_hand - waiting)
        if in_hand and waiting >= idle_threads and free < (capacity + 1) // 2:
            free = 0  # every free thread has a job waiting: refill later, in one batch
        if self.max_jobs is not None:
            free = min(free, self.max_jobs - self.jobs_claimed)
        return max(free, 0)

    def prefetch(self) -> int:
        """Extra jobs held ready beyond the running ones: about PREFETCH_WINDOW seconds of
        work at the recent pace, none while jobs take long (they would wait in line)."""
        avg_runtime = self.pool.avg_runtime
        if avg_runtime is None or time.monotonic() < self.no_prefetch_until:
            return 0
        return min(MAX_PREFETCH, int(PREFETCH_WINDOW / max(avg_runtime, 1e-4)))

    def wait_time(self, last_claim: float, longest: float) -> float:
        """How long the loop may sleep before something is due (at most ``longest``)."""
        now = time.monotonic()
        wait = max(0.0, self.worker.poll_interval - (now - last_claim))
        # Wake when the next scheduled job comes due, to start it within the pickup latency.
        # (Once due, it is staged at the next claim: when a slot is free.)
        until_due = self.worker.staging.due_at - now
        if until_due > 0:
            wait = min(wait, until_due)
        if self.completer.pending:
            wait = min(wait, max(0.0, self.completer.since + FLUSH_INTERVAL - now))
        oldest = self.pool.inbox.oldest()
        if oldest is not None:
            wait = min(wait, max(0.0, oldest + PREFETCH_HOLD - now))
        summary_at = self.summary.next_at()
        if summary_at is not None:
            wait = min(wait, max(0.0, summary_at - now))
        refresh_in = self.worker.queue_control.next_refresh_in()
        if refresh_in is not None:
            wait = min(wait, refresh_in)
        return min(wait, longest)

    def give_back_waiting(self) -> None:
        """Give back the claimed jobs that have waited PREFETCH_HOLD seconds for a thread
        (its threads are held up by slower jobs than the prefetch expected), so that other
        workers' free threads run them; and prefetch nothing for a while."""
        pool, worker = self.pool, self.worker
        oldest = pool.inbox.oldest()
        if oldest is None or time.monotonic() - oldest < PREFETCH_HOLD:
            return
        stale = pool.inbox.take_older_than(time.monotonic() - PREFETCH_HOLD)
        if not stale:
            return
        self.no_prefetch_until = time.monotonic() + PREFETCH_COOLDOWN
        ids = [job.id for job in stale]
        try:
            with_retry(
                worker,
                "release",
                lambda: lifecycle.release(
                    self.database, ids, worker_id=self.worker_id, now=worker.now()
                ),
            )
            ops_for(self.database).notify(sorted({job.queue for job in stale}))
        except DatabaseError:
            # Not given back: run them here after all, once a thread is free.
            logger.exception(
                "Worker %s could not give back jobs %s",
                self.worker_id,
                ids,
                extra={"job_ids": ids},
            )
            pool.inbox.put_many(stale)
            return
        worker.held.discard(ids)
        worker.queue_control.finished(job.queue for job in stale)
        with pool.busy_lock:
            pool.busy -= len(stale)
        self.jobs_claimed -= len(stale)
        logger.debug(
            "Worker %s gave back %d job(s) that waited %.2fs for a thread",
            self.worker_id,
            len(stale),
            PREFETCH_HOLD,
            extra={"job_ids": ids},
        )

    def release_unstarted(self) -> None:
        """On stop: give back the claimed jobs no runner has started (their attempt is not
        counted)."""
        pool, worker = self.pool, self.worker
        unstarted: list[ClaimedJob] = []
        while True:
            try:
                item = pool.inbox.get_nowait()
            except queue_module.Empty:
                break
            if item is not STOP:
                unstarted.append(item)
        if not unstarted:
            return
        ids = [job.id for job in unstarted]
        try:
            released = with_retry(
                worker,
                "release",
                lambda: lifecycle.release(
                    self.database, ids, worker_id=self.worker_id, now=worker.now()
                ),
            )
        except DatabaseError:
            logger.exception(
                "Worker %s could not give back jobs %s",
                self.worker_id,
                ids,
                extra={"job_ids": ids},
            )
            return
        worker.held.discard(ids)
        worker.queue_control.finished(job.queue for job in unstarted)
        with pool.busy_lock:
            pool.busy -= len(unstarted)
        logger.info(
            "Worker %s gave back %d unstarted job(s): %s",
            self.worker_id,
            released,
            ids,
            extra={"job_ids": ids},
        )

    def _database_trouble(
        self, what: str, exc: DatabaseError, failures: int, *, burst: bool = False
    ) -> None:
        """Log a database error, drop the connection if it is broken, and back off. A
        ``--burst`` worker (a cron job, a CI step) stops instead, with the error: at once
        for an error that waiting does not cure, after BURST_TRIES for a transient one."""
        transient = is_transient(exc)
        if not transient and is_missing_table(exc):
            alias = self.database
            raise WorkerError(
                f"The jobs table does not exist in database {alias!r}: run "
                f"`{migrate_command(alias)}` first."
            ) from exc
        if burst and (not transient or failures >= BURST_TRIES):
            cause = " ".join(str(exc).split()) or type(exc).__name__
            raise WorkerError(
                f"Worker {self.worker_id} stopped: database error during {what} "
                f"({type(exc).__name__}: {cause}); a --burst worker does not wait for the "
                "database to recover. Has "
                f"`{migrate_command(self.database)}` been run?"
            ) from exc
        self.worker.stop_event.wait(back_off(self.worker, what, exc, failures))
