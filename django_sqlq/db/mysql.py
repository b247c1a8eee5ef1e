"""MariaDB (10.6 and later): the queue on the database Django's ``mysql`` backend talks to.

MariaDB has ``INSERT ... RETURNING`` and ``DELETE ... RETURNING`` but no ``UPDATE ...
RETURNING`` (before 13.0), no partial indexes and no LISTEN. So, where the other engines
write one statement:

- an UPDATE that returns its rows (:meth:`MySQLOps.update_returning`) is one short
  transaction: ``SELECT ... ORDER BY id FOR UPDATE [SKIP LOCKED]`` picks and locks the rows,
  ``UPDATE ... WHERE id IN (...)`` changes them by primary key, and a read by primary key
  returns them. The claim and the completion, on every job's path, read what they return
  with the lock and patch it in memory: two statements and the commit.
- Locks are taken at READ COMMITTED, Django's default for this backend (``checks.py``
  refuses another level): a locking read takes no gap locks there, so an enqueue never waits
  for a claim (the gap-lock deadlocks of the anchors' issue trackers).
- The indexes a partial index serves elsewhere are composite indexes led by ``status`` here,
  and the live jobs' unique key is a generated column that is NULL unless the job is live,
  with a unique index (migration ``0015_mariadb_shapes``).
- An idle worker checks the newest job id every few milliseconds (one probe of the primary
  key's end) instead of listening.

MySQL 8 has no RETURNING at all: it is refused (``checks.py``) until it has a dialect.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db import DataError, ProgrammingError

from django_sqlq import statuses
from django_sqlq.db.blockers import IN_CHUNK
from django_sqlq.db.insert import RECENTLY_FINISHED_SQL
from django_sqlq.db.mysql_path import MySQLOutcomeOps, append_error, by_id, server_now

#: The statuses a job can be deleted in (a running one is not).
NOT_RUNNING = [status for status in statuses.ALL if status != statuses.PROCESSING]

#: How often an idle worker looks for new jobs (seconds): one probe of the primary key.
CHANGE_CHECK_INTERVAL = 0.01


def _wake_table_missing(exc: BaseException) -> bool:
    """True for error 1146 about ``sqlq_wake``: migration 0017 has not run yet."""
    args = getattr(exc.__cause__, "args", None) or exc.args
    return bool(args) and args[0] == 1146 and "sqlq_wake" in str(exc)


class MySQLOps(MySQLOutcomeOps):
    """The queue's statements in MariaDB's dialect: the hooks they call, in sections named
    after the module that holds each statement (the claim's and the completion's in
    ``db.mysql_path``)."""

    deadlock_ends_transaction = True

    # -- new jobs (insert.py) --------------------------------------------------------------

    def payloads_sql(self, payloads: Sequence[str]) -> tuple[str, str, str, Any]:
        # Each element is the payload's JSON text as a JSON string (as on SQLite), so that
        # the column is exactly that text whatever the payload's type.
        return (
            "JSON_TABLE(%(payloads)s, '$[*]' COLUMNS (n FOR ORDINALITY, "
            "value LONGTEXT PATH '$')) AS p",
            "p.value",
            "p.n",
            json.dumps(list(payloads)),
        )

    def _insert_unique_sql(self, fixed_time: bool, window: bool) -> str:  # noqa: ARG002
        # INSERT IGNORE ... VALUES on the live jobs' generated unique column: a key a live
        # job holds writes nothing and returns no row (and waits, as on PostgreSQL, for a
        # transaction that inserted the same key and has not committed). VALUES, not
        # SELECT: an INSERT ... SELECT holds the table's AUTO-INC lock to its end, so one
        # waiting for a key another transaction wrote would stop that one's next insert (a
        # deadlock, seen as error 1467). The window is read before (insert_unique). IGNORE
        # turns other errors into warnings too: insert_unique raises them.
        key = (type(self), fixed_time, server_now(), False)
        sql = self._insert_unique_cache.get(key)
        if sql is None:
            columns, values = self.new_row_sql(payload_sql="%(payload)s", fixed_time=fixed_time)
            sql = (
                f"INSERT IGNORE INTO {self.table} ({columns}) VALUES ({values}) "
                f"RETURNING id, scheduled_at, created_at, uuid"
            )
            self._insert_unique_cache[key] = sql
        return sql

    def insert_unique(
        self,
        *,
        payload: str,
        fields: dict[str, Any],
        delay_seconds: float | None,
        unique_for: float | None,
    ) -> Any:
        # A key a live job holds (or, with unique_for, one that finished within the window)
        # is found by a plain read, which locks nothing: INSERT IGNORE's duplicate check
        # would hold a shared lock on the holder's index entry until the caller commits,
        # and a worker completing that job (which changes the entry) would wait for it;
        # with two keys, each waits for the other (a deadlock, 1213). The INSERT decides a
        # race between two new keys.
        taken = f"EXISTS (SELECT 1 FROM {self.table} WHERE live_unique_key = %(unique_key)s)"
        if unique_for is not None:
            recent = RECENTLY_FINISHED_SQL.format(
                table=self.table, since=self.later_sql("unique_since")
            ).replace("AS VARCHAR(255)", "AS CHAR(255)")
            taken += f" OR EXISTS ({recent})"
        with self.connection.cursor() as cursor:
            cursor.execute(
                f"SELECT {taken}",
                {
                    "unique_key": fields["unique_key"],
                    "unique_since": -(unique_for or 0),
                    "now": None,
                },
            )
            if cursor.fetchone()[0]:
                return None
        inserted = super().insert_unique(
            payload=payload, fields=fields, delay_seconds=delay_seconds, unique_for=None
        )
        self._raise_ignored_errors()
        return inserted

    def _raise_ignored_errors(self) -> None:
        """Raise what INSERT IGNORE turned into a warning, but the duplicate key it is for."""
        raw = self.connection.connection
        if raw is None or not raw.warning_count():
            return
        with self.connection.cursor() as cursor:
            cursor.execute("SHOW WARNINGS")
            problems = [row for row in cursor.fetchall() if int(row[1]) != 1062]
        if problems:
            raise DataError("; ".join(f"({row[1]}) {row[2]}" for row in problems))

    # -- workflows (blockers.py) -----------------------------------------------------------

    def lock_jobs(self, job_ids: Sequence[int], statuses: Sequence[str]) -> list[int] | None:
        if not job_ids:
            return []
        in_sql, params = self.in_list_sql("id", sorted(set(job_ids)), "ids")
        status_sql, status_params = self.in_list_sql("status", list(statuses), "statuses")
        with self.connection.cursor() as cursor:
            cursor.execute(
                f"SELECT id FROM {by_id(self.table, in_sql)} WHERE {in_sql} AND {status_sql} "
                f"ORDER BY id FOR UPDATE",
                {**params, **status_params},
            )
            return [int(row[0]) for row in cursor.fetchall()]

    def delete_jobs(self, job_ids: Sequence[int]) -> list[tuple[int, str, int | None]]:
        # MariaDB's DELETE takes no index hint and may find its rows through an index led
        # by status: the rows are locked by primary key first (see by_id()).
        ids = sorted(set(job_ids))
        for start in range(0, len(ids), IN_CHUNK):
            self.lock_jobs(ids[start : start + IN_CHUNK], NOT_RUNNING)
        return super().delete_jobs(ids)

    # -- upkeep (upkeep.py) ----------------------------------------------------------------

    def promote(self, *, limit: int = 1000, now: datetime | None = None) -> int:
        now_sql = server_now()
        rows = self.update_returning(
            f"status = 'pending', updated_at = {now_sql}",
            f"id IN (SELECT id FROM (SELECT id FROM {self.table} WHERE status = 'scheduled' "
            f"AND scheduled_at <= {now_sql} ORDER BY scheduled_at LIMIT {int(limit)}) AS due) "
            "AND status = 'scheduled'",
            "queue",
            {"now": self.clock(now)},
            skip_locked=True,
        )
        return len(rows)

    def prune(
        self,
        *,
        status: str,
        keep_seconds: float,
        queues: Sequence[str] | None = None,
        limit: int = 1000,
        now: datetime | None = None,
    ) -> int:
        # The batch's ids first, the oldest, read off the finished jobs' index (status,
        # completed_at) in order, stopping at the limit; then a DELETE by primary key, which
        # checks the condition again (a job retried meanwhile is not deleted). A DELETE ...
        # ORDER BY completed_at LIMIT n read and sorted every prunable row of the status
        # for each batch (256,000 rows for 1,000: half a second a batch).
        where, params = self._finished_sql(status, queues)
        params.update(now=self.clock(now), back=-float(keep_seconds))
        with self.connection.cursor() as cursor:
            cursor.execute(
                f"SELECT id FROM {self.table} WHERE {where} "
                f"ORDER BY completed_at LIMIT {int(limit)}",
                params,
            )
            ids = [int(row[0]) for row in cursor.fetchall()]
            if not ids:
                return 0
            # Locked through the primary key, the condition checked again (a job retried
            # meanwhile is left), then deleted by primary key (see by_id()).
            listed = f"id IN ({', '.join(map(str, ids))})"
            cursor.execute(
                f"SELECT id FROM {by_id(self.table, listed)} WHERE {listed} AND {where} "
                "ORDER BY id FOR UPDATE",
                params,
            )
            ids = [int(row[0]) for row in cursor.fetchall()]
            if not ids:
                return 0
            cursor.execute(f"DELETE FROM {self.table} WHERE id IN ({', '.join(map(str, ids))})")
            return int(cursor.rowcount)

    def prune_orphan_steps(self, *, limit: int = 1000) -> int:
        with self.connection.cursor() as cursor:
            cursor.execute(
                f"DELETE FROM sqlq_job_step WHERE NOT EXISTS (SELECT 1 FROM {self.table} j "
                f"WHERE j.id = sqlq_job_step.job_id) LIMIT {int(limit)}"
            )
            return int(cursor.rowcount)

    def prune_events(
        self, *, keep_seconds: float, limit: int = 1000, now: datetime | None = None
    ) -> int:
        with self.connection.cursor() as cursor:
            cursor.execute(
                f"DELETE FROM sqlq_event WHERE emitted_at < {self.later_sql('back')} "
                f"ORDER BY emitted_at LIMIT {int(limit)}",
                {"now": self.clock(now), "back": -float(keep_seconds)},
            )
            return int(cursor.rowcount)

    def seconds_between_sql(self, later: str, earlier: str) -> str:
        return f"(TIMESTAMPDIFF(MICROSECOND, {earlier}, {later}) / 1000000.0)"

    def lease_error_sql(self) -> str:
        entry = (
            "JSON_OBJECT('attempt', attempts, 'worker_id', locked_by, "
            "'exception_class', 'django_sqlq.exceptions.LeaseLostError', "
            "'message', 'lease expired', 'traceback', '')"
        )
        return append_error(entry)

    def delete_rows(
        self, table: str, where: str, params: dict[str, Any], *, returning: str = ""
    ) -> list[tuple[Any, ...]]:
        # The rows' ids by a plain read, then a DELETE by primary key: a DELETE that finds
        # its rows through a secondary index locks that index's entry, then the row, then
        # the row's entries in the other indexes; two of them reaching one row through two
        # indexes (a cancel's blockers by waiter, a completion's by dependency) each held
        # what the other waited for (a deadlock, 1213). By primary key, the row is locked
        # first. (Rows deleted meanwhile are not deleted twice; the reads that find rows
        # to delete run with the rows they hang on locked, so none is missed.)
        with self.connection.cursor() as cursor:
            cursor.execute(f"SELECT id FROM {table} WHERE {where} ORDER BY id", params)
            ids = [int(row[0]) for row in cursor.fetchall()]
            if not ids:
                return []
            returned = f" RETURNING {returning}" if returning else ""
            cursor.execute(
                f"DELETE FROM {table} WHERE id IN ({', '.join(map(str, ids))}){returned}"
            )
            return list(cursor.fetchall()) if returning else []

    def update_rows(
        self, set_sql: str, where: str, params: dict[str, Any], *, skip_locked: bool = False
    ) -> int:
        return len(self.update_returning(set_sql, where, "id", params, skip_locked=skip_locked))

    # -- wake-ups (notify.py) --------------------------------------------------------------

    def change_check_interval(self, poll_interval: float, wanted: float | None = None) -> float:
        return min(CHANGE_CHECK_INTERVAL if wanted is None else wanted, poll_interval)

    def notify(self, queues: Sequence[str]) -> None:
        """A job was made runnable again (not inserted: the newest id does not move): add
        one to the wake-up counter (``sqlq_wake``, migrations 0017 and 0019), seen by idle
        workers once the current transaction commits. The counter is in 64 rows (0019),
        whose sum the workers read: this takes the first one no other transaction holds
        (``SKIP LOCKED``; its lock lasts until the commit), so that a caller that keeps its
        transaction open holds up no other notifier (a worker releasing dependent jobs, an
        operator). When every row is held (64 such transactions open at once), it adds
        nothing rather than wait: the workers see this change at their next poll, or sooner
        when one of those commits."""
        if not queues:
            return
        try:
            with self.connection.cursor() as cursor:
                cursor.execute(
                    "SELECT id FROM sqlq_wake ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED"
                )
                row = cursor.fetchone()
                if row is not None:
                    cursor.execute("UPDATE sqlq_wake SET n = n + 1 WHERE id = %s", [row[0]])
        except ProgrammingError as exc:
            # Code deployed before its migration: the workers poll meanwhile. (MariaDB rolls
            # back the failed statement alone, not the caller's transaction.)
            if not _wake_table_missing(exc):
                raise

    def data_version(self) -> Any:
        """The newest job's id and the wake-up counter: they change when another connection
        commits a new job, or makes one runnable again (a probe of the jobs' primary key, and
        the sum of the counter's 64 rows)."""
        with self.connection.cursor() as cursor:
            try:
                cursor.execute(
                    f"SELECT (SELECT MAX(id) FROM {self.table}), (SELECT SUM(n) FROM sqlq_wake)"
                )
            except ProgrammingError as exc:  # before migration 0017: new jobs only
                if not _wake_table_missing(exc):
                    raise
                cursor.execute(f"SELECT MAX(id), NULL FROM {self.table}")
            return tuple(cursor.fetchone())
