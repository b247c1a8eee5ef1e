"""The completer: writes every attempt's outcome, completed or failed, in batches (River's
batching completer), through the outcome writer (``django_sqlq.outcomes``).

The runner threads buffer the outcomes (``pending``: a :class:`Done` per completed
attempt, a :class:`Fault` per failed one, whose retry the retry policy decided); the main
thread writes them (``flush``): when FLUSH_BATCH have gathered, when the oldest has waited
FLUSH_INTERVAL, when nothing else is running, or when forced. A batch of completions
alone is one statement. When the database refuses a batch (not a lost connection: those
are retried), its outcomes are written one by one, and a completion it refuses is
recorded as its attempt's error. Every write is fenced by worker id and attempt: an
outcome for a job this worker no longer holds changes nothing and is logged as lost.

The writes use the main thread's connection, which no handler touches: a handler that
leaves its own connection refusing writes (``SET default_transaction_read_only``,
``PRAGMA query_only``...) cannot keep its outcome from being recorded. Atomic handlers
are the exception by design: their completion is written in their own transaction
(``worker/atomic.py``), then accounted for here (:meth:`Completer.committed`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any, NamedTuple

from django.db import DatabaseError
from django.utils import timezone

from django_sqlq import lifecycle, outcomes, registry
from django_sqlq.control import JobControl
from django_sqlq.db.columns import ClaimedJob
from django_sqlq.exceptions import JobInterruptedError, Suspended
from django_sqlq.jobcontext import call_hook, job_context
from django_sqlq.logs import extra_for
from django_sqlq.models import JobStatus
from django_sqlq.retries import RetryPolicy
from django_sqlq.worker.context import Counts, HeldJobs, WorkerContext
from django_sqlq.worker.dbretry import reset_connection, with_retry
from django_sqlq.worker.stats import WorkerStats
from django_sqlq.workflows import Continuation

logger = logging.getLogger("django_sqlq.worker")
job_logger = logging.getLogger("django_sqlq.worker.jobs")

FLUSH_BATCH = 100
FLUSH_INTERVAL = 0.01


class Done(NamedTuple):
    """A completed attempt, not yet written."""

    job: ClaimedJob
    result: Any
    handler: registry.Handler
    elapsed: float
    then: Continuation | None = None  # the chain's next step (context.continue_with())


class Fault(NamedTuple):
    """A failed attempt, not yet written: its error, and the retry policy's decision
    (``retry_in``: seconds, or None for no retry; ``cancel``: cancelled)."""

    job: ClaimedJob
    error: lifecycle.ErrorInfo
    retry_in: float | None
    cancel: bool = False
    handler: registry.Handler | None = None  # its on_finish hook is called once written
    control: JobControl | None = None


class Pause(NamedTuple):
    """An attempt that ended in a durable sleep or wait, not yet written."""

    job: ClaimedJob
    until: datetime
    wait_key: str | None = None


Item = Done | Fault | Pause


class Completer:
    """Buffers and writes outcomes. ``retries``: the retry policy that decides each failed
    attempt; ``retry_scheduled(seconds)``: told of each retry written (the stager wakes for
    it: no NOTIFY tells the worker of its own retries)."""

    def __init__(
        self,
        context: WorkerContext,
        *,
        held: HeldJobs,
        counts: Counts,
        stats: WorkerStats,
        retries: RetryPolicy,
        retry_scheduled: Callable[[float], None],
    ) -> None:
        self.context = context
        self.worker_id = context.worker_id
        self.database = context.database
        self.held = held
        self.counts = counts
        self.stats = stats
        self.retries = retries
        self.retry_scheduled = retry_scheduled
        # Outcomes not yet written. The runners append to it under ``lock`` (and set
        # ``since`` for the first): completions inline in RunnerPool._process, failures
        # through :meth:`failed`.
        self.pending: list[Item] = []
        self.since = 0.0  # time.monotonic() when the oldest of them was added
        self.lock = threading.Lock()

    def failed(
        self,
        job: ClaimedJob,
        error: lifecycle.ErrorInfo,
        *,
        retry: bool = True,
        cancel: bool = False,
        handler: registry.Handler | None = None,
        control: JobControl | None = None,
    ) -> None:
        """Buffer a failed attempt (``cancel``: a cancelled one; ``retry=False``: one that
        must not be retried), with the retry policy's decision."""
        fault = Fault(job, error, self._retry_in(job, retry, cancel), cancel, handler, control)
        with self.lock:
            if not self.pending:
                self.since = time.monotonic()
            self.pending.append(fault)

    def suspended(self, job: ClaimedJob, suspended: Suspended) -> None:
        """Buffer an attempt that ended in ``context.sleep()`` or ``wait_for_event()``."""
        pause = Pause(job, suspended.until, suspended.wait_key)
        with self.lock:
            if not self.pending:
                self.since = time.monotonic()
            self.pending.append(pause)

    def flush(self, *, force: bool = False, idle: bool = False) -> None:
        """Write the buffered outcomes if it is time; ``idle``: nothing is running."""
        with self.lock:
            if not self.pending:
                return
            if not (
                force
                or idle
                or len(self.pending) >= FLUSH_BATCH
                or time.monotonic() - self.since >= FLUSH_INTERVAL
            ):
                return
            batch, self.pending = self.pending, []
        self.write(batch)

    def write(self, batch: list[Item]) -> dict[int, str]:
        """Write ``batch``, then count, log and call the hooks of what was written.
        Returns each written job's status."""
        try:
            written = self._write(batch)
        except DatabaseError as exc:
            if self.context.forced.is_set():
                raise
            return self._refused(batch, exc)
        self._account(batch, written)
        return written

    def _account(self, batch: list[Item], written: dict[int, str]) -> None:
        """Count, log and call the hooks of a written batch."""
        self.held.discard(item.job.id for item in batch)
        log = job_logger.isEnabledFor(logging.INFO)
        completed: dict[str, int] = {}  # per queue: counted once per batch, not per job
        for item in batch:
            job = item.job
            status = written.get(job.id)
            if status is None:
                log_lost(job)
            elif isinstance(item, Fault):
                self._failed(item, status)
            elif isinstance(item, Pause):
                self._paused(item, status)
            elif status == JobStatus.COMPLETED and not log and item.handler.on_finish is None:
                completed[job.queue] = completed.get(job.queue, 0) + 1  # the usual case
            else:
                self._completed(item, status, log=log, completed=completed)
        self.counts.done += sum(completed.values())
        self.stats.completed_many(completed)

    def _write(self, batch: list[Item]) -> dict[int, str]:
        return outcomes.write(
            self.database,
            [
                item
                if isinstance(item, Done)
                else outcomes.Slept(item.job, item.until, item.wait_key)
                if isinstance(item, Pause)
                else outcomes.Failed(item.job, item.error, item.retry_in, item.cancel)
                for item in batch
            ],
            worker_id=self.worker_id,
            now=self.context.now(),
            retrying=lambda step: with_retry(self.context, "record outcomes", step),
        ).statuses

    def _refused(self, batch: list[Item], exc: DatabaseError) -> dict[int, str]:
        """Not a lost connection (those are retried): the database refuses the write. Find
        the outcome it refuses rather than lose the whole batch (and the worker's main
        thread) to one row."""
        written: dict[int, str] = {}
        if isinstance(exc, outcomes.OutcomesRefused):
            # The steps before the refused one wrote their outcomes: those are done.
            written = dict(exc.written.statuses)
            self._account([item for item in batch if item.job.id in written], written)
            batch = [item for item in batch if item.job.id not in written]
            if not batch:
                return written
        if len(batch) > 1:
            logger.warning(
                "Worker %s: writing %d outcomes failed (%s: %s); writing them one by one",
                self.worker_id,
                len(batch),
                type(exc).__name__,
                exc,
            )
            for item in batch:
                written.update(self.write([item]))
            return written
        item = batch[0]
        if isinstance(item, Done):
            # A completion the database refuses: recorded as its attempt's error.
            error = lifecycle.ErrorInfo.from_exception(exc)
            retry_in = self._retry_in(item.job, retry=True, cancel=False)
            fault = Fault(item.job, error, retry_in, handler=item.handler)
            return {**written, **self.write([fault])}
        # A failure the database refuses: once more on a new connection (this one may be
        # in a state that refuses writes), then the job is left to its lease.
        reset_connection(self.database)
        try:
            again = self._write(batch)
        except DatabaseError:
            self.held.discard([item.job.id])
            logger.exception(
                "Worker %s: could not record the outcome of job id=%s; it will be retried "
                "once its lease runs out",
                self.worker_id,
                item.job.id,
                extra=extra_for(item.job),
            )
            return written
        self._account(batch, again)
        return {**written, **again}

    def committed(self, item: Done, status: str) -> None:
        """An atomic handler's completion, committed with its writes by the runner thread
        (worker/atomic.py): count, log and call its hook as for a batch's."""
        self.held.discard([item.job.id])
        completed: dict[str, int] = {}
        self._completed(
            item, status, log=job_logger.isEnabledFor(logging.INFO), completed=completed
        )
        self.counts.done += sum(completed.values())
        self.stats.completed_many(completed)

    def lost(self, job: ClaimedJob, error: lifecycle.ErrorInfo, *, atomic: bool) -> None:
        """An attempt the fence refused: an atomic handler's completion (its transaction
        rolled back, nothing of this attempt written), or a durable step another attempt
        recorded (the step's writes rolled back). The job belongs to someone else now."""
        self.held.discard([job.id])
        logger.warning(
            "Job id=%s type=%s attempt=%d: this worker no longer holds the job (its lease "
            "expired and another worker or an operator took it over); %s (%s: %s)",
            job.id,
            job.type,
            job.attempts,
            "the atomic handler's writes were rolled back"
            if atomic
            else "the writes of the step it was taking were rolled back",
            error.exception_class,
            error.message,
            extra=extra_for(job),
        )

    def record_interrupted(self, running: Iterable[ClaimedJob]) -> None:
        """After a forced stop: record each running job's attempt as failed at once (retried
        or failed by its attempts), rather than leaving it to its lease. Fenced like every
        outcome: a job this worker no longer holds is left alone."""
        faults: list[Item] = []
        for job in running:
            error = lifecycle.ErrorInfo.from_exception(
                JobInterruptedError(f"interrupted by a forced stop of worker {self.worker_id}")
            )
            try:
                handler: registry.Handler | None = registry.get(job.type)
            except Exception:  # no handler: no hook to call
                handler = None
            faults.append(Fault(job, error, self._retry_in(job, True, False), handler=handler))
        try:
            recorded = len(self.write(faults)) if faults else 0
        except Exception as exc:  # the database is gone: the leases are the fallback
            logger.warning(
                "Worker %s could not record the interrupted jobs (%s: %s): left to their leases",
                self.worker_id,
                type(exc).__name__,
                exc,
            )
            recorded = 0
        logger.warning(
            "Worker %s forced to stop: %d running job(s) interrupted, %d recorded at once%s",
            self.worker_id,
            len(faults),
            recorded,
            "" if recorded == len(faults) else " (the others are left to lease expiry)",
        )

    def _retry_in(self, job: ClaimedJob, retry: bool, cancel: bool) -> float | None:
        return self.retries.retry_in(job.attempts, job.max_attempts, retry=retry, cancel=cancel)

    def _completed(self, item: Done, status: str, *, log: bool, completed: dict[str, int]) -> None:
        """Count and log one written completion (``status``: completed, or cancelled when
        the handler ran to its end after its cancel was requested); call its hook."""
        job = item.job
        if status == JobStatus.CANCELLED:
            self.counts.cancelled += 1
            logger.info(
                "Job id=%s type=%s attempt=%d ran to its end after its cancel was "
                "requested: recorded cancelled",
                job.id,
                job.type,
                job.attempts,
                extra=extra_for(job),
            )
        else:
            completed[job.queue] = completed.get(job.queue, 0) + 1
            if log:
                job_logger.info(
                    "Job id=%s type=%s completed in %.3fs attempt=%d",
                    job.id,
                    job.type,
                    item.elapsed,
                    job.attempts,
                    extra=extra_for(job),
                )
        if item.handler.on_finish is not None:
            call_hook(
                self.worker_id,
                item.handler.on_finish,
                job_context(job, self.worker_id, self.database),
                status,
                item.result,
            )

    def _paused(self, item: Pause, status: str) -> None:
        """Count and log one written sleep or wait; wake the stager when it is due."""
        if status == JobStatus.CANCELLED:  # cancelled while it ran
            self.counts.cancelled += 1
        elif status == JobStatus.SCHEDULED:
            self.retry_scheduled(max(0.0, (item.until - timezone.now()).total_seconds()))
        log_pause(item, status)

    def _failed(self, item: Fault, status: str) -> None:
        """Count and log one written failure (retried, failed for good or cancelled); call
        its hook."""
        job = item.job
        if status == JobStatus.CANCELLED:
            self.counts.cancelled += 1
        else:
            retried = status != JobStatus.FAILED
            self.counts.failed += 1
            self.counts.retried += retried
            self.stats.failed(job.queue, retried=retried)
            if status == JobStatus.SCHEDULED and item.retry_in is not None:
                self.retry_scheduled(item.retry_in)
        log_failure(item, status)
        if item.handler is not None and item.handler.on_finish is not None:
            context = job_context(job, self.worker_id, self.database, item.control)
            call_hook(self.worker_id, item.handler.on_finish, context, status, item.error)


