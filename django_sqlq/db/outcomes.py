"""Outcomes: what a worker writes when an attempt ends (completed, retried, failed,
cancelled), and the claimed jobs it gives back unstarted. Each write is fenced: it changes
a job only while this worker still holds that attempt."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any, NamedTuple

from django_sqlq.db.dialect import Dialect


class Finished(NamedTuple):
    """The outcome of one attempt, ready to be written."""

    id: int
    attempt: int
    result: Any = None


class OutcomeOps(Dialect):
    """The ends of attempts."""

    def complete_statuses(
        self,
        finished: Sequence[Finished],
        *,
        worker_id: str,
        now: datetime | None = None,
        unwaited: bool = False,
        skip_locked: bool = False,
    ) -> dict[int, str]:
        """Mark many attempts completed in one statement, and return each written job's
        new status: ``completed``, or ``cancelled`` for a job whose cancel was requested
        while it ran (the handler ran to its end, but the job was cancelled: its outcome is
        recorded as such). An attempt this worker no longer held (its lease ran out) is
        fenced out (not in the result).
        ``unwaited``: only jobs no other job waits for (``waited_on`` unset); the others
        are left out, as a lost job is, for the caller to complete with their waiters.
        ``skip_locked``: a job another transaction holds right now (an enqueue about to
        depend on it, an operator) is left out too, rather than waited for with the others
        held (see :meth:`in_id_order`)."""
        if not finished:
            return {}
        now_sql = self.now_sql()
        source, columns, source_params = self.finished_rows_sql(finished)
        status_sql = (
            f"CASE WHEN {self.table}.cancel_requested_at IS NULL THEN 'completed' "
            f"ELSE 'cancelled' END"
        )
        sql = (
            f"UPDATE {self.table} SET status = {status_sql}, result = {columns['result']}, "
            f"completed_at = {now_sql}, updated_at = {now_sql}, lease_expires_at = NULL "
            f"FROM {source} "
            f"WHERE {self.table}.id = {columns['id']} "
            f"AND {self.table}.attempts = {columns['attempt']} "
            f"AND {self.unindexed(f'{self.table}.status')} = 'processing' "
            f"AND {self.table}.locked_by = %(worker_id)s "
            f"{f'AND {self.table}.waited_on IS NULL ' if unwaited else ''}"
            f"{self.finished_lock_sql(unwaited=unwaited, skip_locked=skip_locked)}"
            f"RETURNING {self.table}.id, {self.table}.status"
        )
        params = {"now": self.clock(now), "worker_id": worker_id, **source_params}
        with self.connection.cursor() as cursor:
            cursor.execute(sql, params)
            return {row[0]: str(row[1]) for row in cursor.fetchall()}

    def finished_rows_sql(
        self, finished: Sequence[Finished]
    ) -> tuple[str, dict[str, str], dict[str, Any]]:
        """A FROM item with one row (id, attempt, result) per finished attempt, its columns,
        and its parameters."""
        raise NotImplementedError

    def finished_lock_sql(
        self,
        *,
        unwaited: bool,  # noqa: ARG002 (for engines with row locks)
        skip_locked: bool,  # noqa: ARG002
    ) -> str:
        """What :meth:`complete_statuses` adds to its WHERE to take its rows in id order
        (:meth:`in_id_order`), with the parameters of :meth:`finished_rows_sql`. Nothing
        here (SQLite)."""
        return ""

    def fail(
        self,
        *,
        job_id: int,
        attempt: int,
        worker_id: str,
        error: str,
        error_entry: dict[str, Any],
        retry_in: float | None,
        now: datetime | None = None,
        cancel: bool = False,
        skip_locked: bool = False,
    ) -> str | None:
        """Record a failed attempt: ``scheduled`` again ``retry_in`` seconds ahead (``pending``
        for no wait), or failed for ``retry_in=None``; or ``cancelled`` (no retry) when
        ``cancel`` or when a cancel was requested while it ran. Returns the new status, or
        None if this worker no longer held the job (fenced).

        Whether the attempt is retried, and when, is the retry policy's decision
        (``django_sqlq.retries.RetryPolicy.retry_in``: attempts left, ``retry=False`` for
        a result that cannot be stored, the backoff); the statement applies it, and adds
        only what the row alone knows: a cancel requested while the attempt ran.
        ``skip_locked``: a job another transaction holds right now is left out (None), as
        in :meth:`complete_statuses`."""
        now_sql = self.now_sql()
        where = (
            "id = %(job_id)s AND status = 'processing' AND locked_by = %(worker_id)s "
            "AND attempts = %(attempt)s"
        )
        cancelled = "(cancel_requested_at IS NOT NULL OR %(cancel)s)"
        final = f"(%(no_retry)s OR {cancelled})"
        set_sql = (
            f"status = CASE WHEN {cancelled} THEN 'cancelled' WHEN {final} THEN 'failed' "
            f"WHEN {self.float_param_sql('retry_in')} > 0 THEN 'scheduled' ELSE 'pending' END, "
            f"scheduled_at = CASE WHEN {final} THEN scheduled_at "
            f"ELSE {self.later_sql('retry_in')} END, "
            f"completed_at = CASE WHEN {final} THEN {now_sql} ELSE NULL END, "
            f"locked_by = CASE WHEN {final} THEN locked_by ELSE '' END, "
            f"last_error = %(error)s, errors = {self.append_error_sql('error_entry')}, "
            f"lease_expires_at = NULL, updated_at = {now_sql}"
        )
        params = {
            "no_retry": retry_in is None,
            "cancel": cancel,
            "retry_in": retry_in or 0,
            "now": self.clock(now),
            "error": error,
            "error_entry": json.dumps(error_entry),
            "job_id": job_id,
            "worker_id": worker_id,
            "attempt": attempt,
        }
        rows = self.update_returning(set_sql, where, "status", params, skip_locked=skip_locked)
        return str(rows[0][0]) if rows else None

    def suspend(
        self,
        *,
        job_id: int,
        attempt: int,
        worker_id: str,
        until: datetime,
        wait_key: str | None = None,
        now: datetime | None = None,
        skip_locked: bool = False,
    ) -> str | None:
        """Record an attempt that ended in a durable sleep or wait (``context.sleep()``,
        ``wait_for_event()``): ``scheduled`` until ``until``, the attempt not counted
        (``attempts`` back by one), no error; ``cancelled`` when a cancel was requested while
        it ran. ``wait_key``: then ``pending`` at once if that event was emitted meanwhile
        (read after this row is locked: an emit that committed before is seen here, one
        that commits after finds the row scheduled and wakes it). Returns the new status,
        or None if this worker no longer held the job (fenced)."""
        now_sql = self.now_sql()
        where = (
            "id = %(job_id)s AND status = 'processing' AND locked_by = %(worker_id)s "
            "AND attempts = %(attempt)s"
        )
        cancelled = "cancel_requested_at IS NOT NULL"
        set_sql = (
            f"status = CASE WHEN {cancelled} THEN 'cancelled' ELSE 'scheduled' END, "
            f"scheduled_at = CASE WHEN {cancelled} THEN scheduled_at ELSE %(until)s END, "
            f"completed_at = CASE WHEN {cancelled} THEN {now_sql} ELSE NULL END, "
            f"attempts = CASE WHEN {cancelled} THEN attempts ELSE attempts - 1 END, "
            f"locked_by = CASE WHEN {cancelled} THEN locked_by ELSE '' END, "
            f"lease_expires_at = NULL, updated_at = {now_sql}"
        )
        params = {
            "now": self.clock(now),
            "until": self.clock(until),
            "job_id": job_id,
            "worker_id": worker_id,
            "attempt": attempt,
        }
        rows = self.update_returning(set_sql, where, "status", params, skip_locked=skip_locked)
        if not rows:
            return None
        status = str(rows[0][0])
        if (
            wait_key is not None
            and status == "scheduled"
            and self.update_returning(
                f"status = 'pending', scheduled_at = {now_sql}, updated_at = {now_sql}",
                "id = %(job_id)s AND status = 'scheduled' "
                "AND EXISTS (SELECT 1 FROM sqlq_event WHERE sqlq_event.key = %(key)s)",
                "status",
                {"now": self.clock(now), "job_id": job_id, "key": wait_key},
            )
        ):
            status = "pending"
        return status

    def wake_waiters(self, key: str, payload: str, *, now: datetime | None = None) -> list[str]:
        """Give event ``key``'s ``payload`` (JSON text) to the jobs waiting for it (an emit
        just wrote it): their waiting steps are done with it, so that they have it whatever
        happens to the event (retention), and each job asleep (``scheduled``) is ``pending``
        at once. The one running right now is touched too, so that on PostgreSQL this waits
        for the transaction that is putting it to sleep, then finds it scheduled (see
        :meth:`suspend`). Returns the woken jobs' queues."""
        now_sql = self.now_sql()
        rows = self.update_returning(
            f"state = 'done', result = {self.json_param_sql('payload')}, updated_at = {now_sql}",
            # The index of the steps asleep is partial to this IN: SQLite uses it only for a
            # WHERE that names its condition as it is written.
            "state IN ('sleeping', 'waiting') AND state = 'waiting' AND wait_key = %(key)s",
            "job_id",
            {"now": self.clock(now), "key": key, "payload": payload},
            table="sqlq_job_step",
        )
        job_ids = sorted({int(row[0]) for row in rows})
        if not job_ids:
            return []
        in_sql, in_params = self.in_list_sql("id", job_ids, "ids")
        asleep = "status = 'scheduled'"
        rows = self.update_returning(
            # scheduled_at first: it reads the status this changes.
            f"scheduled_at = CASE WHEN {asleep} THEN {now_sql} ELSE scheduled_at END, "
            f"status = CASE WHEN {asleep} THEN 'pending' ELSE status END, "
            f"updated_at = {now_sql}",
            f"{in_sql} AND status IN ('scheduled', 'processing')",
            "queue, status",
            {"now": self.clock(now), **in_params},
            lock=True,
        )
        return [str(queue) for queue, status in rows if status == "pending"]

    def release(
        self, job_ids: Sequence[int], *, worker_id: str, now: datetime | None = None
    ) -> int:
        """Give back claimed-but-unstarted jobs: pending again, the attempt not counted (a job
        whose cancel was requested meanwhile is cancelled instead)."""
        if not job_ids:
            return 0
        in_sql, in_params = self.in_list_sql("id", list(job_ids), "ids")
        now_sql = self.now_sql()
        return self.update_rows(
            f"status = CASE WHEN cancel_requested_at IS NULL THEN 'pending' ELSE 'cancelled' END, "
            f"completed_at = CASE WHEN cancel_requested_at IS NULL THEN NULL ELSE {now_sql} END, "
            f"attempts = attempts - 1, "
            f"locked_by = '', locked_at = NULL, started_at = NULL, lease_expires_at = NULL, "
            f"updated_at = {now_sql}",
            f"{in_sql} AND status = 'processing' AND locked_by = %(worker_id)s",
            {"now": self.clock(now), "worker_id": worker_id, **in_params},
        )
