"""The runner pool: ``concurrency`` threads that take claimed jobs from the inbox, run
their handlers and hand each outcome, completed or failed, to the completer (Solid Queue's
``Pool``).

Owns the count of jobs in hand (claimed and not yet finished, waiting or running), the
jobs running now, and the recent average run time the claimer sizes its prefetch by; on
stop, it gives back the claimed jobs no runner has started. A
runner wakes the main thread when there is something for it to do: room to claim, a batch
of completions to write, or a first completion to schedule a flush for.
"""

from __future__ import annotations

import logging
import queue as queue_module
import threading
import time
from typing import Any

from django.db import DatabaseError, connections

from django_sqlq import lifecycle, registry, tracing
from django_sqlq.control import JobControl
from django_sqlq.db.columns import ClaimedJob
from django_sqlq.exceptions import JobCancelled, Suspended
from django_sqlq.jobcontext import call_hook, job_context
from django_sqlq.logs import extra_for
from django_sqlq.worker.completer import FLUSH_BATCH, Completer, Done
from django_sqlq.worker.context import HeldJobs, WorkerContext
from django_sqlq.worker.dbretry import with_retry
from django_sqlq.worker.inbox import STOP, Inbox
from django_sqlq.worker.invoke import (
    after_database_error,
    close_event_loop,
    run_handler,
    thread_state,
)
from django_sqlq.worker.maintenance.jobcontrols import JobControls
from django_sqlq.worker.maintenance.service import join
from django_sqlq.worker.queuecontrol import QueueControl
from django_sqlq.worker.stats import WorkerStats

logger = logging.getLogger("django_sqlq.worker")
job_logger = logging.getLogger("django_sqlq.worker.jobs")


