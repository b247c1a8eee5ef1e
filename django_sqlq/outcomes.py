"""The outcome writer: the one way an attempt's end is written (completed, retried at its
backoff, failed for good, cancelled, asleep in a durable sleep or wait), by the worker's
batches, by atomic handlers inside their own transaction, and by the in-process runner of
``testing``/inline mode.

:func:`write` takes a batch of outcomes and writes each fenced (it changes a job only
while ``worker_id`` still holds that attempt), with what follows from it in the same
transaction: a chain's next step (``context.continue_with()``), and the jobs that waited
for the job (``django_sqlq.workflows.resolve``). The statements are ``db/outcomes.py``'s;
whether a failed attempt is retried, and when, was decided before (``django_sqlq.retries``)
and rides on its :class:`Failed`.

The plain case, completions of jobs that nothing waits for and that continue no chain
(nearly all), is one statement for the whole batch, outside any transaction of its own.
The rest (failures, chains, jobs waited for, and any the plain statement left out) is one
transaction for the batch, which skips the rows another transaction holds at that moment
(an enqueue about to depend on one, an operator), then one transaction for each of those,
which waits for it. So the writer never waits for a row while it holds others (PostgreSQL):
an enqueue that locks a job of the batch and then another cannot deadlock with it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from functools import partial
from typing import Any, NamedTuple, Protocol

from django.db import DatabaseError, transaction

from django_sqlq import statuses, workflows
from django_sqlq.db import ops_for
from django_sqlq.db.base import QueueOps
from django_sqlq.db.columns import ClaimedJob
from django_sqlq.db.outcomes import Finished
from django_sqlq.lifecycle import ErrorInfo
from django_sqlq.workflows import Continuation, Ended


class Completed(NamedTuple):
    """An attempt whose handler returned ``result``; ``then``: its chain's next step."""

    job: ClaimedJob
    result: Any = None
    then: Continuation | None = None


class Failed(NamedTuple):
    """An attempt that failed with ``error``. ``retry_in``: the retry policy's decision,
    seconds before the next attempt (0: pending at once), or None: failed for good.
    ``cancel``: cancelled (its handler raised ``JobCancelled``, or it was cancelled while it
    ran). A cancel requested while it ran makes it cancelled whatever these say."""

    job: ClaimedJob
    error: ErrorInfo
    retry_in: float | None
    cancel: bool = False


class Slept(NamedTuple):
    """An attempt that ended in a durable sleep or wait (``context.sleep()``,
    ``wait_for_event()``): scheduled until ``until``, uncounted; ``wait_key``: woken at once
    if that event is there."""

    job: ClaimedJob
    until: datetime
    wait_key: str | None = None


class Completion(Protocol):
    """What :func:`write` reads of a completed attempt: :class:`Completed`, or any object
    with these attributes (the worker's buffered ``Done``, passed as it is: no copy per
    job on the drain's path)."""

    @property
    def job(self) -> ClaimedJob: ...
    @property
    def result(self) -> Any: ...
    @property
    def then(self) -> Continuation | None: ...


Outcome = Completion | Failed | Slept


class Written(NamedTuple):
    """What :func:`write` wrote: each written job's new status (a job this worker no longer
    held is not in it), the ids of the chains' next steps, and of the jobs released because
    the last job they waited for completed."""

    statuses: dict[int, str]
    continued: list[int]
    released: list[int]


class OutcomesRefused(DatabaseError):
    """The database refused a step of :func:`write` (not a lost connection: those the
    caller's ``retrying`` runs again). ``written``: what the steps before it wrote, which
    is committed unless the caller's own transaction rolls back with this error."""

    def __init__(self, error: DatabaseError, written: Written) -> None:
        super().__init__(f"{type(error).__name__}: {error}")
        self.written = written


def write(
    alias: str,
    outcomes: Sequence[Outcome],
    *,
    worker_id: str,
    now: datetime | None = None,
    retrying: Callable[[Callable[[], Any]], Any] | None = None,
) -> Written:
    """Write ``outcomes`` (see the module's docstring). Inside a transaction (an atomic
    handler's), every statement is part of it. ``retrying(step)``: runs each step (a
    statement or a transaction, whole or not at all) and may run it again through
    database trouble (the worker's ``dbretry``); without it, each step runs once."""
    run = retrying or _once
    written = Written({}, [], [])
    try:
        _write(alias, outcomes, worker_id, now, run, written)
    except DatabaseError as exc:
        if not written.statuses:
            raise
        raise OutcomesRefused(exc, written) from exc
    return written


