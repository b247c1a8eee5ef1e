"""What the worker checks before it starts, and the error it stops with when it cannot."""

from __future__ import annotations

from django.db import DatabaseError, connections

from django_sqlq.db import is_missing_table
from django_sqlq.exceptions import SQLQError
from django_sqlq.models import Job
from django_sqlq.schema import UnappliedMigrationsError, check_migrated, migrate_command


class WorkerError(SQLQError, RuntimeError):
    """The worker cannot start (for example: the jobs table does not exist)."""


def unreachable(alias: str, exc: BaseException) -> str:
    """One line naming the database ``alias``, its engine and why it cannot be used."""
    cause = " ".join(str(exc).split()) or type(exc).__name__
    engine = connections[alias].settings_dict.get("ENGINE", "?")
    return f"Cannot use database {alias!r} ({engine}): {type(exc).__name__}: {cause}"


def check_ready(database: str) -> None:
    """Raise WorkerError unless a worker can serve the jobs table in ``database``."""
    if connections[database].in_atomic_block:
        # A TestCase (or transaction.atomic()) around the worker: its threads' own
        # connections cannot see what this one has not committed (on SQLite they wait
        # on its write lock for ever), and it would close this connection at the end.
        raise WorkerError(
            f"A worker cannot run inside a transaction on database {database!r} (a "
            "TestCase, or transaction.atomic()): its threads use their own connections, "
            "which do not see uncommitted jobs. In a test, run the jobs in the test's "
            "transaction with django_sqlq.testing.run_jobs(), or use TransactionTestCase "
            "(pytest: django_db(transaction=True))."
        )
    try:
        Job.objects.using(database).only("id").first()
    except DatabaseError as exc:
        if is_missing_table(exc):
            raise WorkerError(
                f"The jobs table does not exist in database {database!r}: "
                f"run `{migrate_command(database)}` first."
            ) from exc
        # Unreachable (down, wrong host or credentials, a missing directory): one line
        # naming the database and the cause, not a traceback; the process manager
        # restarts the worker.
        raise WorkerError(unreachable(database, exc)) from exc
    try:
        check_migrated(database)
    except UnappliedMigrationsError as exc:
        # Upgraded without `migrate`: the claim would fail on a missing column for ever.
        raise WorkerError(str(exc)) from exc
    except DatabaseError as exc:
        raise WorkerError(unreachable(database, exc)) from exc
