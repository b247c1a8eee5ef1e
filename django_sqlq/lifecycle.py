"""The job state machine. The worker, the admin and the tasks backend all call these
functions; nothing else changes a job's status but the worker's claim (one statement,
``db/claim.py``) and the outcome writer (``django_sqlq.outcomes``: the end of an
attempt, completed, retried, failed or cancelled).

    scheduled -> pending         (promote: its time has come; run_now, by an operator)
    pending -> processing -> completed | failed | cancelled
    processing -> scheduled      (a failed attempt with attempts left, waiting out its backoff)
    processing -> pending        (a retry without backoff, an expired lease, or a job given
                                  back unstarted at shutdown)
    failed | cancelled -> pending (retry_now, by an operator)
    scheduled | pending -> cancelled (cancel)
    processing -> processing with a cancel request (request_cancel), then -> cancelled when
                                 its worker records the attempt's outcome (or gives the job
                                 back unstarted, or its lease runs out)

    blocked -> pending | scheduled (the last job it waits for completed), or -> failed |
                                 cancelled (one failed or was cancelled: its policy);
                                 blocked -> cancelled (cancel)

The ``blocked`` transitions are written by ``django_sqlq.workflows`` (``attach`` at
enqueue, ``resolve`` in the transaction of every transition here that finishes a job, and
of the worker's completions): a job's waiters are decided where the job is.

Every write that finishes an attempt is fenced: it names the worker and the attempt, so a
worker that lost its lease can never overwrite the outcome of the worker that took over.
"""

from __future__ import annotations

import functools
import logging
import traceback as tb
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from django_sqlq import statuses, workflows
from django_sqlq.conf import get_settings
from django_sqlq.db import ops_for, retrying_deadlocks
from django_sqlq.db.base import DatabaseNow
from django_sqlq.models import Job, JobStatus, JobStep, StepState

logger = logging.getLogger("django_sqlq.worker")

MAX_TRACEBACK_CHARS = 64_000
MAX_MESSAGE_CHARS = 4_000


def _storable(text: str) -> str:
    """``text`` with what a database text column refuses spelled out: NUL characters
    (PostgreSQL) and lone surrogates (not UTF-8 at all), so that recording an error can
    never fail because of the error's own message."""
    if "\x00" in text:
        text = text.replace("\x00", "\\x00")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def _capped(text: str, limit: int) -> str:
    """``text``, or its start and end with the middle cut out when it is over ``limit``:
    a traceback keeps its first frames and its last lines (the exception itself)."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n...({len(text) - 2 * half} characters cut)...\n{text[-half:]}"


@dataclass(frozen=True)
class ErrorInfo:
    exception_class: str
    message: str
    traceback: str
    # The exception itself, while the worker holds it (never stored): the tasks backend sends
    # task_finished with it in hand, so that loggers and error trackers see it.
    exception: BaseException | None = field(default=None, compare=False, repr=False)

    @classmethod
    def from_exception(cls, exc: BaseException) -> ErrorInfo:
        kind = type(exc)
        name = (
            kind.__qualname__
            if kind.__module__ == "builtins"
            else (f"{kind.__module__}.{kind.__qualname__}")
        )
        try:
            message = str(exc)
        except Exception as str_error:  # a __str__ that raises
            message = f"<str() of the exception raised {type(str_error).__name__}>"
        # Capped, as the traceback is: last_error and every errors entry hold the message,
        # and a 1 MB message would otherwise be stored (and shown) once per attempt.
        message = _capped(message, MAX_MESSAGE_CHARS)
        text = _capped("".join(tb.format_exception(exc)), MAX_TRACEBACK_CHARS)
        return cls(
            exception_class=_storable(name),
            message=_storable(message),
            traceback=_storable(text),
            exception=exc,
        )

    def summary(self) -> str:
        """What ``last_error`` holds: type, message and traceback."""
        return f"{self.exception_class}: {self.message}\n\n{self.traceback}".strip()

    def entry(self, *, attempt: int, worker_id: str) -> dict[str, Any]:
        return {
            "attempt": attempt,
            "worker_id": worker_id,
            "exception_class": self.exception_class,
            "message": self.message,
            "traceback": self.traceback,
        }


# -- the worker's transitions -------------------------------------------------------------


def release(
    alias: str, job_ids: Sequence[int], *, worker_id: str, now: datetime | None = None
) -> int:
    """processing -> pending for jobs claimed but never started; their attempt is not counted
    (cancelled, for those whose cancel was requested meanwhile)."""
    with transaction.atomic(using=alias, savepoint=False):
        released = ops_for(alias).release(job_ids, worker_id=worker_id, now=now)
        if released:
            workflows.finished(alias, workflows.ended_of(alias, job_ids), now=now)
    return released


def reap(alias: str, *, now: datetime | None = None) -> list[tuple[int, str, str, int, str]]:
    """processing -> pending (or failed, attempts spent) for every expired lease. Returns
    (id, type, new status, attempts, queue) of each."""
    with transaction.atomic(using=alias, savepoint=False):
        reaped = ops_for(alias).reap(now=now)
        ended = [row[0] for row in reaped if row[2] in statuses.FINISHED]
        if ended:
            workflows.finished(alias, workflows.ended_of(alias, ended), now=now)
    return reaped


def extend_leases(
    alias: str,
    *,
    worker_id: str,
    lease_seconds: float,
    now: datetime | None = None,
    job_ids: Sequence[int] | None = None,
) -> int:
    """Renew this worker's leases (only those of ``job_ids``, if given) in one statement."""
    return ops_for(alias).extend_leases(
        worker_id=worker_id, lease_seconds=lease_seconds, now=now, job_ids=job_ids
    )


