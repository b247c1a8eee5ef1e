"""Running jobs in the caller's thread, on its connection and inside its transaction, with
the real handlers and the real lifecycle writes: :func:`run_jobs` and :func:`run_job` (the
test helpers :mod:`django_sqlq.testing` offers), and :func:`run_inline`, which
``enqueue()`` calls under ``SQLQ["TESTING"] = "inline"`` to run each job at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, cast

from asgiref.sync import async_to_sync
from django.db import connections, transaction
from django.db.models import F
from django.utils import timezone

from django_sqlq import lifecycle, outcomes, registry, workflows
from django_sqlq.conf import get_settings
from django_sqlq.control import JobControl
from django_sqlq.db.columns import ClaimedJob
from django_sqlq.exceptions import Suspended
from django_sqlq.jobcontext import JobContext, call_hook, job_context
from django_sqlq.jsoncodec import encode_json
from django_sqlq.logs import extra_for
from django_sqlq.models import Job, JobQuerySet, JobStatus
from django_sqlq.retries import RetryPolicy
from django_sqlq.steps import Steps

logger = logging.getLogger("django_sqlq.testing")

# The worker id that run_jobs() claims jobs under (``locked_by``).
TEST_WORKER_ID = "django_sqlq.testing"

# The statuses of a job a worker may claim once its time has come.
RUNNABLE_STATUSES: tuple[str, ...] = (JobStatus.PENDING, JobStatus.SCHEDULED)

CLOCK_SLACK = timedelta(milliseconds=1)


def due(queryset: JobQuerySet, now: datetime | None) -> JobQuerySet:
    """The jobs of ``queryset`` a worker would claim at ``now`` (``None``: whatever their
    scheduled time), in the worker's claim order."""
    runnable = queryset.filter(status__in=RUNNABLE_STATUSES)
    if now is not None:
        runnable = runnable.filter(scheduled_at__lte=now)
    return runnable.order_by("-priority", "scheduled_at", "id")


def _alias(using: str | None) -> str:
    return using or get_settings().DATABASE


@dataclass
class RunResult:
    """What :func:`run_jobs` did: attempts that completed, failed with a retry to come, and
    failed for good, and the ids of the jobs it ran, in order."""

    completed: int = 0
    retried: int = 0
    failed: int = 0
    job_ids: list[int] = field(default_factory=list)
    #: Attempts that ended in a durable sleep or wait (``context.sleep()``,
    #: ``wait_for_event()``): not counted as attempts of their jobs.
    slept: int = 0

    @property
    def ran(self) -> int:
        return self.completed + self.retried + self.failed + self.slept

    def _add(self, job_id: int, status: str, *, slept: bool = False) -> None:
        self.job_ids.append(job_id)
        if slept:
            self.slept += 1
        elif status == JobStatus.COMPLETED:
            self.completed += 1
        elif status == JobStatus.FAILED:
            self.failed += 1
        else:
            self.retried += 1


