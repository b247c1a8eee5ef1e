"""Durable steps' records (``django_sqlq.steps``): the one statement a step writes on the
path of every job that takes steps, in raw SQL (the ORM's INSERT cost as much as the rest of
a no-op step)."""

from __future__ import annotations

import functools
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

    def has_recorded_steps(self, job_id: int) -> bool:
        """Whether job ``job_id`` recorded any step: read first, on a cursor, by every
        attempt that takes one. Most attempts are a job's first, with nothing to replay, and
        this costs them a third of what the model read of RECORDED_STEPS did."""
        with self.connection.cursor() as cursor:
            cursor.execute(self.ANY_RECORDED_STEP, [job_id])
            return cursor.fetchone() is not None

    ANY_RECORDED_STEP = "SELECT 1 FROM sqlq_job_step WHERE job_id = %s LIMIT 1"

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
        returning: bool = True,
    ) -> int | None:
        """Insert a step's record (``result``: JSON text) and return its id (None without
        ``returning``). Raises IntegrityError when the job recorded ``name`` already
        (another attempt did)."""
        sql = record_sql(self.json_param_sql("result"), self.now_sql(), returning)
        params = {
            "now": None,
            "job_id": job_id,
            "name": name,
            "kind": kind,
            "state": state,
            "result": result,
            "wait_key": wait_key,
            "wake_at": None if wake_at is None else self.clock(wake_at),
        }
        with self.connection.cursor() as cursor:
            cursor.execute(sql, params)
            return int(cursor.fetchone()[0]) if returning else None


@functools.cache
def record_sql(result_sql: str, now_sql: str, returning: bool) -> str:
    """record_step's INSERT, built once per engine and clock (a step's record is on the
    path of every step a job takes)."""
    return (
        "INSERT INTO sqlq_job_step (job_id, name, kind, state, result, wait_key, wake_at, "
        f"created_at, updated_at) VALUES (%(job_id)s, %(name)s, %(kind)s, %(state)s, "
        f"{result_sql}, %(wait_key)s, %(wake_at)s, {now_sql}, {now_sql})"
        + (" RETURNING id" if returning else "")
    )
