"""Durable steps' records (``django_sqlq.steps``): the one statement a step writes on the
path of every job that takes steps, in raw SQL (the ORM's INSERT cost as much as the rest of
a no-op step)."""

from __future__ import annotations

from contextlib import AbstractContextManager
from datetime import datetime

from django.db import transaction

from django_sqlq.db.dialect import Dialect


class StepOps(Dialect):
    """The statements of the steps table."""

    #: A job's recorded steps, read once by each attempt that takes a step (as
    #: ``JobStep.objects.raw()``: the ORM compiling the same query for every job cost a job
    #: of three steps a third of its time on SQLite).
    RECORDED_STEPS = "SELECT * FROM sqlq_job_step WHERE job_id = %s"

    def step_transaction(self) -> AbstractContextManager[None]:
        """The transaction a step's ``fn`` runs in, with its record (on SQLite, see
        ``SQLiteOps.step_transaction``)."""
        return transaction.atomic(using=self.connection.alias)

    def record_step(
        self,
        *,
        job_id: int,
        name: str,
        kind: str,
        state: str,
        result: str,
        wait_key: str | None = None,
        wake_at: datetime | None = None,
    ) -> int:
        """Insert a step's record (``result``: JSON text) and return its id. Raises
        IntegrityError when the job recorded ``name`` already (another attempt did)."""
        now_sql = self.now_sql()
        sql = (
            "INSERT INTO sqlq_job_step (job_id, name, kind, state, result, wait_key, wake_at, "
            f"created_at, updated_at) VALUES (%(job_id)s, %(name)s, %(kind)s, %(state)s, "
            f"{self.json_param_sql('result')}, %(wait_key)s, %(wake_at)s, {now_sql}, {now_sql}) "
            "RETURNING id"
        )
        params = {
            "now": None,
            "job_id": job_id,
            "name": name,
            "kind": kind,
            "state": state,
            "result": result,
            "wait_key": wait_key,
            "wake_at": self.clock(wake_at),
        }
        with self.connection.cursor() as cursor:
            cursor.execute(sql, params)
            return int(cursor.fetchone()[0])
