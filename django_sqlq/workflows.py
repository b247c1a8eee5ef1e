"""Workflows: chains of jobs, and jobs that wait for other jobs.

**Chains.** A handler continues its job with the next step (``context.continue_with()``):
the next job is written in the transaction that records this one completed, so a step
never runs twice in its chain and is never lost between two steps. Every step stores its
chain's id (the first job's id) and its position (``chain_id``, ``chain_index``).

**Dependencies.** ``enqueue(..., depends_on=[...])`` writes a job ``blocked``, with one row
in ``sqlq_job_blocker`` per job or chain it waits for. Blocked jobs are outside every index
the claim reads. The transaction that finishes a job (completed, failed for good,
cancelled) deletes the rows naming it (one probe of the blockers' index, empty unless jobs
wait) and counts them off each blocked job's ``blockers_left``: the last one makes it
``pending`` in that same transaction. A dependency that fails or is cancelled decides the
blocked job by its ``dependency_policy``: fail it, cancel it, or count it as done (run).

Concurrency: on PostgreSQL the enqueue locks the rows of what it depends on (marking them
``waited_on``) before it decides whether to wait, so a completion of one of them waits for
the enqueue's commit and then sees its blocker rows; each blocked job's count is one row
that concurrent completions update in turn. Every statement that may wait for several
rows takes them in id order (``QueueOps.in_id_order``), and the workers' plain batch
completion skips rows others hold rather than wait for them: neither side can hold a row
the other waits for while it waits. On SQLite one writer at a time does all of it.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from django.db import OperationalError, transaction

from django_sqlq import statuses
from django_sqlq.conf import get_settings
from django_sqlq.db import is_deadlock, is_lock_conflict, ops_for
from django_sqlq.db.base import QueueOps
from django_sqlq.db.columns import ClaimedJob
from django_sqlq.exceptions import InvalidJobError
from django_sqlq.models import Chain, DependencyPolicy, Job
from django_sqlq.options import Target, checked_job

logger = logging.getLogger("django_sqlq.worker")

#: ``on_dependency_failure`` values: what a blocked job does when a job it waits for fails
#: for good or is cancelled.
POLICIES = tuple(DependencyPolicy.values)

#: The most times an enqueue follows a chain that grows while it looks for its last step.
MAX_CHAIN_HOPS = 1000


class Blocker(NamedTuple):
    """One thing a job waits for: a job (``chain`` False) or a chain, by its first job."""

    id: int
    chain: bool


def _job_id(item: object, where: str, alias: str | None) -> int:
    if isinstance(item, Job):
        if alias is not None and item._state.db not in (None, alias):
            raise InvalidJobError(
                f"depends_on{where}: {item!r} is a job of database {item._state.db!r}; the "
                f"jobs table is on {alias!r} (SQLQ['DATABASE']): its id names another job."
            )
        if item.pk is None:
            raise InvalidJobError(
                f"depends_on{where}: {item!r} is not written yet (enqueued on another "
                "database, it is written when the caller's transaction commits)."
            )
        return int(item.pk)
    if isinstance(item, bool) or not isinstance(item, int) or item < 1:
        raise InvalidJobError(
            f"depends_on{where} takes Jobs, job ids, Chains (job.chain) and groups (what "
            f"bulk_enqueue() returns); got {item!r}."
        )
    return item


def targets_of(depends_on: object, alias: str | None = None) -> list[Blocker]:
    """``depends_on`` checked, as the distinct targets it names, in order. A Job or an id:
    that job; a Chain: the chain's last step; a group (or any list of Jobs inside the
    list): the chain each of its jobs starts."""
    if isinstance(depends_on, (str, bytes, Mapping, Job, Chain, int)) or not isinstance(
        depends_on, Iterable
    ):
        raise InvalidJobError(
            f"depends_on takes a list of Jobs, job ids, Chains and groups; got {depends_on!r}."
        )
    found: dict[Blocker, None] = {}
    for index, item in enumerate(depends_on):
        where = f"[{index}]"
        if isinstance(item, Chain):
            found[Blocker(item.id, True)] = None
        elif isinstance(item, (list, tuple)):
            for inner, member in enumerate(item):
                found[Blocker(_job_id(member, f"{where}[{inner}]", alias), True)] = None
        else:
            found[Blocker(_job_id(item, where, alias), False)] = None
    return list(found)


def check_policy(policy: object) -> str:
    if policy not in POLICIES:
        raise InvalidJobError(
            f"on_dependency_failure must be one of {', '.join(map(repr, POLICIES))}, "
            f"got {policy!r}."
        )
    return str(policy)


@dataclass(frozen=True)
class Dependencies:
    """What one enqueue waits for, checked, until its row is written."""

    targets: list[Blocker]
    policy: str

    def as_json(self) -> list[dict[str, int]]:
        return [{"chain" if t.chain else "job": t.id} for t in self.targets]


def attach(alias: str, jobs: Sequence[Job], dependencies: Dependencies) -> None:
    """Make the just-written ``jobs`` (one enqueue()'s, or one bulk_enqueue()'s) wait for
    ``dependencies``, in the transaction that wrote them: blocked, unless all of them are
    done already (or one failed and the policy fails or cancels the jobs now). The
    dependencies are looked up once for all the jobs. Raises InvalidJobError for a job or
    chain that does not exist; the caller's transaction (or savepoint) then writes
    nothing."""
    ops = ops_for(alias)
    targets = _chains_by_first_job(alias, dependencies.targets)
    policy = dependencies.policy
    depends_on = Dependencies(targets, policy).as_json()
    states = _lock_targets(alias, targets)
    waiting: list[tuple[int, bool]] = []
    broken: list[str] = []
    for target in targets:
        state = states[target]
        if state == statuses.COMPLETED:
            continue
        if state in (statuses.FAILED, statuses.CANCELLED):
            broken.append(_reason(target, state))
        else:
            waiting.append((target.id, target.chain))
    fails_now = bool(broken) and policy != DependencyPolicy.RUN
    for job in jobs:
        ops.add_blockers(
            job.pk, [] if fails_now else waiting, depends_on=depends_on, policy=policy
        )
        if fails_now:
            ops.break_blocked({job.pk: broken[0]}, blocked=False)
            cancel = policy == DependencyPolicy.CANCEL
            job.status = statuses.CANCELLED if cancel else statuses.FAILED
            job.last_error = broken[0]
        elif waiting:
            job.status = statuses.BLOCKED
            job.blockers_left = len(waiting)
        job.depends_on = depends_on
        job.dependency_policy = policy


#: How many times :func:`_lock_targets` starts again after a deadlock (PostgreSQL chose the
#: enqueue to break one) before it lets the error through.
MAX_LOCK_TRIES = 20


def _lock_targets(alias: str, targets: Sequence[Blocker]) -> dict[Blocker, str]:
    """The status of each target (a chain's: its last step's), its row marked waited for
    and locked until the caller's transaction ends (PostgreSQL): a completion of one of
    them then waits for this enqueue, and sees its blocker rows.

    Every row is locked by one statement, in id order (``QueueOps.mark_waited``): the order
    every statement that locks several jobs takes them in, so this enqueue and the workers'
    completions cannot wait for each other crosswise. In a savepoint: when a chain moved on
    between the read of its last step and the lock (the step completed and continued), or
    when PostgreSQL broke a deadlock by failing this statement (a transaction that took
    rows out of order: this caller's own earlier enqueues, an operator), the locks taken
    here are given back and the lookup starts again, never failing the caller's call.
    MariaDB breaks a deadlock by rolling back the whole transaction: the error goes up (an
    enqueue in a transaction of its own is tried again whole, see ``submit``)."""
    ops = ops_for(alias)
    conflicts = 0
    for _ in range(MAX_CHAIN_HOPS):
        try:
            with transaction.atomic(using=alias):
                return _try_lock_targets(ops, targets)
        except _ChainMoved:
            continue
        except OperationalError as exc:
            conflicts += 1
            if not is_lock_conflict(exc) or conflicts >= MAX_LOCK_TRIES:
                raise
            if ops.deadlock_ends_transaction and is_deadlock(exc):
                # MariaDB rolled back the whole transaction, the savepoint with it: the
                # enqueue's own is tried again whole (submit), a caller's is the caller's.
                raise
            logger.debug("enqueue: locking its dependencies again after %s", exc)
            time.sleep(min(0.5, 0.01 * 2**conflicts))
    raise InvalidJobError(  # pragma: no cover - a chain growing faster than we read it
        "depends_on: a chain kept growing while it was read."
    )


class _ChainMoved(Exception):
    """A chain's last step changed between its read and its lock: read it again."""


def _try_lock_targets(ops: QueueOps, targets: Sequence[Blocker]) -> dict[Blocker, str]:
    """One try of :func:`_lock_targets`; raises _ChainMoved when a chain moved on."""
    roots = [target.id for target in targets if target.chain]
    # A chain's last step: its highest step, or its first job when it has no other.
    lasts = ops.chain_last_steps(roots) if roots else {}
    row_of = {t: lasts.get(t.id, t.id) if t.chain else t.id for t in targets}
    rows = ops.mark_waited(list(row_of.values()))
    if roots and ops.chain_last_steps(roots) != lasts:
        raise _ChainMoved  # a step completed and continued before the lock: read again
    states: dict[Blocker, str] = {}
    for target, row_id in row_of.items():
        row = rows.get(row_id)
        if row is None:
            if target.chain:
                raise InvalidJobError(
                    f"depends_on: there is no chain {target.id} (no job with that id or chain id)."
                )
            raise InvalidJobError(
                f"depends_on: there is no job with id {target.id} (deleted, pruned, or "
                "never written)."
            )
        states[target] = row[0]
    return states


def _chains_by_first_job(alias: str, targets: list[Blocker]) -> list[Blocker]:
    """``targets`` with each chain named by its first job: ``Chain(id)`` of a later step
    (or a later step in a group) is the chain that step belongs to."""
    named = [t.id for t in targets if t.chain]
    if not named:
        return targets
    first: dict[int, int] = {
        pk: chain
        for pk, chain in Job.objects.using(alias)
        .filter(pk__in=named, chain_id__isnull=False)
        .values_list("pk", "chain_id")
        if chain is not None
    }
    if not first:
        return targets
    found: dict[Blocker, None] = {}
    for target in targets:
        found[Blocker(first.get(target.id, target.id), True) if target.chain else target] = None
    return list(found)


def _reason(target: Blocker, status: str) -> str:
    what = f"chain {target.id}" if target.chain else f"job id={target.id}"
    return f"django_sqlq.exceptions.DependencyFailed: {what}, which this job depends on, {status}."


class Ended(NamedTuple):
    """A job that just finished: its id, its chain's id (its own when not in a chain), its
    status, and whether its chain ends with it (not when it continued)."""

    id: int
    chain: int
    status: str
    chain_ended: bool = True


def resolve(alias: str, ended: Sequence[Ended], *, now: datetime | None = None) -> list[int]:
    """In the transaction that finished the jobs ``ended``: count them off the jobs that
    wait for them, release those with nothing left to wait for (and wake their workers),
    and fail or cancel by their policy those whose dependency failed or was cancelled (and
    so on down the jobs that wait for these). Returns the ids of the jobs released."""
    ops = ops_for(alias)
    released: list[int] = []
    queues: list[str] = []
    while ended:
        rows = ops.take_blockers(
            [e.id for e in ended], sorted({e.chain for e in ended if e.chain_ended})
        )
        if not rows:
            break
        by_job = {e.id: e for e in ended}
        by_chain = {e.chain: e for e in ended if e.chain_ended}
        counts: dict[int, int] = defaultdict(int)
        broken: dict[int, int] = defaultdict(int)
        reasons: dict[int, str] = {}
        for waiter, blocker, chain in rows:
            source = by_chain[blocker] if chain else by_job[blocker]
            if source.status == statuses.COMPLETED:
                counts[waiter] += 1
            else:
                broken[waiter] += 1
                reasons.setdefault(waiter, _reason(Blocker(blocker, chain), source.status))
        # Every job this pass changes, locked first in id order: the fail and the count-off
        # below are two statements, and another completion may count off the same jobs.
        ops.lock_jobs(sorted({*counts, *broken}), [statuses.BLOCKED])
        changed = ops.break_blocked(reasons, now=now) if reasons else []
        gone = {job_id for job_id, _ in changed}
        for waiter, count in broken.items():
            if waiter not in gone:  # policy "run": a dependency that ended counts as done
                counts[waiter] += count
        if gone:
            # Their other blocker rows stay until what they name finishes (then they match
            # no blocked job): deleting them here, with the job's row locked, could wait for
            # a completion that holds one of them and waits for the job's row (a deadlock).
            for job_id, status in changed:
                logger.info(
                    "Job id=%s %s: a job it depends on failed or was cancelled", job_id, status
                )
        made, made_queues = ops.unblock(
            {w: n for w, n in counts.items() if w not in gone}, now=now
        )
        released.extend(made)
        queues.extend(made_queues)
        # The jobs failed or cancelled here have waiters of their own (a blocked job is never
        # in a chain: it has not run).
        ended = [Ended(job_id, job_id, status) for job_id, status in changed]
    if queues:
        ops.notify(queues)
    return released


def ended_of(alias: str, job_ids: Iterable[int]) -> list[Ended]:
    """The jobs ``job_ids`` that are finished now, as :class:`Ended` (each ends its chain:
    completed jobs are not passed here)."""
    ids = sorted(set(job_ids))
    if not ids:
        return []
    rows = (
        Job.objects.using(alias)
        .filter(pk__in=ids, status__in=statuses.FINISHED)
        .values_list("pk", "chain_id", "status")
    )
    return [Ended(pk, chain or pk, status) for pk, chain, status in rows]


# -- chains ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Continuation:
    """The next step of a chain, as ``context.continue_with()`` checked it: written when
    the step that asked for it is recorded completed."""

    fields: dict[str, Any]
    payload: str
    delay_seconds: float | None


def continuation(
    target: Target,
    payload: Any,
    *,
    queue: str,
    priority: int,
    run_at: datetime | None,
    delay: float | timedelta | None,
    max_attempts: int | None,
    timeout: float | None,
) -> Continuation:
    """A next step, checked as ``enqueue()`` checks a job (bad input raises here)."""
    fields, _, encoded, delay_seconds = checked_job(
        get_settings(),
        target,
        payload,
        queue=queue,
        priority=priority,
        run_at=run_at,
        delay=delay,
        max_attempts=max_attempts,
        timeout=timeout,
    )
    fields.setdefault("scheduled_at", None)
    fields["unique_key"] = None
    return Continuation(fields, encoded, delay_seconds)


def continue_chain(alias: str, job: ClaimedJob, then: Continuation) -> int:
    """Write the step after ``job``, in the transaction that completes ``job``. Returns its
    id."""
    ops = ops_for(alias)
    root = job.chain_id if job.chain_id is not None else job.id
    if job.chain_id is None:
        ops.start_chain(job.id)
    fields = {
        **then.fields,
        "chain_id": root,
        "chain_index": (job.chain_index or 0) + 1,
        "trace": job.trace,
        # Jobs may wait for the chain, whose last step this is now: its completion takes
        # the path that releases them (a step's completion takes it anyway, as it
        # continues; only the last step's would not).
        "waited_on": True,
    }
    row = ops.insert_one(payload=then.payload, fields=fields, delay_seconds=then.delay_seconds)
    return int(row[0])


def finished(alias: str, ended: Sequence[Ended], *, now: datetime | None = None) -> list[int]:
    """:func:`resolve` for jobs that failed for good or were cancelled; nothing for others."""
    final = [e for e in ended if e.status in statuses.FINISHED]
    return resolve(alias, final, now=now) if final else []
