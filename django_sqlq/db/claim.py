"""The claim: one ``UPDATE ... RETURNING`` takes the next runnable jobs for a worker,
taking turns between its queues, within its room per queue and the global queue limits."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from django.db import transaction

from django_sqlq.db.columns import ClaimedJob
from django_sqlq.db.queue_rows import QueueRowOps
from django_sqlq.limits import QueueLimit


class ClaimOps(QueueRowOps):
    """Claiming jobs (``processing``, a lease for the worker, one more attempt)."""

    def claim(
        self,
        *,
        queues: Sequence[str] | None,
        worker_id: str,
        limit: int,
        lease_seconds: float,
        now: datetime | None = None,
        exclude_queues: Sequence[str] = (),
        turn: int = 0,
        caps: Mapping[str, int] | None = None,
        limits: Mapping[str, QueueLimit] | None = None,
    ) -> list[ClaimedJob]:
        """Claim up to ``limit`` runnable jobs in one ``UPDATE ... RETURNING``.

        Each queue is read on its own, in the claim index's order (priority, then
        ``scheduled_at``, then id), so nothing is sorted however deep the backlog. Queues
        take turns: the batch is filled from the queues in order, starting at the
        ``turn``-th (the worker counts its claims), so a queue with a few jobs is served
        within one round however many wait in the others.

        ``queues=None`` serves every queue holding pending jobs (found through the claim
        index) but ``exclude_queues``. Returned in (priority, ``scheduled_at``, id) order.

        ``caps``: at most this many jobs of a queue (the worker's ``--queue NAME:N`` room).
        ``limits``: global limits (``SQLQ["QUEUE_LIMITS"]``); a claim that reads a limited
        queue runs in a transaction that first locks the limited queues' rows, then counts
        what they run and started (see :meth:`claim_limited`). Without either, the claim
        is the one statement above.
        """
        if limit < 1:
            return []
        order = self.claim_queues(queues, exclude_queues, turn=turn)
        if not order:
            return []
        if caps or limits:
            return self.claim_limited(
                order,
                worker_id=worker_id,
                limit=limit,
                lease_seconds=lease_seconds,
                now=now,
                caps=caps or {},
                limits=limits or {},
            )
        return self._claim_capped(order, {}, worker_id, limit, lease_seconds, now)

    def _run_claim(self, sql: str, params: dict[str, Any]) -> list[ClaimedJob]:
        with self.connection.cursor() as cursor:
            cursor.execute(sql, params)
            rows = cursor.fetchall()
        # The columns are in ClaimedJob's order; scheduled_at only orders the batch.
        jobs = list(map(ClaimedJob._make, rows))
        jobs.sort(key=lambda job: (-job.priority, str(job.scheduled_at), job.id))
        return jobs

    def claim_queues(
        self, queues: Sequence[str] | None, exclude_queues: Sequence[str] = (), *, turn: int = 0
    ) -> list[str]:
        """The queues one claim reads, in the order it reads them: ``queues`` (else every
        queue with pending jobs) less ``exclude_queues``, rotated by ``turn``."""
        names = list(dict.fromkeys(queues)) if queues is not None else self.pending_queues()
        if exclude_queues:
            excluded = set(exclude_queues)
            names = [name for name in names if name not in excluded]
        if len(names) > 1:
            start = turn % len(names)
            names = names[start:] + names[:start]
        return names

    def runnable(
        self,
        queues: Sequence[str] | None,
        exclude_queues: Sequence[str] = (),
        *,
        now: datetime | None = None,
    ) -> bool:
        """Whether a job of ``queues`` (else of any queue) but ``exclude_queues`` is pending
        and due: a plain read, which waits for no lock and takes none. An empty claim does
        not tell: it skips the rows other workers hold (SKIP LOCKED), and on SQLite it
        reads at most MAX_CLAIM_QUEUES queues at a time."""
        where = f"status = 'pending' AND scheduled_at <= {self.now_sql()}"
        params: dict[str, Any] = {"now": self.clock(now)}
        if queues is not None:
            in_sql, in_params = self.in_list_sql("queue", list(queues), "served")
            where += f" AND {in_sql}"
            params.update(in_params)
        if exclude_queues:
            in_sql, in_params = self.in_list_sql("queue", list(exclude_queues), "excluded")
            where += f" AND NOT ({in_sql})"
            params.update(in_params)
        with self.connection.cursor() as cursor:
            cursor.execute(f"SELECT 1 FROM {self.table} WHERE {where} LIMIT 1", params)
            return cursor.fetchone() is not None

    def pending_queues(self) -> list[str]:
        """The distinct queues of the pending jobs, in name order: a skip scan of the claim
        index (one index probe per queue), not a read of every pending row."""
        sql = (
            f"WITH RECURSIVE q(name) AS ("
            f"SELECT MIN(queue) FROM {self.table} WHERE status = 'pending' "
            f"UNION ALL SELECT (SELECT MIN(queue) FROM {self.table} "
            f"WHERE status = 'pending' AND queue > q.name) FROM q WHERE q.name IS NOT NULL"
            f") SELECT name FROM q WHERE name IS NOT NULL"
        )
        with self.connection.cursor() as cursor:
            cursor.execute(sql)
            return [row[0] for row in cursor.fetchall()]

    def claim_sql(
        self,
        queues: Sequence[str],
        *,
        worker_id: str,
        limit: int,
        lease_seconds: float,
        now: datetime | None = None,
        caps: Mapping[str, int] | None = None,
    ) -> tuple[str, dict[str, Any]]:
        """The claim statement and its parameters, exactly as :meth:`claim` runs them, for
        ``queues`` read in that order (tests EXPLAIN it); ``caps``: at most that many jobs
        of those queues."""
        now_sql = self.now_sql()
        picked_sql, picked_params = (
            self.claim_ids_sql(queues, caps=caps) if caps else self.claim_ids_sql(queues)
        )
        # ClaimedJob's fields, in order; scheduled_at only orders the batch.
        columns = ", ".join(
            self.raw_datetime(name) if name == "scheduled_at" else name
            for name in ClaimedJob._fields
        )
        sql = (
            f"UPDATE {self.table} SET status = 'processing', attempts = attempts + 1, "
            f"locked_by = %(worker_id)s, locked_at = {now_sql}, started_at = {now_sql}, "
            f"lease_expires_at = {self.later_sql('lease')}, updated_at = {now_sql} "
            f"WHERE id IN ({picked_sql}) "
            f"RETURNING {columns}"
        )
        params = {
            "worker_id": worker_id,
            "now": self.clock(now),
            "lease": lease_seconds,
            "limit": limit,
            **picked_params,
        }
        return sql, params

    def claim_ids_sql(
        self, queues: Sequence[str], caps: Mapping[str, int] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """A SELECT of the ids to claim: up to ``%(limit)s`` runnable jobs (by ``%(now)s``),
        each queue's read in the claim index's order, the queues in the order given (a queue
        in ``caps``: at most that many of it); and the parameters that name the queues."""
        raise NotImplementedError

    def claim_limited(
        self,
        order: Sequence[str],
        *,
        worker_id: str,
        limit: int,
        lease_seconds: float,
        now: datetime | None,
        caps: Mapping[str, int],
        limits: Mapping[str, QueueLimit],
    ) -> list[ClaimedJob]:
        """The claim of :meth:`claim` for ``order`` when some queues are limited.

        ``caps`` (this worker's room per queue) only lowers that queue's share of the batch.
        If a queue of ``order`` has a global limit, the claim runs in one transaction:
        lock the limited queues' rows in ``sqlq_queue`` (so that claims of a limited queue
        take turns across all workers: SQLite's write lock, PostgreSQL's row locks), count
        the queue's running jobs (``concurrency``) and the starts in its rate window (the
        row's ``recent_starts``), claim at most what is left, and record the new starts.
        The counts are read after the lock, so no other claim can slip in between."""
        caps = {name: cap for name, cap in caps.items() if name in order}
        limited = sorted(name for name in order if name in limits)
        if not limited:
            return self._claim_capped(order, caps, worker_id, limit, lease_seconds, now)
        with transaction.atomic(using=self.connection.alias, savepoint=False):
            starts, clock = self.lock_queue_rows(limited, now=now)
            if now is None:
                # The claimed jobs start at the clock the rate window was checked and is
                # recorded at, not at the claim statement's own (later) clock: otherwise
                # a window recorded early lets the next holder start within the period.
                now = self.moment_at(clock)
            missing = [name for name in limited if name not in starts]
            if missing:  # its row was deleted: none of it this time, a row for the next
                self.ensure_queue_rows(missing)
            running = self.running_counts(
                [name for name in limited if limits[name].concurrency is not None]
            )
            for name in limited:
                room = self.global_room(limits[name], running.get(name, 0), starts, name, clock)
                caps[name] = min(caps.get(name, limit), room)
            jobs = self._claim_capped(order, caps, worker_id, limit, lease_seconds, now)
            claimed: dict[str, int] = {}
            for job in jobs:
                claimed[job.queue] = claimed.get(job.queue, 0) + 1
            for name, count in claimed.items():
                rate = limits[name].rate if name in limits else None
                if rate is not None:
                    window = [*starts.get(name, []), *([clock] * count)][-rate:]
                    self.save_recent_starts(name, window)
        return jobs

    def _claim_capped(
        self,
        order: Sequence[str],
        caps: dict[str, int],
        worker_id: str,
        limit: int,
        lease_seconds: float,
        now: datetime | None,
    ) -> list[ClaimedJob]:
        order = [name for name in order if caps.get(name, limit) > 0]
        if not order:
            return []
        caps = {name: min(cap, limit) for name, cap in caps.items() if name in order}
        sql, params = self.claim_sql(
            order,
            worker_id=worker_id,
            limit=limit,
            lease_seconds=lease_seconds,
            now=now,
            caps=caps or None,
        )
        return self._run_claim(sql, params)