def log_pause(item: Pause, status: str) -> None:
    """Log a written durable sleep or wait (INFO, on the jobs' logger)."""
    if job_logger.isEnabledFor(logging.INFO):
        job = item.job
        if status == JobStatus.CANCELLED:
            job_logger.info(
                "Job id=%s type=%s was cancelled while it ran: recorded cancelled, not asleep",
                job.id,
                job.type,
                extra=extra_for(job),
            )
            return
        what = "sleeps" if item.wait_key is None else f"waits for event {item.wait_key!r}"
        job_logger.info(
            "Job id=%s type=%s %s until %s",
            job.id,
            job.type,
            what,
            item.until.isoformat(),
            extra=extra_for(job),
        )


def log_failure(item: Fault, status: str) -> None:
    """Log a written failure: cancelled (INFO), retried (WARNING), failed for good (ERROR)."""
    job, error = item.job, item.error
    if status == JobStatus.CANCELLED:
        logger.info(
            "Job id=%s type=%s attempt %d cancelled (%s: %s)",
            job.id,
            job.type,
            job.attempts,
            error.exception_class,
            error.message,
            extra=extra_for(job),
        )
    elif status == JobStatus.FAILED:
        logger.error(
            "Job id=%s type=%s failed for good after attempt %d/%d: %s: %s",
            job.id,
            job.type,
            job.attempts,
            job.max_attempts,
            error.exception_class,
            error.message,
            extra=extra_for(job),
        )
    else:
        logger.warning(
            "Job id=%s type=%s attempt %d/%d failed (%s: %s); retry in %.1fs",
            job.id,
            job.type,
            job.attempts,
            job.max_attempts,
            error.exception_class,
            error.message,
            item.retry_in or 0.0,
            extra=extra_for(job),
        )


def log_lost(job: ClaimedJob) -> None:
    """Log an outcome the fence refused: the job is no longer this worker's."""
    logger.warning(
        "Job id=%s type=%s attempt=%d: outcome not recorded, this worker no longer holds "
        "the job (its lease expired and another worker or an operator took it over)",
        job.id,
        job.type,
        job.attempts,
        extra=extra_for(job),
    )
