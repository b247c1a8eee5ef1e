"""Retention: deleting finished jobs once ``SQLQ["KEEP_FINISHED"]`` has passed.

One pass (:func:`prune`) serves both the workers' pruner (``worker/maintenance/pruner.py``)
and ``manage.py sqlq_prune``:

- at most one pass at a time across all workers and hosts: the pass holds the ``prune`` row
  of the maintenance table (``Maintenance``) as a lease, renewed after each batch; a dead
  pruner's lease runs out after ``LEASE_SECONDS`` and another takes over;
- per finished status, the oldest rows first, in batches of ``BATCH_SIZE`` rows to start
  with, then as many as hold the locks for about ``HOLD_TARGET`` (20 ms): each batch is its
  own short transaction (on SQLite the write lock; on PostgreSQL row locks on finished rows
  only, which claims never wait for, taken with SKIP LOCKED); between batches the pass rests
  at least as long as the batch held them, so it never has more than half of the database's
  write time;
- scheduled, pending and processing rows are never deleted: the statuses are literals checked
  against ``statuses.FINISHED`` where the SQL is written (``QueueOps.prune``);
- on SQLite with ``auto_vacuum = INCREMENTAL``, the freed pages are then given back to the
  file system in steps of ``VACUUM_PAGES``;
- the pass is recorded in the ``prune`` row (when, by whom, how many per status), which the
  admin's dashboard shows.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from django.db import IntegrityError, connections, transaction
from django.db.models import F

from django_sqlq import statuses
from django_sqlq.db import ops_for
from django_sqlq.db.base import DatabaseNow
from django_sqlq.models import Maintenance

logger = logging.getLogger("django_sqlq.retention")

PRUNE_DUTY = "prune"
#: Rows deleted per statement, to start with; then as many as take about HOLD_TARGET seconds.
BATCH_SIZE = 1000
#: How long one batch should hold the write lock (SQLite) or its row locks.
HOLD_TARGET = 0.02
#: How long a pass holds the duty without renewing it (it renews after every batch).
LEASE_SECONDS = 60.0
#: Pages SQLite's incremental vacuum frees per step (4 KiB pages: 8 MiB).
VACUUM_PAGES = 2000
#: The least rest between two batches, in seconds.
MIN_PAUSE = 0.005

Keep = Mapping[str, float | None]


class PrunerBusy(Exception):
    """Another pruner holds the duty."""

    def __init__(self, holder: str, until: datetime | None) -> None:
        self.holder = holder
        self.until = until
        super().__init__(
            f"another pruner ({holder or 'unknown'}) is running"
            + (f"; its lease runs until {until:%Y-%m-%d %H:%M:%S}" if until else "")
        )


@dataclass
class PruneResult:
    """What a pass deleted, per status; ``complete`` is False when it was stopped (or lost
    its lease) before it had deleted everything due."""

    deleted: dict[str, int] = field(default_factory=dict)
    complete: bool = True
    seconds: float = 0.0
    free_pages: int | None = None
    #: The recorded steps of deleted jobs, and the events past ``EVENT_RETENTION``, deleted.
    steps: int = 0
    events: int = 0

    @property
    def total(self) -> int:
        return sum(self.deleted.values())


def _duty(alias: str) -> None:
    """Make sure the duty's row exists (two processes may race to create it)."""
    manager = Maintenance.objects.db_manager(alias)
    if manager.filter(duty=PRUNE_DUTY).exists():
        return
    with contextlib.suppress(IntegrityError):  # another process created it meanwhile
        manager.get_or_create(duty=PRUNE_DUTY)


def _rest(stop: threading.Event | None, seconds: float) -> bool:
    """Wait ``seconds``; True if asked to stop meanwhile."""
    if stop is None:
        time.sleep(seconds)
        return False
    return stop.wait(seconds)


def prune(
    alias: str,
    *,
    keep: Keep,
    holder: str,
    queues: Sequence[str] | None = None,
    batch_size: int = BATCH_SIZE,
    now: datetime | None = None,
    stop: threading.Event | None = None,
) -> PruneResult:
    """Delete the finished jobs older than ``keep[status]`` seconds (None: keep them), in
    ``queues`` (None: all). Raises :class:`PrunerBusy` if another pruner holds the duty.
    ``now``: an injected clock (tests); None is the database's."""
    for status in keep:
        if status not in statuses.FINISHED:
            raise ValueError(f"only finished jobs are pruned, not {status!r}")
    _duty(alias)
    ops = ops_for(alias)
    if not ops.take_lease(PRUNE_DUTY, holder=holder, seconds=LEASE_SECONDS, now=now):
        row = Maintenance.objects.using(alias).filter(duty=PRUNE_DUTY).first()
        raise PrunerBusy(row.holder if row else "", row.lease_expires_at if row else None)
    result = PruneResult()
    started = time.monotonic()
    try:
        for status, seconds in keep.items():
            if seconds is not None and result.complete:
                result.deleted[status] = 0
                run = _Batches(alias, holder, queues, batch_size, now, stop)
                run.prune(status, seconds, result)
        if result.complete:
            _prune_steps_and_events(alias, result, now, stop)
        if result.total or result.steps or result.events:
            result.free_pages = _reclaim(alias, stop)
        result.seconds = time.monotonic() - started
        _record(alias, holder, result, now)
    finally:
        ops.release_lease(PRUNE_DUTY, holder=holder)
    return result