# -- the operators' transitions -----------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """What an operator action did: how many jobs changed, and how many it skipped."""

    changed: int
    skipped: int
    held: int = 0  # of the skipped: retry_now's jobs whose unique_key a live job holds
    #: Of ``changed``, the running jobs whose cancel was requested (not cancelled yet).
    requested: int = 0


def _apply(
    ids: Iterable[int],
    allowed: Sequence[str],
    alias: str | None,
    *,
    unless: Q | None = None,
    **changes: Any,
) -> Outcome:
    alias = alias or get_settings().DATABASE
    wanted = set(ids)
    # One conditional UPDATE: a job whose status changed meanwhile (a worker claimed it) no
    # longer matches, so it is skipped, never corrupted. Its rows locked first in id order,
    # the order every statement that waits for several jobs takes them in (PostgreSQL).
    jobs = Job.objects.using(alias).filter(pk__in=wanted, status__in=allowed)
    if unless is not None:
        jobs = jobs.exclude(unless)
    with transaction.atomic(using=alias):
        locked = ops_for(alias).lock_jobs(sorted(wanted), allowed)
        if locked is not None:
            # Only the rows it holds: one that entered ``allowed`` since, by another's
            # commit, and that a third holds now, would be waited for while holding these.
            jobs = jobs.filter(pk__in=locked)
        changed = jobs.update(updated_at=DatabaseNow(), **changes)
    return Outcome(changed=changed, skipped=len(wanted) - changed)


def _wake(ids: Iterable[int], alias: str | None, outcome: Outcome) -> Outcome:
    """Wake idle workers for jobs an operator made runnable (PostgreSQL's NOTIFY, sent when
    the transaction commits), as an enqueue does: else they wait for the poll interval."""
    if outcome.changed:
        alias = alias or get_settings().DATABASE
        queues = (
            Job.objects.using(alias)
            .filter(pk__in=set(ids), status=JobStatus.PENDING)
            .order_by()
            .values_list("queue", flat=True)
            .distinct()
        )
        ops_for(alias).notify(list(queues))
    return outcome


Action = Callable[..., Outcome]


def _retried_on_deadlock(action: Action) -> Action:
    """``action`` tried again when the database rolled its transaction back to break a
    deadlock (``retrying_deadlocks``): two actions over overlapping jobs (an operator's
    cancel of a job and of the jobs that wait for it, another's cancel of that job) can
    each hold a row the other needs. Not inside the caller's own transaction."""

    @functools.wraps(action)
    def run(ids: Iterable[int], *, alias: str | None = None) -> Outcome:
        alias = alias or get_settings().DATABASE
        ids = list(ids)  # read once: a try may follow
        return retrying_deadlocks(alias, lambda: action(ids, alias=alias))

    return run