class RunnerPool:
    def __init__(
        self,
        context: WorkerContext,
        *,
        completer: Completer,
        controls: JobControls,
        queue_control: QueueControl,
        held: HeldJobs,
        stats: WorkerStats,
        running: dict[int, ClaimedJob],
    ) -> None:
        self.context = context
        self.worker_id = context.worker_id
        self.database = context.database
        self.conf = context.conf
        self.concurrency = context.concurrency
        self.completer = completer
        self.controls = controls
        self.queue_control = queue_control
        self.held = held
        self.stats = stats
        self._stopping = context.stop_event
        self._wakeup = context.wakeup
        self.inbox = Inbox()
        self.busy = 0  # claimed and not yet finished (waiting in the inbox or running)
        self.busy_lock = threading.Lock()
        self.running = running  # the jobs running now, by id (shared with the job controls)
        self.avg_runtime: float | None = None
        self.refill_at = 0  # the claimer sets it: wake it when busy falls to this level
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        self._threads = [
            threading.Thread(target=self._runner, name=f"sqlq-runner-{i}", daemon=True)
            for i in range(self.concurrency)
        ]
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        """Let each runner finish its job and exit; wait for them."""
        for _ in self._threads:
            self.inbox.put(STOP)
        for thread in self._threads:
            join(thread)

    def release_unstarted(self) -> None:
        """On stop: give back the claimed jobs no runner has started (their attempt is not
        counted)."""
        context = self.context
        unstarted: list[ClaimedJob] = []
        while True:
            try:
                item = self.inbox.get_nowait()
            except queue_module.Empty:
                break
            if item is not STOP:
                unstarted.append(item)
        if not unstarted:
            return
        ids = [job.id for job in unstarted]
        try:
            released = with_retry(
                context,
                "release",
                lambda: lifecycle.release(
                    self.database, ids, worker_id=self.worker_id, now=context.now()
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
        self.held.discard(ids)
        self.queue_control.finished(job.queue for job in unstarted)
        with self.busy_lock:
            self.busy -= len(unstarted)
        logger.info(
            "Worker %s gave back %d unstarted job(s): %s",
            self.worker_id,
            released,
            ids,
            extra={"job_ids": ids},
        )

    def _runner(self) -> None:
        # This thread's wrapper of every database (none is opened here): what the handlers
        # run in this thread can use, and what tidy_connections checks after each job.
        thread_state.connections = [connections[alias] for alias in connections]
        try:
            while True:
                job = self.inbox.get()
                if job is STOP:
                    return
                if self._stopping.is_set():
                    # Claimed but not started: give it back rather than start it now.
                    self.inbox.put(job)
                    self.release_unstarted()
                    continue
                try:
                    self._process(job)
                except Exception:
                    # Not the handler (its errors are the job's outcome): the outcome could not
                    # be written. The runner lives on; the job's lease, no longer renewed,
                    # runs out and the reaper returns it to the queue.
                    logger.exception(
                        "Worker %s: could not record the outcome of job id=%s; it will be "
                        "retried once its lease runs out",
                        self.worker_id,
                        job.id,
                        extra=extra_for(job),
                    )
                    self.held.discard([job.id])
                finally:
                    if self.queue_control.counting:  # --queue NAME:N only
                        self.queue_control.finished((job.queue,))
                    with self.busy_lock:
                        self.busy -= 1
                        busy = self.busy
                    # Wake the main thread when there is something for it to do: room to
                    # claim, a batch to write, or a first completion to schedule a flush for.
                    if (
                        busy <= self.concurrency
                        or busy == self.refill_at
                        or len(self.completer.pending) in (1, FLUSH_BATCH)
                    ):
                        self._wakeup.set()
        finally:
            close_event_loop()
            connections.close_all()

    def _process(self, job: ClaimedJob) -> None:
        tracer = tracing.tracer() if tracing.ENABLED else None
        if tracer is None:
            self._process_untraced(job)
            return
        with tracing.processing(tracer, job) as span:
            outcome, value = self._process_untraced(job)
            if outcome not in ("completed", "suspended"):
                tracing.failed(span, getattr(value, "exception", None), _describe(value))

    def _process_untraced(self, job: ClaimedJob) -> tuple[str, Any]:
        self.running[job.id] = job
        control = self.controls.begin(job.id, job.attempts)
        started_wall = time.time()
        started = time.monotonic()
        if job_logger.isEnabledFor(logging.DEBUG):
            job_logger.debug(
                "Job id=%s type=%s attempt=%d started",
                job.id,
                job.type,
                job.attempts,
                extra=extra_for(job),
            )
        handler: registry.Handler | None = None
        try:
            if job.attempts > job.max_attempts:
                # Only a row edited by hand gets here: every transition keeps attempts at or
                # below max_attempts. Its attempts are spent, so it is failed, not run.
                outcome, value = "failed", _spent(job)
            elif control.cancelled:
                # Cancelled after its claim, before a runner took it: not run at all.
                error = JobCancelled(f"Job id={job.id} was cancelled before it started.")
                outcome, value = "failed", lifecycle.ErrorInfo.from_exception(error)
            else:
                try:
                    handler = registry.get(job.type)
                except Exception as exc:
                    outcome, value = "failed", lifecycle.ErrorInfo.from_exception(exc)
                else:
                    if handler.on_start is not None:
                        call_hook(
                            self.worker_id,
                            handler.on_start,
                            job_context(job, self.worker_id, self.database, control),
                        )
                    outcome, value = run_handler(job, handler, control, self.context)
        finally:
            self.running.pop(job.id, None)
            self.controls.end(control)
        elapsed = time.monotonic() - started
        self.avg_runtime = (
            elapsed if self.avg_runtime is None else 0.8 * self.avg_runtime + 0.2 * elapsed
        )
        self.stats.ran(job.queue, job.scheduled_at, started_wall, elapsed)
        if outcome == "completed" and handler is not None:
            # Buffered for the main thread to write in batches (Completer.flush). Appended
            # here rather than through a method of the completer: a call per job costs.
            completer = self.completer
            with completer.lock:
                if not completer.pending:
                    completer.since = time.monotonic()
                completer.pending.append(
                    Done(job, value, handler, elapsed, control.continuation)  # type: ignore[arg-type]
                )
            return outcome, value
        if outcome in ("committed", "lost"):
            return self._atomic_outcome(job, handler, outcome, value, elapsed)
        return self._failed(job, handler, control, outcome, value)

    def _failed(
        self,
        job: ClaimedJob,
        handler: registry.Handler | None,
        control: JobControl,
        outcome: str,
        value: lifecycle.ErrorInfo | Suspended,
    ) -> tuple[str, Any]:
        """Hand a failed attempt (retried, failed or cancelled) to the completer, which
        writes it and calls its hook; or one that ended in a durable sleep or wait
        ("suspended"), which is not a failure."""
        if isinstance(value, Suspended):
            self.completer.suspended(job, value)
            return outcome, value
        # Whether attempts are left is the policy's to say; an outcome other than a plain
        # failure (a result that cannot be stored) is not retried.
        retry = outcome == "failed"
        # Cancelled while it ran (whatever the handler raised: JobCancelled at a checkpoint,
        # CancelledError in an async task, or any error), or cancelled by its own handler.
        cancel = control.cancelled or isinstance(value.exception, JobCancelled)
        self.completer.failed(
            job, value, retry=retry, cancel=cancel, handler=handler, control=control
        )
        after_database_error(value.exception)
        return outcome, value

    def _atomic_outcome(
        self,
        job: ClaimedJob,
        handler: registry.Handler | None,
        outcome: str,
        value: Any,
        elapsed: float,
    ) -> tuple[str, Any]:
        """Account for an atomic handler's attempt: its completion committed with its writes
        ("committed": (result, status)), or refused by the fence and rolled back ("lost")."""
        if outcome == "lost" or handler is None:
            self.completer.lost(job, value, atomic=handler is not None and handler.atomic)
            return "lost", value
        result, status = value
        self.completer.committed(Done(job, result, handler, elapsed), status)
        return "completed", result


def _describe(value: Any) -> str:
    """An attempt's error, for its span's status."""
    if isinstance(value, lifecycle.ErrorInfo):
        return f"{value.exception_class}: {value.message}"
    return str(value)


def _spent(job: ClaimedJob) -> lifecycle.ErrorInfo:
    return lifecycle.ErrorInfo(
        exception_class="django_sqlq.exceptions.InvalidJobError",
        message=(
            f"Not run: attempt {job.attempts} is over max_attempts={job.max_attempts} "
            "(was the row edited by hand?). Retry it from the admin to reset its attempts."
        ),
        traceback="",
    )