@dataclass
class _Batches:
    alias: str
    holder: str
    queues: Sequence[str] | None
    batch_size: int
    now: datetime | None
    stop: threading.Event | None

    def prune(self, status: str, seconds: float, result: PruneResult) -> None:
        """Delete ``status``'s rows due for pruning, batch by batch, resting between.

        Each batch is a transaction of its own; on SQLite, ``atomic()`` begins it with BEGIN
        IMMEDIATE, which waits for the write lock, so the time from there to the commit is
        the time the batch held the lock. The batch size follows it, towards HOLD_TARGET (from
        a tenth of ``batch_size`` to ten times it), and the rest between two batches is as long
        as the last one held the lock: the waits for the lock (long on a busy SQLite database,
        whose writers poll for it) slow the pass down but never shrink the others' share."""
        ops = ops_for(self.alias)
        limit = self.batch_size
        low, high = max(1, self.batch_size // 10), self.batch_size * 10
        while True:
            with transaction.atomic(using=self.alias):
                holding = time.monotonic()
                deleted = ops.prune(
                    status=status,
                    keep_seconds=seconds,
                    queues=self.queues,
                    limit=limit,
                    now=self.now,
                )
            held = time.monotonic() - holding
            result.deleted[status] += deleted
            if deleted < limit:
                return
            limit = max(low, min(high, int(limit * HOLD_TARGET / max(held, 0.001))))
            if not ops.take_lease(
                PRUNE_DUTY, holder=self.holder, seconds=LEASE_SECONDS, now=self.now
            ):
                logger.warning("Pruner %s lost its lease; stopping this pass", self.holder)
                result.complete = False
                return
            if _rest(self.stop, max(MIN_PAUSE, held)):
                result.complete = False
                return


def _prune_steps_and_events(
    alias: str, result: PruneResult, now: datetime | None, stop: threading.Event | None
) -> None:
    """Delete the recorded steps of jobs that are gone (this pass's, an operator's), and the
    events emitted more than ``SQLQ["EVENT_RETENTION"]`` seconds ago; in short batches."""
    from django_sqlq.conf import get_settings

    ops = ops_for(alias)
    while True:
        with transaction.atomic(using=alias):
            deleted = ops.prune_orphan_steps(limit=BATCH_SIZE)
        result.steps += deleted
        if deleted < BATCH_SIZE or _rest(stop, MIN_PAUSE):
            break
    retention = get_settings().EVENT_RETENTION
    while retention is not None:
        with transaction.atomic(using=alias):
            deleted = ops.prune_events(keep_seconds=retention, limit=BATCH_SIZE, now=now)
        result.events += deleted
        if deleted < BATCH_SIZE or _rest(stop, MIN_PAUSE):
            break


def _reclaim(alias: str, stop: threading.Event | None) -> int | None:
    """SQLite: give the pages the pass freed back to the file system, a step at a time.
    Never inside a transaction (executescript would commit it)."""
    connection = connections[alias]
    if connection.in_atomic_block:
        return None
    ops = ops_for(alias)
    free = ops.reclaim_space(max_pages=VACUUM_PAGES)
    while free and not _rest(stop, MIN_PAUSE):
        free = ops.reclaim_space(max_pages=VACUUM_PAGES)
    return free


def _record(alias: str, holder: str, result: PruneResult, now: datetime | None) -> None:
    Maintenance.objects.using(alias).filter(duty=PRUNE_DUTY).update(
        last_run_at=now or DatabaseNow(),
        last_run_by=holder,
        last_deleted=result.total,
        last_details={status: n for status, n in result.deleted.items() if n},
        last_seconds=round(result.seconds, 3),
        total_deleted=F("total_deleted") + result.total,
    )


def prunable(
    alias: str, *, keep: Keep, queues: Sequence[str] | None = None, now: datetime | None = None
) -> dict[str, dict[str, int]]:
    """What :func:`prune` would delete now: {status: {queue: rows}}, for ``--dry-run``."""
    ops = ops_for(alias)
    return {
        status: ops.prunable(status=status, keep_seconds=seconds, queues=queues, now=now)
        for status, seconds in keep.items()
        if seconds is not None
    }


def last_prune(alias: str) -> Maintenance | None:
    """The ``prune`` duty's row (its last run), or None before the first pass."""
    return Maintenance.objects.using(alias).filter(duty=PRUNE_DUTY).first()
