"""What every engine writes differently, and what the queue's statements share.

:class:`Dialect` is the base of every class of queue operations (``claim``, ``insert``,
``outcomes``...): it holds the connection and the hooks a statement calls where engines
differ (the clock, lists of values, JSON, row locks). An engine's module (``sqlite``,
``postgresql``) fills them in, as Django's ``DatabaseOperations`` does per backend; a hook
that one kind of statement alone needs is declared beside that statement instead.

Every statement is one round trip. Values always go in as parameters, named
(``%(now)s``) so that a value a statement uses several times is passed once: both
psycopg and Django's SQLite backend (which turns ``%(name)s`` into ``:name``) take a dict
of them. The statuses are literals on purpose, so the planners can match the partial
indexes' ``WHERE status = ...``.

``now`` is the clock, parameter ``%(now)s`` of every statement that reads it: ``None``
means the database's own clock (the default in production, so hosts with skewed clocks
agree), a datetime means an injected clock (tests).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper

# ``errors`` keeps the entries of the last attempts only: a job retried for ever (a huge
# max_attempts) would otherwise grow its row by an entry (up to ~68 KB) per attempt.
MAX_ERROR_ENTRIES = 50


def literals(values: Sequence[str]) -> str:
    """``values`` as a list of SQL string literals (statuses: constants, never input)."""
    return ", ".join(f"'{value}'" for value in values)


def any_status_sql(values: Sequence[str]) -> str:
    """``(status = 'a' OR status = 'b' OR ...)``: the condition of the jobs table's partial
    indexes and status check over several statuses, word for word as their migration (0018)
    wrote it, for statements that must repeat it (SQLite's planner and its upsert match a
    partial index by the condition's very expression). Not ``status IN (...)``: SQLite
    evaluates an IN list of more than two literals through a temporary b-tree, a look-up at
    every row an UPDATE changes, for every such index and check (see ``Job.Meta``)."""
    return "(" + " OR ".join(f"status = '{value}'" for value in values) + ")"


def named_in_list(column: str, values: Sequence[Any], name: str) -> tuple[str, dict[str, Any]]:
    """``column IN (%(name_0)s, %(name_1)s, ...)`` and its parameters: one per value."""
    params = {f"{name}_{index}": value for index, value in enumerate(values)}
    placeholders = ", ".join(f"%({key})s" for key in params)
    return f"{column} IN ({placeholders})", params


class Dialect:
    """The connection, the jobs table, and the SQL fragments each engine writes its way."""

    table = "sqlq_job"
    #: The deepest nesting of JSON arrays and objects the engine stores; None: no limit of
    #: its own (``jsoncodec.MAX_DEPTH`` applies).
    max_json_depth: int | None = None
    #: Whether the engine rolls back the whole transaction to break a deadlock (MariaDB),
    #: not only the statement that met it (PostgreSQL): a savepoint cannot try it again.
    deadlock_ends_transaction = False

    def __init__(self, connection: BaseDatabaseWrapper) -> None:
        self.connection = connection

    def now_sql(self) -> str:
        """SQL for "now", from the ``now`` parameter (the injected clock, or NULL)."""
        raise NotImplementedError

    def uuid_sql(self) -> str:
        """SQL for a new time-ordered (version 7) UUID as the ``uuid`` column stores it,
        as ``models.new_uuid`` makes them; one per row. It is each job's result id in the
        tasks backend: unguessable (74 random bits), so not derived from the id."""
        raise NotImplementedError

    def later_sql(self, seconds: str) -> str:
        """SQL for "now + seconds", from the ``now`` parameter and the parameter named
        ``seconds``."""
        raise NotImplementedError

    def append_error_sql(self, entry: str) -> str:
        """SQL for ``errors`` with one JSON object (the parameter named ``entry``, as text)
        appended."""
        raise NotImplementedError

    def in_list_sql(
        self, column: str, values: Sequence[Any], name: str
    ) -> tuple[str, dict[str, Any]]:
        """``column`` is one of ``values``, and its parameters (named after ``name``)."""
        raise NotImplementedError

    def max_json_bytes(self) -> int | None:
        """The longest JSON text one statement carries, where the engine has a limit that
        SQLQ["MAX_PAYLOAD_BYTES"] may pass (None: none; see ``db.json_size_limit``)."""
        return None

    def json_param_sql(self, name: str) -> str:
        """The parameter ``name`` (JSON text) as the engine's JSON type."""
        return f"%({name})s"

    def float_param_sql(self, name: str) -> str:
        """The parameter ``name`` as a floating-point number."""
        return f"%({name})s"

    def empty_json_list_sql(self) -> str:
        return "'[]'"

    def skip_locked(self) -> str:
        return ""

    def unindexed(self, column: str) -> str:
        """``column``, written so the planner will not drive the query from its index."""
        return column

    def in_id_order(
        self,
        where: str,
        *,
        table: str | None = None,  # noqa: ARG002 (for engines with row locks)
        skip_locked: bool = False,  # noqa: ARG002
        delete: bool = False,  # noqa: ARG002
    ) -> str:
        """The condition of an UPDATE or DELETE of several rows of ``table`` (the jobs table)
        picked by ``where``. On an engine with row locks it locks those rows in id order
        first: every statement that may wait for several rows takes them in this one
        order, so two transactions over overlapping rows cannot each hold one the other
        waits for (a deadlock). ``skip_locked``: leave out the rows another transaction
        holds instead of waiting for them. ``delete``: the lock a DELETE needs. Here (SQLite,
        one writer at a time): ``where`` itself."""
        return where

    def update_returning(
        self,
        set_sql: str,
        where: str,
        returning: str,
        params: dict[str, Any],
        *,
        table: str | None = None,
        lock: bool = False,
        skip_locked: bool = False,
    ) -> list[tuple[Any, ...]]:
        """``UPDATE table SET set_sql WHERE where RETURNING returning``: the rows it changed,
        as ``returning`` reads them after the change. ``lock``: take the rows in id order
        first (:meth:`in_id_order`); ``skip_locked``: leave out the rows another transaction
        holds. ``set_sql`` never reads a column that it assigns before (engines that
        evaluate assignments left to right, as MySQL's, would read the new value)."""
        table = table or self.table
        if lock or skip_locked:
            where = self.in_id_order(where, table=table, skip_locked=skip_locked)
        with self.connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {table} SET {set_sql} WHERE {where} RETURNING {returning}", params
            )
            return list(cursor.fetchall())

    def update_rows(
        self, set_sql: str, where: str, params: dict[str, Any], *, skip_locked: bool = False
    ) -> int:
        """``UPDATE`` the jobs ``where`` picks, taken in id order (:meth:`in_id_order`);
        ``skip_locked``: but those another transaction holds. Returns how many changed."""
        where = self.in_id_order(where, skip_locked=skip_locked)
        with self.connection.cursor() as cursor:
            cursor.execute(f"UPDATE {self.table} SET {set_sql} WHERE {where}", params)
            return int(cursor.rowcount)

    def delete_rows(
        self, table: str, where: str, params: dict[str, Any], *, returning: str = ""
    ) -> list[tuple[Any, ...]]:
        """``DELETE FROM table WHERE where``, its rows taken in id order
        (:meth:`in_id_order`); the rows ``returning`` reads of those deleted (else [])."""
        where = self.in_id_order(where, table=table, delete=True)
        returned = f" RETURNING {returning}" if returning else ""
        with self.connection.cursor() as cursor:
            cursor.execute(f"DELETE FROM {table} WHERE {where}{returned}", params)
            return list(cursor.fetchall()) if returning else []

    def insert_or_nothing_sql(
        self, table: str, columns: str, values: str, conflict: str, returning: str = ""
    ) -> str:
        """``INSERT INTO table (columns) VALUES (values)`` that writes nothing where a row
        with the same ``conflict`` columns (a unique constraint's) exists, waiting for a
        transaction that inserted one and has not committed; ``RETURNING returning`` of
        the row written, if any."""
        returned = f" RETURNING {returning}" if returning else ""
        return (
            f"INSERT INTO {table} ({columns}) VALUES ({values}) "
            f"ON CONFLICT ({conflict}) DO NOTHING{returned}"
        )

    def concat_sql(self, *parts: str) -> str:
        """SQL for the text of ``parts`` (SQL expressions) one after another."""
        return " || ".join(parts)

    def raw_datetime(self, column: str) -> str:
        """``column`` (a datetime) as the driver returns it unconverted: for values that are
        only sorted, or converted once per distinct value rather than once per row."""
        return column

    def clock(self, now: datetime | None) -> Any:
        if now is None:
            return None
        return self.connection.ops.adapt_datetimefield_value(now)

    def moment_at(self, epoch: float) -> datetime:
        """The time ``epoch`` (as :meth:`epoch_sql` reads the clock) as a ``now`` to pass
        to the statements that take one."""
        return datetime.fromtimestamp(epoch, tz=UTC)

    def take_write_lock(self) -> None:
        """At the start of a transaction that will write, take what a write needs up front
        (an atomic handler's: SQLite's write lock). Nothing on engines whose writers do not
        exclude each other."""
