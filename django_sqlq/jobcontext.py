"""What a handler and its hooks get: the ``JobContext`` of a handler registered
``takes_context=True`` (and of its ``on_start``/``on_finish`` hooks), made for a claimed job
by :func:`job_context`; :func:`call_hook` calls a hook, logging what it raises (a hook that
raises is never the job's outcome)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, cast

from django_sqlq.control import JobControl, check_progress
from django_sqlq.db.columns import ClaimedJob
from django_sqlq.exceptions import StepError
from django_sqlq.logs import job_extra
from django_sqlq.steps import Steps
from django_sqlq.workflows import continuation

logger = logging.getLogger("django_sqlq.worker")


@dataclass(frozen=True)
class JobContext:
    """What a handler registered with ``takes_context=True`` receives after the payload."""

    job_id: int
    type: str
    queue: str
    attempt: int
    max_attempts: int
    worker_id: str
    database: str = "default"  # the alias of the queue database this worker serves
    # The attempt's cancel flag and progress (None outside a worker: a context made by hand
    # or by a test runs its handler with no one to cancel it or read its progress).
    control: JobControl | None = field(default=None, repr=False, compare=False)

    @property
    def cancel_requested(self) -> bool:
        """Whether the job was cancelled while it runs (``django_sqlq.cancel()``, the
        admin's Cancel). The worker learns of it within about a second."""
        return self.control is not None and self.control.cancelled

    def check_cancelled(self) -> None:
        """A checkpoint: raise :class:`~django_sqlq.exceptions.JobCancelled` if the job was
        cancelled. Let it propagate; the job is recorded ``cancelled``, not retried."""
        if self.control is not None:
            self.control.check_cancelled()

    def set_progress(self, fraction: float, message: str = "") -> None:
        """Report progress: ``fraction`` from 0 to 1, and a short message (cut to 255
        characters). Kept in memory and written by the worker about once a second, never
        in the handler's thread; the last value stays on the job once it finishes. Raises
        TypeError/ValueError for a fraction that is not a number from 0 to 1 (NaN too)."""
        if self.control is not None:
            self.control.set_progress(fraction, message)
        else:
            check_progress(fraction, message)  # the same errors outside a worker

    def continue_with(
        self,
        target: Any,
        payload: Any = None,
        *,
        queue: str | None = None,
        priority: int = 0,
        run_at: Any = None,
        delay: Any = None,
        max_attempts: int | None = None,
        timeout: float | None = None,
    ) -> None:
        """Continue this job's chain with the next step: a job of ``target`` (a handler's
        name, dotted path or function) with ``payload``, written in the same transaction
        that records this job completed, and only then. Nothing is written if this attempt
        fails (its retry may ask again), is cancelled, or lost its lease. ``queue``: this
        job's queue unless given; the other options as ``enqueue()`` takes them, checked
        here (bad input raises in the handler). Once per attempt."""
        if self.control is None:
            raise RuntimeError(
                "continue_with() needs a job run by a worker (or by django_sqlq.testing's "
                "run_jobs()): this JobContext was made by hand."
            )
        if self.control.continuation is not None:
            raise RuntimeError(
                f"Job id={self.job_id} already asked to continue with a next step; a chain "
                "step has one next step (enqueue() more jobs, or a group, for a fan-out)."
            )
        self.control.continuation = continuation(
            target,
            payload,
            queue=self.queue if queue is None else queue,
            priority=priority,
            run_at=run_at,
            delay=delay,
            max_attempts=max_attempts,
            timeout=timeout,
        )

    # -- durable steps (django_sqlq.steps) ------------------------------------------------

    def step(self, name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run ``fn(*args, **kwargs)`` once for this job: the first time, run it in a
        transaction on the queue's database and record its result (JSON) under ``name``
        with it; on every later attempt, return that result without running ``fn``. What
        ``fn`` writes to the queue's database commits with the record (exactly once); other
        side effects are at least once. ``name``: unique within the job."""
        return self._steps().step(name, fn, *args, **kwargs)

    def sleep(self, name: str, when: float | timedelta | datetime) -> None:
        """Sleep until ``when`` (seconds, a timedelta or a datetime) without holding a
        worker: the attempt ends here, uncounted, and the job runs again from the top when
        the time comes, its recorded steps replayed; this call then returns."""
        self._steps().sleep(name, when)

    def wait_for_event(
        self, name: str, key: str, *, timeout: float | timedelta | datetime | None
    ) -> Any:
        """The payload of the event ``key`` (``django_sqlq.emit_event(key, payload)``),
        waiting without a worker until it is emitted: the attempt ends here, uncounted, and
        the job runs again once it is. Raises
        :class:`~django_sqlq.exceptions.EventTimeout` (recorded: every later attempt too)
        once ``timeout`` (seconds, a timedelta or a datetime; None: no limit) has passed."""
        return self._steps().wait_for_event(name, key, timeout)

    def _steps(self) -> Steps:
        if self.control is None:
            raise StepError(
                "Durable steps need a job run by a worker (or by django_sqlq.testing's "
                "run_jobs()): this JobContext was made by hand."
            )
        steps = self.control.steps
        if steps is None:
            steps = self.control.steps = Steps(
                self.database, self.job_id, worker_id=self.worker_id, attempt=self.attempt
            )
        return cast("Steps", steps)


def job_context(
    job: ClaimedJob, worker_id: str, database: str, control: JobControl | None = None
) -> JobContext:
    return JobContext(
        control=control,
        job_id=job.id,
        type=job.type,
        queue=job.queue,
        attempt=job.attempts,
        max_attempts=job.max_attempts,
        worker_id=worker_id,
        database=database,
    )


def call_hook(worker_id: str, hook: Callable[..., None] | None, *args: Any) -> None:
    """Call ``hook(context, ...)``; log what it raises, with the job (its first argument)."""
    if hook is None:
        return
    try:
        hook(*args)
    except Exception:
        context = args[0] if args else None
        extra = (
            job_extra(context.job_id, context.type, context.queue, context.attempt)
            if isinstance(context, JobContext)
            else None
        )
        logger.exception("Worker %s: a handler hook raised", worker_id, extra=extra)