def run_jobs(
    queue: str | Sequence[str] | None = None,
    *,
    now: datetime | None = None,
    with_scheduled: bool = False,
    max_jobs: int | None = None,
    raise_errors: bool = False,
    using: str | None = None,
) -> RunResult:
    """Run due jobs one by one, in this thread and on this thread's connection (so inside
    the test's transaction), until none is left: jobs the handlers enqueue run too.

    ``queue``: a name or a list of names (default: every queue). ``now``: the time that
    decides which jobs are due (default: ``timezone.now()``); ``with_scheduled=True`` runs
    jobs scheduled for later too. ``max_jobs``: stop after that many attempts.
    ``raise_errors=True``: after recording a failed attempt, raise the handler's exception.

    Each job is claimed, run by its registered handler and its outcome written by the same
    code the worker uses (completed, retried with backoff, or failed). A handler that raises
    has its database writes rolled back (it runs in a savepoint), so the test's transaction
    stays usable. Handlers' ``timeout`` is not enforced for synchronous handlers.
    """
    if max_jobs is not None and (
        isinstance(max_jobs, bool) or not isinstance(max_jobs, int) or max_jobs < 1
    ):
        raise ValueError(f"max_jobs must be a whole number >= 1, got {max_jobs!r}.")
    alias = _alias(using)
    queues = [queue] if isinstance(queue, str) else list(queue) if queue is not None else None
    result = RunResult()
    # The jobs asleep in a durable sleep or wait that is not over: not run again by this
    # call, even with_scheduled (they would only go back to sleep).
    asleep: set[int] = set()
    while max_jobs is None or result.ran < max_jobs:
        # SQLite keeps the queue's timestamps to the (rounded) millisecond: a retry due "now"
        # may be stored up to half a millisecond ahead of the clock.
        when = now or timezone.now() + CLOCK_SLACK
        candidates = due(Job.objects.using(alias), None if with_scheduled else when)
        if queues is not None:
            candidates = candidates.filter(queue__in=queues)
        if asleep:  # until an event or an operator wakes one (pending)
            candidates = candidates.exclude(id__in=asleep, status=JobStatus.SCHEDULED)
        job_id = candidates.values_list("id", flat=True).first()
        if job_id is None:
            break
        slept: set[int] = set()
        status = _run(alias, job_id, now=now, raise_errors=raise_errors, slept=slept)
        if status is not None:
            result._add(job_id, status, slept=bool(slept))
            if slept and status == JobStatus.SCHEDULED:
                asleep.add(job_id)
    return result


def run_job(
    job: Job | int, *, now: datetime | None = None, raise_errors: bool = False
) -> str | None:
    """Run one waiting job now, whatever its scheduled time, as :func:`run_jobs` runs each.
    Returns its new status (``"completed"``, ``"pending"`` for a retry to come, or
    ``"failed"``), or None if it was not waiting to run. Refreshes ``job`` if given."""
    alias = job._state.db if isinstance(job, Job) and job._state.db else _alias(None)
    job_id = job.pk if isinstance(job, Job) else job
    status = _run(alias, job_id, now=now, raise_errors=raise_errors, slept=set())
    if isinstance(job, Job) and status is not None:
        job.refresh_from_db(using=alias)
    return status


def _claim(alias: str, job_id: int, now: datetime) -> ClaimedJob | None:
    """pending -> processing for this one job, as the worker's claim does."""
    lease = timedelta(seconds=get_settings().LEASE_SECONDS)
    jobs = Job.objects.using(alias)
    claimed = jobs.filter(pk=job_id, status__in=RUNNABLE_STATUSES).update(
        status=JobStatus.PROCESSING,
        attempts=F("attempts") + 1,
        locked_by=TEST_WORKER_ID,
        locked_at=now,
        started_at=now,
        lease_expires_at=now + lease,
        updated_at=now,
    )
    if not claimed:
        return None
    return ClaimedJob._make(jobs.values_list(*ClaimedJob._fields).get(pk=job_id))


