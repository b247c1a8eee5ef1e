"""A running job's row: the lease its worker renews, the cancel an operator requests,
the progress its handler reports."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django_sqlq.db.dialect import Dialect


class RunningOps(Dialect):
    """Statements on processing jobs, for the worker that runs them and for operators."""

    def extend_leases(
        self,
        *,
        worker_id: str,
        lease_seconds: float,
        now: datetime | None = None,
        job_ids: Sequence[int] | None = None,
    ) -> int:
        """Renew the leases this worker holds, in one statement: all of them, or only those
        of ``job_ids`` (the jobs the worker knows it is running or about to run)."""
        where = "status = 'processing' AND locked_by = %(worker_id)s"
        params: dict[str, Any] = {
            "now": self.clock(now),
            "lease": lease_seconds,
            "worker_id": worker_id,
        }
        if job_ids is not None:
            if not job_ids:
                return 0
            in_sql, in_params = self.in_list_sql("id", list(job_ids), "ids")
            where = f"{in_sql} AND {where}"  # the ids lead: read by primary key (MariaDB)
            params.update(in_params)
        # A row another transaction holds (an enqueue marking it waited for, an operator)
        # is renewed by the next beat: the heartbeat never waits, so it never holds this
        # worker's other rows while it does.
        return self.update_rows(
            f"lease_expires_at = {self.later_sql('lease')}", where, params, skip_locked=True
        )

    def cancel_requests(self, *, worker_id: str) -> list[int]:
        """The ids of the jobs this worker runs whose cancel was requested: one probe of the
        partial index ``sqlq_job_cancel_idx`` (requested, still running jobs only)."""
        sql = (
            f"SELECT id FROM {self.table} WHERE status = 'processing' "
            f"AND cancel_requested_at IS NOT NULL AND locked_by = %(worker_id)s"
        )
        with self.connection.cursor() as cursor:
            cursor.execute(sql, {"worker_id": worker_id})
            return [row[0] for row in cursor.fetchall()]

    def request_cancel(self, job_ids: Sequence[int], *, now: datetime | None = None) -> int:
        """Ask the workers running ``job_ids`` to stop them: ``cancel_requested_at`` on the
        ones still processing (the first request's time is kept). Returns how many."""
        if not job_ids:
            return 0
        in_sql, in_params = self.in_list_sql("id", list(job_ids), "ids")
        now_sql = self.now_sql()
        return self.update_rows(
            f"cancel_requested_at = COALESCE(cancel_requested_at, {now_sql}), "
            f"updated_at = {now_sql}",
            f"{in_sql} AND status = 'processing'",
            {"now": self.clock(now), **in_params},
        )

    def holds(self, job_id: int, *, worker_id: str, attempt: int) -> bool:
        """Whether ``worker_id`` still runs attempt ``attempt`` of job ``job_id`` (the fence
        every outcome is written behind)."""
        with self.connection.cursor() as cursor:
            cursor.execute(
                f"SELECT 1 FROM {self.table} WHERE id = %(job_id)s AND status = 'processing' "
                "AND locked_by = %(worker_id)s AND attempts = %(attempt)s",
                {"job_id": job_id, "worker_id": worker_id, "attempt": attempt},
            )
            return cursor.fetchone() is not None

    def write_progress(
        self,
        progress: Sequence[tuple[int, int, float, str]],
        *,
        worker_id: str,
        now: datetime | None = None,
    ) -> None:
        """Write (job id, attempt, fraction, message) for jobs this worker ran: fenced by
        worker and attempt (not by status, so that the last progress of an attempt that just
        finished is kept on its row)."""
        if not progress:
            return
        now_sql = self.now_sql()
        sql = (
            f"UPDATE {self.table} SET progress = {self.float_param_sql('progress')}, "
            f"progress_message = %(message)s, progress_at = {now_sql} "
            f"WHERE id = %(job_id)s AND locked_by = %(worker_id)s AND attempts = %(attempt)s"
        )
        clock = self.clock(now)
        rows = [
            {
                "progress": fraction,
                "message": message,
                "now": clock,
                "job_id": job_id,
                "worker_id": worker_id,
                "attempt": attempt,
            }
            for job_id, attempt, fraction, message in sorted(progress)
        ]
        with self.connection.cursor() as cursor:
            cursor.executemany(sql, rows)
