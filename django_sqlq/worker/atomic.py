"""Atomic handlers (``@handler(..., atomic=True)``, River's ``JobCompleteTx``): the handler
runs inside a transaction on the queue database, and the job's completion is written in
that same transaction before it commits.

The completion is written by the outcome writer (``django_sqlq.outcomes``), as the
worker's batches are, fenced the same way (worker id,
attempt, status ``processing``; ``cancelled`` when a cancel was requested while it ran). If
the fence matches no row (the lease was lost and the job taken over), the transaction rolls
back: the handler's writes are discarded and :class:`LeaseLostError` is raised. A handler
that raises rolls it back too; its failure is then written by the runner as usual, outside
the rolled-back transaction. As the writes and the completion are one commit, a crash after
it cannot lose the completion, and a crash before it loses both.

Runs in the thread that runs the handler (the runner's, or the helper thread of a timed
one): Django's connections are per thread, and the handler's ORM calls must use the
connection the transaction is open on.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.db import connections, transaction

from django_sqlq import outcomes
from django_sqlq.db import ops_for
from django_sqlq.db.columns import ClaimedJob
from django_sqlq.exceptions import LeaseLostError, PayloadError, TransactionLeftOpenError
from django_sqlq.jsoncodec import encode_json


class ResultRefused(Exception):
    """The handler's return value cannot be stored (not JSON, too large): raised inside the
    transaction so that it rolls back, and unwrapped by the runner, which fails the job for
    good (as for a non-atomic handler's refused result)."""

    def __init__(self, error: PayloadError) -> None:
        super().__init__(str(error))
        self.error = error


def run_atomic(
    func: Callable[..., Any],
    *args: Any,
    alias: str,
    job: ClaimedJob,
    worker_id: str,
    now: Callable[[], datetime | None],
    max_result_bytes: int,
    control: Any = None,
) -> tuple[Any, str]:
    """Call ``func(*args)`` in a transaction on ``alias`` and complete ``job`` in it.
    Returns (the handler's result, the job's new status: completed or cancelled)."""
    connection = connections[alias]
    with transaction.atomic(using=alias):
        # SQLite: the write lock is taken now (BEGIN IMMEDIATE, or a no-op write), before
        # the handler runs, so the completion cannot fail with "database is locked" after
        # the handler's work is done.
        ops_for(alias).take_write_lock()
        depth = len(connection.atomic_blocks)
        result = func(*args)
        if len(connection.atomic_blocks) != depth:
            # Its own atomic block left open: this block's exit would close the handler's
            # instead. Failing here rolls all of it back (tidy_connections closes the
            # connection, which the worker then finds still inside a block).
            raise TransactionLeftOpenError(
                f"The atomic handler {job.type!r} returned inside an atomic block it did not "
                f"exit, on database {alias!r}; its writes were rolled back and this attempt "
                "failed."
            )
        if result is not None:
            try:
                encode_json(result, what="handler's return value", limit=max_result_bytes)
            except PayloadError as exc:
                raise ResultRefused(exc) from exc
        then = getattr(control, "continuation", None)
        written = outcomes.write(
            alias, [outcomes.Completed(job, result, then)], worker_id=worker_id, now=now()
        ).statuses
        status = written.get(job.id)
        if status is None:
            raise LeaseLostError(
                f"Job id={job.id} attempt={job.attempts}: worker {worker_id} no longer holds "
                "the job (its lease expired and another worker or an operator took it over); "
                "the atomic handler's writes were rolled back."
            )
    return result, status
