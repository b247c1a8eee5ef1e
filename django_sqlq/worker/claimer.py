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
import time
from collections.abc import Sequence

from django.db import DatabaseError

from django_sqlq import lifecycle
from django_sqlq.db import is_missing_table, is_transient, ops_for
from django_sqlq.schema import migrate_command
from django_sqlq.worker.changes import ChangeWatch
from django_sqlq.worker.completer import FLUSH_INTERVAL, Completer
from django_sqlq.worker.context import HeldJobs, WorkerContext
from django_sqlq.worker.dbretry import back_off, with_retry
from django_sqlq.worker.maintenance.tidier import Tidier
from django_sqlq.worker.pool import RunnerPool
from django_sqlq.worker.queuecontrol import QueueControl
from django_sqlq.worker.staging import Stager
from django_sqlq.worker.startup import WorkerError
from django_sqlq.worker.summary import Summary

logger = logging.getLogger("django_sqlq.worker")

MAX_PREFETCH = 200
PREFETCH_WINDOW = 0.05
PREFETCH_HOLD = 0.5
PREFETCH_COOLDOWN = 5.0


#: Transient database errors in a row after which a --burst worker stops.
BURST_TRIES = 5
#: Seconds a --burst worker waits before it claims again when its claim found nothing but
#: jobs are runnable (held by other workers' claims, or past one claim's reach).
BURST_RETRY_INTERVAL = 0.05


class Claimer:
    def __init__(
        self,
        context: WorkerContext,
        *,
        pool: RunnerPool,
        completer: Completer,
        staging: Stager,
        queue_control: QueueControl,
        held: HeldJobs,
        tidier: Tidier,
        summary: Summary,
    ) -> None:
        self.context = context
        self.worker_id = context.worker_id
        self.database = context.database
        self.concurrency = context.concurrency
        self.max_jobs = context.max_jobs
        self.pool = pool
        self.completer = completer
        self.staging = staging
        self.queue_control = queue_control
        self.held = held
        self.tidier = tidier
        self.summary = summary
        self.jobs_claimed = 0
        self.claims = 0  # claim statements run; each starts at the next queue (fairness)
        self.no_prefetch_until = 0.0  # see give_back_waiting

    def loop(self, *, burst: bool) -> None:
        context, pool, completer = self.context, self.pool, self.completer
        staging, tidier = self.staging, self.tidier
        failures = 0
        last_claim = 0.0
        quiet_since = time.monotonic()  # since when claims found nothing while nothing ran
        queue_may_have_more = True
        changes = ChangeWatch(context)
        control = self.queue_control
        while not context.stop_event.is_set():
            # Claim first, then write completions: the runners start on the new jobs while
            # this thread waits on the completions' statement.
            limit = self.limit()
            idle = pool.busy == 0 and not completer.pending
            due = time.monotonic() - last_claim >= context.poll_interval
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
                    stale = time.monotonic() - staging.checked >= context.poll_interval
                    staging.stage(recheck=woke or stale)
                    claimed = ops_for(self.database).claim(
                        queues=context.queues,
                        worker_id=self.worker_id,
                        limit=limit,
                        lease_seconds=context.lease_seconds,
                        now=context.now(),
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
                    self.held.add(job.id for job in claimed)
                    with pool.busy_lock:
                        pool.busy += len(claimed)
                    self.jobs_claimed += len(claimed)
                    tidier.claimed(len(claimed))
                    pool.inbox.put_many(claimed)
                    completer.flush(idle=pool.busy == 0)
                    continue
                if burst and idle and self.burst_over(control.exclude):
                    return  # nothing runnable, nothing running, nothing left to write
                tidier.quiet(last_claim - quiet_since, context.poll_interval)
            completer.flush(idle=pool.busy == 0)
            self.give_back_waiting()
            self.summary.log()
            if self.max_jobs is not None and self.jobs_claimed >= self.max_jobs and idle:
                return
            if burst and pool.busy == 0 and not completer.pending:
                # The last outcomes are written: the next turn claims once more and, finding
                # nothing, exits (not a poll interval later: nothing wakes this thread now).
                continue
            context.wakeup.wait(self.wait_time(last_claim, changes.interval, room=limit > 0))
            context.wakeup.clear()

    def burst_over(self, exclude: Sequence[str]) -> bool:
        """After a claim that found nothing, with nothing running: whether no job this
        worker serves is runnable, so that ``--burst`` ends. Else (jobs the claim did not
        reach: rows other workers held, queues past one claim's reach) it waits
        BURST_RETRY_INTERVAL, and the loop claims again. A database error counts as over
        (the burst ends, as it did before this check)."""
        try:
            left = ops_for(self.database).runnable(
                self.context.queues, exclude, now=self.context.now()
            )
        except DatabaseError:
            return True
        if left:
            self.context.stop_event.wait(BURST_RETRY_INTERVAL)
        return not left

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

    def wait_time(self, last_claim: float, longest: float, *, room: bool = True) -> float:
        """How long the loop may sleep before something is due (at most ``longest``).
        ``room``: a claim could take a job now. Without room the next poll is not due: the
        runners wake the loop when a slot frees (counted from the last claim, the poll
        would be due at once, turn after turn, while a job longer than it runs)."""
        now = time.monotonic()
        wait = max(0.0, self.context.poll_interval - (now - last_claim)) if room else longest
        # Wake when the next scheduled job comes due, to start it within the pickup latency.
        # (Once due, it is staged at the next claim: when a slot is free.)
        until_due = self.staging.due_at - now
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
        refresh_in = self.queue_control.next_refresh_in()
        if refresh_in is not None:
            wait = min(wait, refresh_in)
        return min(wait, longest)

    def give_back_waiting(self) -> None:
        """Give back the claimed jobs that have waited PREFETCH_HOLD seconds for a thread
        (its threads are held up by slower jobs than the prefetch expected), so that other
        workers' free threads run them; and prefetch nothing for a while."""
        pool, context = self.pool, self.context
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
                context,
                "release",
                lambda: lifecycle.release(
                    self.database, ids, worker_id=self.worker_id, now=context.now()
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
        self.held.discard(ids)
        self.queue_control.finished(job.queue for job in stale)
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
        self.context.stop_event.wait(back_off(self.context, what, exc, failures))
