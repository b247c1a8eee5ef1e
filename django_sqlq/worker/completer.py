"""The completer: writes the completed attempts (River's batching completer).

Completed attempts are buffered by the runner threads (``pending``) and written by the main
thread in one statement (``flush``): when FLUSH_BATCH have gathered, when the oldest has
waited FLUSH_INTERVAL, when nothing else is running, or when forced. When the database
refuses a batch (not a lost connection: those are retried), the completions are written
one by one, and the one it refuses is recorded as its attempt's error. Failed attempts
are written at once by the runners (``failures``). Every write is fenced by worker id and
attempt: an outcome for a job this worker no longer holds changes nothing and is logged
as lost.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, NamedTuple

from django.db import DatabaseError

from django_sqlq import lifecycle, registry, workflows
from django_sqlq.db import ops_for
from django_sqlq.db.columns import ClaimedJob
from django_sqlq.db.outcomes import Finished
from django_sqlq.jobcontext import call_hook, job_context
from django_sqlq.logs import extra_for
from django_sqlq.models import JobStatus
from django_sqlq.worker.context import Counts, HeldJobs, WorkerContext
from django_sqlq.worker.dbretry import with_retry
from django_sqlq.worker.failures import FailureWriter, log_lost
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


class Completer:
    def __init__(
        self,
        context: WorkerContext,
        *,
        held: HeldJobs,
        counts: Counts,
        stats: WorkerStats,
        failures: FailureWriter,
    ) -> None:
        self.context = context
        self.worker_id = context.worker_id
        self.database = context.database
        self.held = held
        self.counts = counts
        self.stats = stats
        self.failures = failures
        # Completed attempts not yet written. The runners append to it under ``lock`` (and
        # set ``since`` for the first), inline in RunnerPool._process.
        self.pending: list[Done] = []
        self.since = 0.0  # time.monotonic() when the oldest of them was added
        self.lock = threading.Lock()

    def flush(self, *, force: bool = False, idle: bool = False) -> None:
        """Write the buffered completions if it is time; ``idle``: nothing is running."""
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

    def write(self, batch: list[Done]) -> None:
        try:
            written = self._complete(batch)
        except DatabaseError as exc:
            if self.context.forced.is_set():
                raise
            # Not a lost connection (those are retried): the database refuses the write.
            # Find the completion it refuses, and record that as its attempt's error, rather
            # than losing the whole batch (and the worker's main thread) to one row.
            if len(batch) > 1:
                logger.warning(
                    "Worker %s: writing %d completions failed (%s: %s); writing them one by one",
                    self.worker_id,
                    len(batch),
                    type(exc).__name__,
                    exc,
                )
                for item in batch:
                    self.write([item])
                return
            try:
                self.failures.record(batch[0].job, lifecycle.ErrorInfo.from_exception(exc))
            except DatabaseError:
                logger.exception(
                    "Worker %s: could not record the outcome of job id=%s; it will be "
                    "retried once its lease runs out",
                    self.worker_id,
                    batch[0].job.id,
                    extra=extra_for(batch[0].job),
                )
            return
        self.held.discard(item.job.id for item in batch)
        log = job_logger.isEnabledFor(logging.INFO)
        completed: dict[str, int] = {}  # per queue: counted once per batch, not per job
        for item in batch:
            job = item.job
            status = written.get(job.id)
            if status is None:
                log_lost(job)
            elif status == JobStatus.COMPLETED and not log and item.handler.on_finish is None:
                completed[job.queue] = completed.get(job.queue, 0) + 1  # the usual case
            else:
                self._written(item, status, log=log, completed=completed)
        self.counts.done += sum(completed.values())
        self.stats.completed_many(completed)

    def committed(self, item: Done, status: str) -> None:
        """An atomic handler's completion, committed with its writes by the runner thread
        (worker/atomic.py): count, log and call its hook as for a batch's."""
        self.held.discard([item.job.id])
        completed: dict[str, int] = {}
        self._written(item, status, log=job_logger.isEnabledFor(logging.INFO), completed=completed)
        self.counts.done += sum(completed.values())
        self.stats.completed_many(completed)

    def lost_atomic(self, job: ClaimedJob, error: lifecycle.ErrorInfo) -> None:
        """An atomic handler whose completion the fence refused: its transaction was rolled
        back, nothing of this attempt is written (the job belongs to someone else now)."""
        self.held.discard([job.id])
        logger.warning(
            "Job id=%s type=%s attempt=%d: this worker no longer holds the job (its lease "
            "expired and another worker or an operator took it over); the atomic handler's "
            "writes were rolled back (%s: %s)",
            job.id,
            job.type,
            job.attempts,
            error.exception_class,
            error.message,
            extra=extra_for(job),
        )

    def _written(self, item: Done, status: str, *, log: bool, completed: dict[str, int]) -> None:
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

    def _complete(self, batch: list[Done]) -> dict[int, str]:
        """Write the batch's completions. The jobs nothing waits for and that do not
        continue a chain (nearly all): one statement. The others (and any the first
        statement left out: lost, or waited for since they were claimed): their
        completions, their chains' next steps and the release of the jobs that waited for
        them, in one transaction (django_sqlq.workflows.complete)."""
        plain = [item for item in batch if item.then is None]
        written: dict[int, str] = {}
        if plain:
            written = with_retry(
                self.context,
                "complete",
                lambda: ops_for(self.database).complete_statuses(
                    [Finished(item.job.id, item.job.attempts, item.result) for item in plain],
                    worker_id=self.worker_id,
                    now=self.context.now(),
                    unwaited=True,
                    skip_locked=True,
                ),
            )
        rest = [item for item in batch if item.job.id not in written]
        if rest:
            written.update(
                with_retry(
                    self.context,
                    "complete",
                    lambda: (
                        workflows.complete(
                            self.database,
                            [(item.job, item.result, item.then) for item in rest],
                            worker_id=self.worker_id,
                            now=self.context.now(),
                        ).statuses
                    ),
                )
            )
        return written