@_retried_on_deadlock
def retry_now(ids: Iterable[int], *, alias: str | None = None) -> Outcome:
    """failed | cancelled -> pending, runnable now, attempts reset.

    A job whose ``unique_key`` a live job holds (or a newer job among ``ids`` retried with
    it) is skipped: two live jobs with one key are what the key forbids. ``Outcome.held``
    counts them."""
    ids = list(ids)
    alias = alias or get_settings().DATABASE
    finished = [JobStatus.FAILED, JobStatus.CANCELLED]
    jobs = Job.objects.using(alias)
    newest: dict[str | None, int] = {}
    for pk, key in (
        jobs.filter(pk__in=ids, status__in=finished)
        .exclude(unique_key=None)
        .order_by("id")
        .values_list("id", "unique_key")
    ):
        newest[key] = pk
    unless: Q | None = None
    if newest:
        live = jobs.filter(status__in=statuses.LIVE, unique_key__isnull=False)
        unless = Q(unique_key__in=live.values("unique_key")) | (
            ~Q(unique_key=None) & ~Q(pk__in=newest.values())
        )
    changes: dict[str, Any] = {
        "status": JobStatus.PENDING,
        "attempts": 0,
        "scheduled_at": DatabaseNow(),
        "completed_at": None,
        "locked_by": "",
        "locked_at": None,
        "lease_expires_at": None,
        "cancel_requested_at": None,
        "progress": None,
        "progress_message": None,
        "progress_at": None,
    }
    try:
        with transaction.atomic(using=alias):
            outcome = _apply(ids, finished, alias, unless=unless, **changes)
    except IntegrityError:
        # An enqueue took one of the keys after the check above (on PostgreSQL the UPDATE
        # waited for its transaction, then met the key's unique index): job by job, each in
        # a savepoint, skipping those whose key is now held.
        outcome = Outcome(changed=0, skipped=0)
        for pk in dict.fromkeys(ids):
            try:
                with transaction.atomic(using=alias):
                    one = _apply([pk], finished, alias, unless=unless, **changes)
            except IntegrityError:
                one = Outcome(changed=0, skipped=1)
            outcome = Outcome(outcome.changed + one.changed, outcome.skipped + one.skipped)
    # Of the jobs left failed or cancelled, those the key kept from a retry.
    held = jobs.filter(pk__in=ids, status__in=finished).filter(unless).count() if unless else 0
    return _wake(ids, alias, Outcome(outcome.changed, outcome.skipped, held=held))


WAITING = (JobStatus.SCHEDULED, JobStatus.PENDING)
#: The statuses an operator can cancel at once: waiting for their time, their turn, or
#: other jobs.
NOT_STARTED = (JobStatus.BLOCKED, *WAITING)


@_retried_on_deadlock
def cancel(ids: Iterable[int], *, alias: str | None = None) -> Outcome:
    """blocked | scheduled | pending -> cancelled. The jobs that wait for a cancelled job
    are decided by their policy, in the same transaction."""
    alias = alias or get_settings().DATABASE
    wanted = set(ids)
    ops = ops_for(alias)
    with transaction.atomic(using=alias):
        ops.take_write_lock()
        targets = list(
            Job.objects.using(alias)
            .filter(pk__in=wanted, status__in=NOT_STARTED)
            .values_list("pk", flat=True)
        )
        # The blocker rows of the jobs about to be cancelled first, then the jobs: the order
        # a completion takes them in (rows, then the job it counts off), so that neither
        # can hold one while it waits for the other (a deadlock on PostgreSQL).
        ops.drop_blockers_of(sorted(targets))
        outcome = _apply(
            targets, NOT_STARTED, alias, status=JobStatus.CANCELLED, completed_at=DatabaseNow()
        )
        if outcome.changed:
            workflows.finished(alias, workflows.ended_of(alias, targets))
    return Outcome(changed=outcome.changed, skipped=len(wanted) - outcome.changed)