def _run(
    alias: str,
    job_id: int,
    *,
    now: datetime | None,
    raise_errors: bool,
    slept: set[int],
) -> str | None:
    """Run one job as a worker would; ``slept`` gets its id if it ended in a durable sleep
    or wait. Its new status, or None if it was not there to claim."""
    registry.autodiscover()  # as the worker does: apps' jobs.py register their handlers
    claimed = _claim(alias, job_id, now or timezone.now())
    if claimed is None:
        return None
    control = JobControl(claimed.id, claimed.attempts)
    context = job_context(claimed, TEST_WORKER_ID, alias, control)
    handler: registry.Handler | None = None
    error: BaseException | None = None
    suspended: Suspended | None = None
    status: str | None
    result: Any = None
    follow: list[int] = []
    try:
        handler = registry.get(claimed.type)
        if handler.on_start is not None:
            call_hook(TEST_WORKER_ID, handler.on_start, context)
        with _savepoints():
            result, suspended = _call_with_steps(alias, handler, claimed, context, now)
    except Exception as exc:
        error = exc
    if suspended is not None:
        slept.add(claimed.id)
        return outcomes.write(
            alias,
            [outcomes.Slept(claimed, suspended.until, suspended.wait_key)],
            worker_id=TEST_WORKER_ID,
            now=now or timezone.now(),
        ).statuses.get(claimed.id)
    if error is None and handler is not None:
        then = cast("workflows.Continuation | None", control.continuation)
        done = outcomes.write(
            alias,
            [outcomes.Completed(claimed, result, then)],
            worker_id=TEST_WORKER_ID,
            now=now or timezone.now(),
        )
        status = done.statuses.get(claimed.id)
        outcome: Any = result
        if get_settings().TESTING == "inline":
            # As enqueue() runs a job at once in inline mode: the chain's next step, and the
            # jobs this one was the last to wait for.
            follow = [*done.continued, *done.released]
    else:
        assert error is not None
        info = lifecycle.ErrorInfo.from_exception(error)
        retry_in = RetryPolicy.from_settings().retry_in(claimed.attempts, claimed.max_attempts)
        status = outcomes.write(
            alias,
            [outcomes.Failed(claimed, info, retry_in)],
            worker_id=TEST_WORKER_ID,
            now=now or timezone.now(),
        ).statuses.get(claimed.id)
        outcome = info
        logger.warning(
            "Job id=%s type=%s attempt %d/%d failed (%s: %s): %s",
            claimed.id,
            claimed.type,
            claimed.attempts,
            claimed.max_attempts,
            info.exception_class,
            info.message,
            status,
            extra=extra_for(claimed),
        )
    if handler is not None and handler.on_finish is not None and status is not None:
        call_hook(TEST_WORKER_ID, handler.on_finish, context, status, outcome)
    if error is not None and raise_errors:
        raise error
    for job_id in follow:
        run_job(job_id, now=now, raise_errors=raise_errors)
    return status


def _call_with_steps(
    alias: str,
    handler: registry.Handler,
    claimed: ClaimedJob,
    context: JobContext,
    now: datetime | None,
) -> tuple[Any, Suspended | None]:
    """Call the handler, its durable steps on the clock of the run's ``now``: its result,
    or the sleep or wait it ended in (caught here, inside the savepoint, so that what the
    sleep recorded stays)."""
    assert context.control is not None
    steps = context.control.steps = Steps(
        alias,
        claimed.id,
        worker_id=context.worker_id,
        attempt=claimed.attempts,
        depth=len(connections[alias].atomic_blocks),
        atomic=handler.atomic,
        clock=(lambda: now) if now is not None else None,
    )
    try:
        result = _call(handler, claimed, context)
    except Suspended as exc:
        return None, exc
    steps.check_returned()
    if result is not None:
        encode_json(result, what="handler's return value", limit=get_settings().MAX_PAYLOAD_BYTES)
    return result, None


def _call(handler: registry.Handler, job: ClaimedJob, context: JobContext) -> Any:
    args: tuple[Any, ...] = (job.payload,)
    if handler.takes_context:
        args += (context,)
    if not handler.is_async:
        return handler.func(*args)

    async def call() -> Any:
        coroutine = handler.func(*args)
        if job.timeout is not None:
            return await asyncio.wait_for(coroutine, job.timeout)
        return await coroutine

    # async_to_sync, not a new event loop: the handler's sync_to_async() calls then run in
    # this thread, on the test's connection.
    return async_to_sync(call)()


@contextlib.contextmanager
def _savepoints() -> Iterator[None]:
    """A savepoint in every open transaction: what a handler that raises wrote is undone,
    and the transactions (the test's) stay usable."""
    with contextlib.ExitStack() as stack:
        for alias in connections:
            if alias in connections.settings and connections[alias].in_atomic_block:
                stack.enter_context(transaction.atomic(using=alias))
        yield


def run_inline(jobs: Iterable[Job]) -> None:
    """Run jobs just written, once each (enqueue() calls this in inline mode)."""
    for job in jobs:
        run_job(job)
