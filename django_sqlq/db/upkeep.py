"""Upkeep, the duties of the workers' maintenance services: promote scheduled jobs that
are due, reap jobs whose lease ran out, prune finished jobs, give space back (vacuum), and
the leases that let one worker at a time do a duty (``sqlq_maintenance``)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django_sqlq import statuses
from django_sqlq.db.dialect import Dialect, any_status_sql


class UpkeepOps(Dialect):
    """Maintenance statements."""

    maintenance_table = "sqlq_maintenance"
    #: Whether workers should call :meth:`tidy` after many claims.
    needs_tidy = False

    def promote(self, *, limit: int = 1000, now: datetime | None = None) -> int:
        """Move up to ``limit`` scheduled jobs whose time has come to pending (oldest first),
        where the claim finds them. Reads the scheduled jobs' own index: nothing when none is
        due. Returns how many were moved."""
        now_sql = self.now_sql()
        sql = self.with_promote_notify(
            f"UPDATE {self.table} SET status = 'pending', updated_at = {now_sql} "
            f"WHERE id IN (SELECT id FROM {self.table} WHERE status = 'scheduled' "
            f"AND scheduled_at <= {now_sql} ORDER BY scheduled_at LIMIT %(limit)s"
            f"{self.skip_locked()}) AND {self.unindexed('status')} = 'scheduled' RETURNING queue"
        )
        with self.connection.cursor() as cursor:
            cursor.execute(sql, {"now": self.clock(now), "limit": limit})
            return len(cursor.fetchall())

    def with_promote_notify(self, update_sql: str) -> str:
        """The promotion's UPDATE ... RETURNING queue, extended to wake idle workers."""
        return update_sql

    def next_due_in(self, *, now: datetime | None = None) -> float | None:
        """Seconds until the earliest scheduled job is due (<= 0: due now), by the database's
        clock; None when no job is scheduled. One probe of the scheduled jobs' index."""
        sql = (
            f"SELECT {self.seconds_between_sql('MIN(scheduled_at)', self.now_sql())} "
            f"FROM {self.table} WHERE status = 'scheduled'"
        )
        with self.connection.cursor() as cursor:
            cursor.execute(sql, {"now": self.clock(now)})
            row = cursor.fetchone()
        return None if row is None or row[0] is None else float(row[0])

    def seconds_between_sql(self, later: str, earlier: str) -> str:
        """SQL for ``later - earlier`` in seconds (two timestamps)."""
        raise NotImplementedError

    def reap(self, *, now: datetime | None = None) -> list[tuple[int, str, str, int, str]]:
        """Return jobs whose lease ran out to pending (or failed once their attempts are
        spent). Returns (id, type, new status, attempts, queue) for each."""
        now_sql = self.now_sql()
        spent = "attempts >= max_attempts"
        message = self.concat_sql(
            "'Lease expired: worker '",
            "locked_by",
            "' stopped renewing it during attempt '",
            "attempts",
            "' (killed, crashed, frozen or cut off from the database).'",
        )
        # A job whose cancel was requested is cancelled, not run again.
        cancelled = "cancel_requested_at IS NOT NULL"
        final = f"({spent} OR {cancelled})"
        rows = self.update_returning(
            # The error first: it reads locked_by, which the last assignment changes.
            f"last_error = {message}, errors = {self.lease_error_sql()}, "
            f"status = CASE WHEN {cancelled} THEN 'cancelled' WHEN {spent} THEN 'failed' "
            f"ELSE 'pending' END, "
            f"completed_at = CASE WHEN {final} THEN {now_sql} ELSE NULL END, "
            f"lease_expires_at = NULL, updated_at = {now_sql}, "
            f"locked_by = CASE WHEN {final} THEN locked_by ELSE '' END",
            # A processing row without a lease was set so by hand: nobody renews it either.
            f"status = 'processing' "
            f"AND (lease_expires_at < {now_sql} OR lease_expires_at IS NULL)",
            "id, type, status, attempts, queue",
            {"now": self.clock(now)},
            lock=True,
        )
        return [(row[0], row[1], row[2], row[3], row[4]) for row in rows]

    def lease_error_sql(self) -> str:
        raise NotImplementedError

    def _finished_sql(
        self, status: str, queues: Sequence[str] | None
    ) -> tuple[str, dict[str, Any]]:
        """The WHERE clause of ``status``'s rows that finished more than ``%(keep)s`` seconds
        ago (in ``queues``, or any): a range of ``sqlq_job_finished_idx``, whose condition
        it repeats word for word, so that SQLite's planner sees that the index covers it."""
        if status not in statuses.FINISHED:  # a literal in the SQL: never anything else
            raise ValueError(f"only finished jobs are pruned, not {status!r}")
        where = (
            f"status = '{status}' AND {any_status_sql(statuses.FINISHED)} "
            f"AND completed_at < {self.later_sql('back')}"
        )
        params: dict[str, Any] = {}
        if queues is not None:
            queue_sql, params = self.in_list_sql("queue", queues, "queue")
            where += f" AND {queue_sql}"
        return where, params

    def prune(
        self,
        *,
        status: str,
        keep_seconds: float,
        queues: Sequence[str] | None = None,
        limit: int = 1000,
        now: datetime | None = None,
    ) -> int:
        """Delete up to ``limit`` of the oldest ``status`` rows (a finished status) that
        finished more than ``keep_seconds`` ago, in one short statement. Returns how many."""
        where, params = self._finished_sql(status, queues)
        sql = (
            f"DELETE FROM {self.table} WHERE id IN (SELECT id FROM {self.table} WHERE {where} "
            f"ORDER BY completed_at LIMIT %(limit)s{self.skip_locked()}) "
            f"AND {self.unindexed('status')} = '{status}'"
        )
        params.update(now=self.clock(now), back=-float(keep_seconds), limit=limit)
        with self.connection.cursor() as cursor:
            cursor.execute(sql, params)
            return int(cursor.rowcount)

    def prune_orphan_steps(self, *, limit: int = 1000) -> int:
        """Delete up to ``limit`` recorded steps whose job is gone (pruned, deleted by an
        operator). Returns how many."""
        sql = (
            "DELETE FROM sqlq_job_step WHERE id IN (SELECT s.id FROM sqlq_job_step s "
            f"WHERE NOT EXISTS (SELECT 1 FROM {self.table} j WHERE j.id = s.job_id) "
            "LIMIT %(limit)s)"
        )
        with self.connection.cursor() as cursor:
            cursor.execute(sql, {"limit": limit})
            return int(cursor.rowcount)

    def prune_events(
        self, *, keep_seconds: float, limit: int = 1000, now: datetime | None = None
    ) -> int:
        """Delete up to ``limit`` of the events emitted more than ``keep_seconds`` ago."""
        sql = (
            "DELETE FROM sqlq_event WHERE id IN (SELECT id FROM sqlq_event "
            f"WHERE emitted_at < {self.later_sql('back')} ORDER BY emitted_at "
            "LIMIT %(limit)s)"
        )
        params = {"now": self.clock(now), "back": -float(keep_seconds), "limit": limit}
        with self.connection.cursor() as cursor:
            cursor.execute(sql, params)
            return int(cursor.rowcount)

    def prunable(
        self,
        *,
        status: str,
        keep_seconds: float,
        queues: Sequence[str] | None = None,
        now: datetime | None = None,
    ) -> dict[str, int]:
        """How many rows :meth:`prune` would delete, per queue (the same condition)."""
        where, params = self._finished_sql(status, queues)
        sql = f"SELECT queue, COUNT(*) FROM {self.table} WHERE {where} GROUP BY queue"
        params.update(now=self.clock(now), back=-float(keep_seconds))
        with self.connection.cursor() as cursor:
            cursor.execute(sql, params)
            return {row[0]: int(row[1]) for row in cursor.fetchall()}

    def take_lease(
        self, duty: str, *, holder: str, seconds: float, now: datetime | None = None
    ) -> bool:
        """Hold the maintenance ``duty`` for ``seconds``, unless another holder's lease is
        still running. True if ``holder`` holds it now (taken, or renewed). The duty's row
        must exist (``Maintenance.objects.get_or_create``)."""
        now_sql = self.now_sql()
        sql = (
            f"UPDATE {self.maintenance_table} SET holder = %(holder)s, "
            f"lease_expires_at = {self.later_sql('seconds')} WHERE duty = %(duty)s "
            f"AND (holder = '' OR holder = %(holder)s OR lease_expires_at IS NULL "
            f"OR lease_expires_at < {now_sql})"
        )
        params = {"now": self.clock(now), "holder": holder, "seconds": seconds, "duty": duty}
        with self.connection.cursor() as cursor:
            cursor.execute(sql, params)
            return int(cursor.rowcount) == 1

    def release_lease(self, duty: str, *, holder: str) -> None:
        sql = (
            f"UPDATE {self.maintenance_table} SET holder = '', lease_expires_at = NULL "
            "WHERE duty = %(duty)s AND holder = %(holder)s"
        )
        with self.connection.cursor() as cursor:
            cursor.execute(sql, {"duty": duty, "holder": holder})

    def reclaim_space(self, *, max_pages: int) -> int | None:  # noqa: ARG002 (for engines)
        """Give freed pages back to the file system, at most ``max_pages`` of them, in one
        short write. Returns how many pages are still free afterwards; None when the engine
        (or the database's settings) cannot. Default: None (PostgreSQL reuses the space
        VACUUM frees)."""
        return None

    def tidy(self) -> bool:
        """Maintenance after many claims: clear what finished jobs left in the claim's index.
        Returns True if it ran. Default: nothing to do (SQLite deletes index entries in
        place)."""
        return False