def _write(
    alias: str,
    outcomes: Sequence[Outcome],
    worker_id: str,
    now: datetime | None,
    run: Callable[[Callable[[], Any]], Any],
    written: Written,
) -> None:
    """The steps of :func:`write`, adding what each wrote to ``written``."""
    plain = [o for o in outcomes if not isinstance(o, (Failed, Slept)) and o.then is None]
    if plain:
        rows = [Finished(o.job.id, o.job.attempts, o.result) for o in plain]
        written.statuses.update(
            run(
                lambda: ops_for(alias).complete_statuses(
                    rows, worker_id=worker_id, now=now, unwaited=True, skip_locked=True
                )
            )
        )
    rest = sorted(
        (o for o in outcomes if o.job.id not in written.statuses), key=lambda o: o.job.id
    )
    if not rest:
        return
    skip_locked = len(rest) > 1
    _add(written, run(lambda: _write_rows(alias, rest, worker_id, now, skip_locked=skip_locked)))
    for outcome in rest if skip_locked else ():
        if outcome.job.id not in written.statuses:
            _add(written, run(partial(_write_rows, alias, [outcome], worker_id, now)))


def _once(step: Callable[[], Any]) -> Any:
    return step()


def _add(written: Written, more: Written) -> None:
    written.statuses.update(more.statuses)
    written.continued.extend(more.continued)
    written.released.extend(more.released)


def _write_rows(
    alias: str,
    ordered: Sequence[Outcome],
    worker_id: str,
    now: datetime | None,
    *,
    skip_locked: bool = False,
) -> Written:
    """One transaction of :func:`write`, over ``ordered`` (sorted by id): the outcomes,
    the chains' next steps, the release of the jobs that waited for them."""
    ops = ops_for(alias)
    with transaction.atomic(using=alias, savepoint=False):
        completed = [o for o in ordered if not isinstance(o, (Failed, Slept))]
        written: dict[int, str] = {}
        if completed:
            written = ops.complete_statuses(
                [Finished(o.job.id, o.job.attempts, o.result) for o in completed],
                worker_id=worker_id,
                now=now,
                skip_locked=skip_locked,
            )
        for failed in ordered:
            if not isinstance(failed, Failed):
                continue
            job = failed.job
            status = ops.fail(
                job_id=job.id,
                attempt=job.attempts,
                worker_id=worker_id,
                error=failed.error.summary(),
                error_entry=failed.error.entry(attempt=job.attempts, worker_id=worker_id),
                retry_in=failed.retry_in,
                now=now,
                cancel=failed.cancel,
                skip_locked=skip_locked,
            )
            if status is not None:
                written[job.id] = status
        written.update(_write_sleeps(ops, ordered, worker_id, now, skip_locked=skip_locked))
        ended: list[Ended] = []
        continued: list[int] = []
        for outcome in ordered:
            job = outcome.job
            status = written.get(job.id)
            if status is None:
                continue
            then = None if isinstance(outcome, (Failed, Slept)) else outcome.then
            goes_on = then is not None and status == statuses.COMPLETED
            if then is not None and goes_on:
                continued.append(workflows.continue_chain(alias, job, then))
            if status in statuses.FINISHED:  # not a retry
                chain = job.chain_id if job.chain_id is not None else job.id
                ended.append(Ended(job.id, chain, status, chain_ended=not goes_on))
        released = workflows.resolve(alias, ended, now=now) if ended else []
    return Written(written, continued, released)


def _write_sleeps(
    ops: QueueOps,
    ordered: Sequence[Outcome],
    worker_id: str,
    now: datetime | None,
    *,
    skip_locked: bool,
) -> dict[int, str]:
    """The durable sleeps and waits of :func:`_write_rows`: each job's new status."""
    written: dict[int, str] = {}
    for slept in ordered:
        if not isinstance(slept, Slept):
            continue
        status = ops.suspend(
            job_id=slept.job.id,
            attempt=slept.job.attempts,
            worker_id=worker_id,
            until=slept.until,
            wait_key=slept.wait_key,
            now=now,
            skip_locked=skip_locked,
        )
        if status is not None:
            written[slept.job.id] = status
    return written