@_retried_on_deadlock
def request_cancel(ids: Iterable[int], *, alias: str | None = None) -> Outcome:
    """Ask the workers running these processing jobs to stop them (``cancel_requested_at``).
    Each worker sees it within about a second, sets its handler's ``cancel_requested`` flag
    (and cancels an async handler's task), and records the attempt ``cancelled`` whatever
    the handler does; see ``django_sqlq.outcomes``."""
    alias = alias or get_settings().DATABASE
    wanted = set(ids)
    changed = ops_for(alias).request_cancel(sorted(wanted))
    return Outcome(changed=changed, skipped=len(wanted) - changed)


CANCELLABLE = (*NOT_STARTED, JobStatus.PROCESSING)


def cancel_or_request(ids: Iterable[int], *, alias: str | None = None) -> Outcome:
    """:func:`cancel` the waiting jobs among ``ids`` and :func:`request_cancel` the running
    ones. ``Outcome.changed`` counts both; ``Outcome.requested`` the running ones."""
    ids = list(ids)
    now = cancel(ids, alias=alias)
    requested = request_cancel(ids, alias=alias)
    changed = now.changed + requested.changed
    return Outcome(changed=changed, skipped=len(set(ids)) - changed, requested=requested.changed)


@_retried_on_deadlock
def run_now(ids: Iterable[int], *, alias: str | None = None) -> Outcome:
    """A job scheduled for later becomes runnable now: pending, due now. A job asleep in a
    durable sleep (``context.sleep()``) has its sleep ended too: else it would only go back
    to sleep. (One waiting for an event looks for its event again, and waits on.)"""
    ids = list(ids)
    with transaction.atomic(using=alias or get_settings().DATABASE):
        outcome = _apply(ids, WAITING, alias, status=JobStatus.PENDING, scheduled_at=DatabaseNow())
        if outcome.changed:
            end_sleeps(alias or get_settings().DATABASE, ids)
    return _wake(ids, alias, outcome)


def end_sleeps(alias: str, ids: Iterable[int]) -> int:
    """End the durable sleeps of those of ``ids`` that are pending (run now, woken by an
    operator): the sleep's replay then sees it over. Returns how many."""
    now = timezone.now()  # the clock the handler's replay reads (django_sqlq.steps)
    pending = Job.objects.using(alias).filter(pk__in=list(ids), status=JobStatus.PENDING)
    return (
        JobStep.objects.using(alias)
        .filter(job_id__in=pending.values("pk"), state=StepState.SLEEPING, wake_at__gt=now)
        .update(wake_at=now, updated_at=DatabaseNow())
    )


def promote(alias: str, *, limit: int = 1000, now: datetime | None = None) -> int:
    """scheduled -> pending for up to ``limit`` jobs whose time has come. Returns how many."""
    return ops_for(alias).promote(limit=limit, now=now)


def next_due_in(alias: str, *, now: datetime | None = None) -> float | None:
    """Seconds until the earliest scheduled job is due; None when none is scheduled."""
    return ops_for(alias).next_due_in(now=now)


@_retried_on_deadlock
def delete(ids: Iterable[int], *, alias: str | None = None) -> Outcome:
    """Delete jobs that are not running. A ``processing`` job is skipped: its worker holds it.

    One conditional ``DELETE`` (no cascade to collect, no signals), so a job a worker claims
    meanwhile no longer matches and is skipped, never deleted under its worker. The jobs that
    waited for a deleted unfinished job are decided as if it was cancelled.
    """
    alias = alias or get_settings().DATABASE
    wanted = set(ids)
    ops = ops_for(alias)
    with transaction.atomic(using=alias):
        # Their blocker rows first, as cancel() does (the order a completion locks them in).
        ops.drop_blockers_of(sorted(wanted))
        rows = ops.delete_jobs(sorted(wanted))
        # Jobs that had yet to finish: those that wait for them learn it as a cancel.
        unfinished = [(pk, chain) for pk, status, chain in rows if status in NOT_STARTED]
        if unfinished:
            cancelled = JobStatus.CANCELLED
            workflows.finished(
                alias, [workflows.Ended(pk, chain or pk, cancelled) for pk, chain in unfinished]
            )
    deleted = len(rows)
    return Outcome(changed=deleted, skipped=len(wanted) - deleted)
