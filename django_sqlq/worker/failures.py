"""The failure writer: writes each failed attempt at once, from the runner thread that ran
it (retried at its backoff, failed for good when its attempts are spent, or cancelled),
and, after a forced stop, the attempts the stop interrupted. Every write is fenced by
worker id and attempt, as the completer's are: an outcome for a job this worker no longer
holds changes nothing and is logged as lost (``log_lost``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.db import DatabaseError

from django_sqlq import lifecycle, registry
from django_sqlq.db.columns import ClaimedJob
from django_sqlq.exceptions import JobInterruptedError
from django_sqlq.jobcontext import call_hook, job_context
from django_sqlq.logs import extra_for
from django_sqlq.models import JobStatus
from django_sqlq.retries import RetryPolicy
from django_sqlq.worker.context import Counts, HeldJobs, WorkerContext
from django_sqlq.worker.dbretry import reset_connection, with_retry
from django_sqlq.worker.stats import WorkerStats

logger = logging.getLogger("django_sqlq.worker")


class FailureWriter:
    """Writes failed attempts. ``retries``: the retry policy that decides each one (retried
    or not, and when); ``retry_scheduled(seconds)``: told of each retry written (the stager wakes
    for it: no NOTIFY tells the worker of its own retries)."""

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

    def record(
        self,
        job: ClaimedJob,
        error: lifecycle.ErrorInfo,
        *,
        retry: bool = True,
        cancel: bool = False,
    ) -> str | None:
        """Write a failed attempt at once (``cancel``: a cancelled one). Returns the job's new
        status, or None if lost."""
        context = self.context
        retry_in = self.retries.retry_in(
            job.attempts, job.max_attempts, retry=retry, cancel=cancel
        )

        def write() -> str | None:
            return lifecycle.fail_or_retry(
                self.database,
                job,
                error,
                worker_id=self.worker_id,
                retry_in=retry_in,
                now=context.now(),
                cancel=cancel,
            )

        try:
            try:
                status = with_retry(context, "fail", write)
            except DatabaseError as exc:
                if context.forced.is_set():
                    raise
                # A handler can leave its connection (this thread's) in a session state that
                # refuses the queue's writes: SET search_path, SET
                # default_transaction_read_only, PRAGMA query_only... A new connection has
                # none of it; without one, every later job of this thread lost its outcome.
                logger.warning(
                    "Worker %s: could not record the failure of job id=%s (%s: %s); "
                    "retrying on a new database connection",
                    self.worker_id,
                    job.id,
                    type(exc).__name__,
                    exc,
                    extra=extra_for(job),
                )
                reset_connection(self.database)
                status = with_retry(context, "fail", write)
        finally:
            self.held.discard([job.id])
        if status is None:
            log_lost(job)
            return None
        if status == JobStatus.CANCELLED:
            self.counts.cancelled += 1
            logger.info(
                "Job id=%s type=%s attempt %d cancelled (%s: %s)",
                job.id,
                job.type,
                job.attempts,
                error.exception_class,
                error.message,
                extra=extra_for(job),
            )
            return status
        self.counts.failed += 1
        if status != JobStatus.FAILED:
            self.counts.retried += 1
        self.stats.failed(job.queue, retried=status != JobStatus.FAILED)
        if status == JobStatus.SCHEDULED and retry_in is not None:
            self.retry_scheduled(retry_in)
        if status == JobStatus.FAILED:
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
                retry_in,
                extra=extra_for(job),
            )
        return status

    def record_interrupted(self, running: list[ClaimedJob]) -> None:
        """After a forced stop: record each running job's attempt as failed at once (retried
        or failed by its attempts), rather than leaving it to its lease. Fenced by worker
        and attempt, like every outcome: a job this worker no longer holds is left alone."""
        recorded = 0
        for job in running:
            error = lifecycle.ErrorInfo.from_exception(
                JobInterruptedError(f"interrupted by a forced stop of worker {self.worker_id}")
            )
            try:
                status = self.record(job, error)
            except Exception as exc:  # the database is gone: the lease is the fallback
                logger.warning(
                    "Worker %s could not record the interrupted job id=%s (%s: %s): left to "
                    "its lease",
                    self.worker_id,
                    job.id,
                    type(exc).__name__,
                    exc,
                    extra=extra_for(job),
                )
                continue
            if status is None:
                continue
            recorded += 1
            try:
                handler = registry.get(job.type)
            except Exception:  # noqa: S112 - no handler: no hook to call
                continue
            context = job_context(job, self.worker_id, self.database)
            call_hook(self.worker_id, handler.on_finish, context, status, error)
        logger.warning(
            "Worker %s forced to stop: %d running job(s) interrupted, %d recorded at once%s",
            self.worker_id,
            len(running),
            recorded,
            "" if recorded == len(running) else " (the others are left to lease expiry)",
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
