"""The runner pool: ``concurrency`` threads that take claimed jobs from the inbox, run
their handlers and hand each outcome to the completer (Solid Queue's ``Pool``).

Owns the count of jobs in hand (claimed and not yet finished, waiting or running), the
jobs running now, and the recent average run time the claimer sizes its prefetch by. A
runner wakes the main thread when there is something for it to do: room to claim, a batch
of completions to write, or a first completion to schedule a flush for.
"""

from __future__ import annotations

import contextvars
import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from django.db import connections
from django.utils import timezone, translation

from django_sqlq import lifecycle, registry, tracing
from django_sqlq.control import JobControl
from django_sqlq.db.columns import ClaimedJob
from django_sqlq.exceptions import JobCancelled, LeaseLostError, PayloadError
from django_sqlq.jobcontext import call_hook, job_context
from django_sqlq.jsoncodec import decode_json, encode_json
from django_sqlq.logs import extra_for
from django_sqlq.worker.atomic import ResultRefused, run_atomic
from django_sqlq.worker.completer import FLUSH_BATCH, Done
from django_sqlq.worker.inbox import STOP, Inbox
from django_sqlq.worker.invoke import (
    check_connections,
    close_event_loop,
    context_changed,
    invoke,
    thread_state,
    tidy_connections,
)
from django_sqlq.worker.maintenance.service import join

if TYPE_CHECKING:
    from django_sqlq.worker.core import Worker

logger = logging.getLogger("django_sqlq.worker")
job_logger = logging.getLogger("django_sqlq.worker.jobs")


class RunnerPool:
    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.worker_id = worker.worker_id
        self.database = worker.database
        self.conf = worker.conf
        self.concurrency = worker.concurrency
        self.completer = worker.completer
        self._stopping = worker.stop_event
        self._wakeup = worker.wakeup
        self.inbox = Inbox()
        self.busy = 0  # claimed and not yet finished (waiting in the inbox or running)
        self.busy_lock = threading.Lock()
        self.running: dict[int, ClaimedJob] = {}
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
                    self.worker.claimer.release_unstarted()
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
                    self.worker.held.discard([job.id])
                finally:
                    if self.worker.queue_control.counting:  # --queue NAME:N only
                        self.worker.queue_control.finished((job.queue,))
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
            if outcome != "completed":
                tracing.failed(span, getattr(value, "exception", None), _describe(value))

    def _process_untraced(self, job: ClaimedJob) -> tuple[str, Any]:
        self.running[job.id] = job
        control = self.worker.controls.begin(job.id, job.attempts)
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
                    outcome, value = self._call_handler(job, handler, control)
        finally:
            self.running.pop(job.id, None)
            self.worker.controls.end(control)
        elapsed = time.monotonic() - started
        self.avg_runtime = (
            elapsed if self.avg_runtime is None else 0.8 * self.avg_runtime + 0.2 * elapsed
        )
        self.worker.stats.ran(job.queue, job.scheduled_at, started_wall, elapsed)
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
        value: lifecycle.ErrorInfo,
    ) -> tuple[str, Any]:
        """Write a failed attempt (retried, failed or cancelled) and call its hook."""
        retry = outcome == "failed" and job.attempts <= job.max_attempts
        # Cancelled while it ran (whatever the handler raised: JobCancelled at a checkpoint,
        # CancelledError in an async task, or any error), or cancelled by its own handler.
        cancel = control.cancelled or isinstance(value.exception, JobCancelled)
        status = self.completer.record_failure(job, value, retry=retry, cancel=cancel)
        if status is not None and handler is not None:
            context = job_context(job, self.worker_id, self.database, control)
            call_hook(self.worker_id, handler.on_finish, context, status, value)
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
            self.completer.lost_atomic(job, value)
            return "lost", value
        result, status = value
        self.completer.committed(Done(job, result, handler, elapsed), status)
        return "completed", result

    def _call_handler(
        self, job: ClaimedJob, handler: registry.Handler, control: JobControl
    ) -> tuple[str, Any]:
        """Run the handler. Returns ("completed", result), or ("failed", ErrorInfo) for an
        attempt that may be retried, or ("failed_for_good", ErrorInfo) for one that may not.
        An atomic handler's: ("committed", (result, status)) once its completion committed
        with its writes, or ("lost", ErrorInfo) when the fence refused it (rolled back)."""
        context_before = contextvars.copy_context()
        try:
            payload = decode_json(job.payload)
            args: tuple[Any, ...] = (payload,)
            if handler.takes_context:
                args += (job_context(job, self.worker_id, self.database, control),)
            # The job's own timeout, else its handler's, read here in the worker (which
            # imported the handler) rather than at enqueue (where it may not be).
            timeout = job.timeout if job.timeout is not None else handler.timeout
            if handler.atomic:
                committed = invoke(
                    self._atomic_call(job, handler, control),
                    args,
                    timeout,
                    is_async=False,
                    control=control,
                    atomic_alias=self.database,
                )
                check_connections()
                return "committed", committed
            result = invoke(
                handler.func, args, timeout, is_async=handler.is_async, control=control
            )
            check_connections()
        except LeaseLostError as exc:
            tidy_connections()
            return "lost", lifecycle.ErrorInfo.from_exception(exc)
        except ResultRefused as exc:
            tidy_connections()
            error = _refused(exc.error, atomic=True)
            return "failed_for_good", lifecycle.ErrorInfo.from_exception(error)
        except BaseException as exc:
            tidy_connections()
            return "failed", lifecycle.ErrorInfo.from_exception(exc)
        finally:
            # A language or time zone a handler activated (translation.activate(user's
            # language), as an e-mail job does) stays with the thread, so the next job of
            # this thread ran with it: its e-mail went out in the previous user's language.
            # Both live in context variables (asgiref's Local): reset them when the handler
            # changed any. (Resetting unconditionally cost ~10 us a job, a fifth of a no-op
            # job's time.)
            if context_changed(context_before):
                translation.deactivate()
                timezone.deactivate()
        # The same checks as a payload's, size limit included: a result the database would
        # refuse fails the job instead of the write of a batch of completions. For good: the
        # work is done and only its record is impossible; running it again would repeat its
        # side effects and end the same way.
        if result is not None:
            try:
                encode_json(
                    result, what="handler's return value", limit=self.conf.MAX_PAYLOAD_BYTES
                )
            except PayloadError as exc:
                return "failed_for_good", lifecycle.ErrorInfo.from_exception(_refused(exc))
        return "completed", result

    def _atomic_call(self, job: ClaimedJob, handler: registry.Handler, control: JobControl) -> Any:
        """The function invoke() runs for an atomic handler, in the handler's thread."""

        def call(*args: Any) -> tuple[Any, str]:
            return run_atomic(
                handler.func,
                *args,
                alias=self.database,
                job=job,
                worker_id=self.worker_id,
                now=self.worker.now,
                max_result_bytes=self.conf.MAX_PAYLOAD_BYTES,
                control=control,
            )

        return call


def _refused(exc: PayloadError, *, atomic: bool = False) -> PayloadError:
    """The error of a handler whose return value cannot be stored."""
    why = (
        "its writes were rolled back, and running it again would return the same"
        if atomic
        else "running it again would repeat its work"
    )
    return PayloadError(
        f"{exc} The handler ran to the end; the job is failed without retry, as {why} "
        "(return only what JSON can hold: convert datetimes, sets... or store large data "
        "elsewhere)."
    )


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
