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
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import DataError, ProgrammingError, transaction

from django_sqlq.db.base import QueueOps
from django_sqlq.db.columns import ClaimedJob
from django_sqlq.db.dialect import MAX_ERROR_ENTRIES, named_in_list
from django_sqlq.db.insert import RECENTLY_FINISHED_SQL
from django_sqlq.db.outcomes import Finished

#: How often an idle worker looks for new jobs (seconds): one probe of the primary key.
CHANGE_CHECK_INTERVAL = 0.01

#: Bytes of a statement kept for what is not JSON text (SQL, ids, other values), within
#: the server's max_allowed_packet.
STATEMENT_ROOM = 64 * 1024

_NOW_UTC = "COALESCE(CAST(%(now)s AS DATETIME(6)), UTC_TIMESTAMP(6))"
_NOW_LOCAL = "COALESCE(CAST(%(now)s AS DATETIME(6)), NOW(6))"


def _wake_table_missing(exc: BaseException) -> bool:
    """True for error 1146 about ``sqlq_wake``: migration 0017 has not run yet."""
    args = getattr(exc.__cause__, "args", None) or exc.args
    return bool(args) and args[0] == 1146 and "sqlq_wake" in str(exc)


def _now() -> str:
    # The columns hold UTC under USE_TZ (Django's MySQL backend converts in Python). Without
    # it (refused by check E007) the session's wall time, which is not Django's TIME_ZONE's.
    return _NOW_UTC if settings.USE_TZ else _NOW_LOCAL


# A version 7 UUID (as models.new_uuid), per row: the time in milliseconds (48 bits), the
# version nibble 7, then 72 random bits (RANDOM_BYTES: the server's strong randomness) with
# the variant nibble (8-b, two bits of RAND()) after the first 12. MariaDB's UUID type takes
# the 32 hex digits.
_UUID7 = (
    "CAST(CONCAT(LPAD(HEX(FLOOR(UNIX_TIMESTAMP(SYSDATE(6)) * 1000)), 12, '0'), '7', "
    "INSERT(HEX(RANDOM_BYTES(9)), 4, 0, ELT(1 + FLOOR(RAND() * 4), '8', '9', 'a', 'b'))) "
    "AS UUID)"
)


def _keep_last(json_list: str) -> str:
    # One entry is appended at a time, so at most one falls off the front.
    return (
        f"(CASE WHEN JSON_LENGTH({json_list}) > {MAX_ERROR_ENTRIES} "
        f"THEN JSON_REMOVE({json_list}, '$[0]') ELSE {json_list} END)"
    )


def _append(entry: str) -> str:
    return _keep_last(f"JSON_ARRAY_APPEND(COALESCE(errors, '[]'), '$', JSON_COMPACT({entry}))")


class MySQLClaimOps(QueueOps):
    """MariaDB's fragments, its UPDATE that returns rows, and the claim."""

    #: JSON_VALID (the JSON columns' CHECK) refuses text nested deeper.
    max_json_depth = 31

    # -- the fragments every statement uses (dialect.py) -----------------------------------

    def now_sql(self) -> str:
        return _now()

    def later_sql(self, seconds: str) -> str:
        return f"({_now()} + INTERVAL CAST(ROUND(%({seconds})s * 1000000) AS SIGNED) MICROSECOND)"

    def uuid_sql(self) -> str:
        return _UUID7

    def append_error_sql(self, entry: str) -> str:
        return _append(f"%({entry})s")

    def concat_sql(self, *parts: str) -> str:
        return f"CONCAT({', '.join(parts)})"

    def in_list_sql(
        self, column: str, values: Sequence[Any], name: str
    ) -> tuple[str, dict[str, Any]]:
        return named_in_list(column, values, name)

    def skip_locked(self) -> str:
        return " FOR UPDATE SKIP LOCKED"

    def update_returning(
        self,
        set_sql: str,
        where: str,
        returning: str,
        params: dict[str, Any],
        *,
        table: str | None = None,
        lock: bool = False,  # noqa: ARG002 (the rows are always locked first, in id order)
        skip_locked: bool = False,
    ) -> list[tuple[Any, ...]]:
        table = table or self.table
        skip = " SKIP LOCKED" if skip_locked else ""
        with (
            transaction.atomic(using=self.connection.alias, savepoint=False),
            self.connection.cursor() as cursor,
        ):
            cursor.execute(
                f"SELECT id FROM {table} WHERE {where} ORDER BY id FOR UPDATE{skip}", params
            )
            ids = [int(row[0]) for row in cursor.fetchall()]
            if not ids:
                return []
            listed = ", ".join(map(str, ids))
            cursor.execute(f"UPDATE {table} SET {set_sql} WHERE id IN ({listed})", params)
            cursor.execute(
                f"SELECT {returning} FROM {table} WHERE id IN ({listed}) ORDER BY id", params
            )
            return list(cursor.fetchall())

    def insert_or_nothing_sql(
        self,
        table: str,
        columns: str,
        values: str,
        conflict: str,  # noqa: ARG002 (IGNORE: any unique index)
        returning: str = "",
    ) -> str:
        # INSERT IGNORE also turns other errors (a value too long) into warnings: only for
        # values the caller has checked (the unique enqueue checks the warnings).
        returned = f" RETURNING {returning}" if returning else ""
        return f"INSERT IGNORE INTO {table} ({columns}) VALUES ({values}){returned}"

    def take_write_lock(self) -> None:
        """Nothing: MariaDB's writers lock rows, not the database."""

    # -- the claim (claim.py, queue_rows.py) -----------------------------------------------

    def claim_sql(
        self,
        queues: Sequence[str],
        *,
        worker_id: str,  # noqa: ARG002 (the UPDATE that follows writes it)
        limit: int,
        lease_seconds: float,  # noqa: ARG002
        now: datetime | None = None,
        caps: Mapping[str, int] | None = None,
    ) -> tuple[str, dict[str, Any]]:
        """The claim's locking read, as :meth:`_claim_capped` runs it (tests EXPLAIN it):
        one arm per queue, each on the claim index (status, queue, priority DESC,
        scheduled_at, id) from the queue's first runnable row, so nothing is sorted however
        deep the backlog; SKIP LOCKED passes over rows other workers are claiming. Each arm
        takes up to ``limit`` (its cap): the batch is the first ``limit`` rows in the
        queues' order, and the rows read beyond it are let go at the commit."""
        columns = ", ".join(ClaimedJob._fields)
        arms = []
        params: dict[str, Any] = {"now": self.clock(now)}
        for arm, queue in enumerate(queues):
            room = min(limit, (caps or {}).get(queue, limit))
            if room <= 0:
                continue
            params[f"queue_{arm}"] = queue
            arms.append(
                f"SELECT {arm} AS arm, {columns} FROM {self.table} WHERE status = 'pending' "
                f"AND queue = %(queue_{arm})s AND scheduled_at <= {_now()} "
                f"ORDER BY priority DESC, scheduled_at, id LIMIT {int(room)} "
                "FOR UPDATE SKIP LOCKED"
            )
        if len(arms) <= 1:
            return "".join(arms), params  # "": every queue is capped at 0
        return " UNION ALL ".join(f"({arm})" for arm in arms), params

    def _claim_capped(
        self,
        order: Sequence[str],
        caps: dict[str, int],
        worker_id: str,
        limit: int,
        lease_seconds: float,
        now: datetime | None,
    ) -> list[ClaimedJob]:
        # One transaction: the locking read of every queue at once (one round trip however
        # many queues the worker serves), then one UPDATE by primary key. The rows are
        # returned as read, one attempt more.
        sql, params = self.claim_sql(
            order, worker_id=worker_id, limit=limit, lease_seconds=lease_seconds, now=now,
            caps=caps,
        )  # fmt: skip
        if not sql:
            return []
        with (
            transaction.atomic(using=self.connection.alias, savepoint=False),
            self.connection.cursor() as cursor,
        ):
            cursor.execute(sql, params)
            # The queues' order, then the claim index's within each (UNION ALL promises
            # no order of its own).
            rows = sorted(
                cursor.fetchall(), key=lambda row: (row[0], -row[8], str(row[9]), row[1])
            )[:limit]
            if not rows:
                return []
            now_sql = _now()
            cursor.execute(
                f"UPDATE {self.table} SET status = 'processing', attempts = attempts + 1, "
                f"locked_by = %(worker_id)s, locked_at = {now_sql}, started_at = {now_sql}, "
                f"lease_expires_at = {self.later_sql('lease')}, updated_at = {now_sql} "
                f"WHERE id IN ({', '.join(str(int(row[1])) for row in rows)})",
                {"worker_id": worker_id, "now": params["now"], "lease": lease_seconds},
            )
        attempts = ClaimedJob._fields.index("attempts")
        jobs = [
            ClaimedJob._make((*row[1 : attempts + 1], row[attempts + 1] + 1, *row[attempts + 2 :]))
            for row in rows
        ]
        jobs.sort(key=lambda job: (-job.priority, str(job.scheduled_at), job.id))
        return jobs

    def epoch_sql(self) -> str:
        return f"(TIMESTAMPDIFF(MICROSECOND, '1970-01-01', {_now()}) / 1000000.0)"


class MySQLOutcomeOps(MySQLClaimOps):
    """The completion of a batch, cut to the server's packet."""

    def max_statement_bytes(self) -> int:
        """The server's ``max_allowed_packet``: the longest statement it takes (a longer
        one ends the connection, error 1153 then 2006). Read once per connection."""
        self.connection.ensure_connection()
        raw = self.connection.connection
        value = getattr(raw, "sqlq_max_packet", None)
        if value is None:
            with self.connection.cursor() as cursor:
                cursor.execute("SELECT @@max_allowed_packet")
                value = int(cursor.fetchone()[0])
            raw.sqlq_max_packet = value
        return int(value)

    def max_json_bytes(self) -> int:
        """The longest JSON text a statement carries (``db.json_size_limit``): half the
        packet, as the text goes escaped (a quote or backslash doubled), less room for the
        rest of the statement."""
        return max(self.max_statement_bytes() // 2 - STATEMENT_ROOM, 1024)

    # -- outcomes (outcomes.py) ------------------------------------------------------------

    def complete_statuses(
        self,
        finished: Sequence[Finished],
        *,
        worker_id: str,
        now: datetime | None = None,
        unwaited: bool = False,
        skip_locked: bool = False,
    ) -> dict[int, str]:
        # The batch's rows this worker still holds, locked in id order with what decides
        # each one's status (a cancel requested while it ran), then one UPDATE by primary
        # key: the statuses are known without reading the rows again.
        if not finished:
            return {}
        attempts = {f.id: f.attempt for f in finished}
        in_sql, params = self.in_list_sql("id", sorted(attempts), "done")
        where = f"{in_sql} AND status = 'processing' AND locked_by = %(worker_id)s"
        if unwaited:
            where += " AND waited_on IS NULL"
        skip = " SKIP LOCKED" if skip_locked else ""
        statuses: dict[int, str] = {}
        with (
            transaction.atomic(using=self.connection.alias, savepoint=False),
            self.connection.cursor() as cursor,
        ):
            cursor.execute(
                f"SELECT id, attempts, cancel_requested_at IS NULL FROM {self.table} "
                f"WHERE {where} ORDER BY id FOR UPDATE{skip}",
                {"worker_id": worker_id, **params},
            )
            for job_id, attempt, running in cursor.fetchall():
                if attempts.get(int(job_id)) == int(attempt):
                    statuses[int(job_id)] = "completed" if running else "cancelled"
            if not statuses:
                return {}
            results = {f.id: f.result for f in finished if f.id in statuses}
            for chunk in self._by_size(results):
                self._complete_rows(cursor, chunk, now)
        return statuses

    def _by_size(self, results: dict[int, Any]) -> list[list[tuple[int, str | None]]]:
        """The batch's results as JSON text, cut into UPDATEs that each fit in a packet
        (a batch of a hundred 1 MiB results is 100 MiB; the server's default packet 16):
        one UPDATE for a batch of small results, as before."""
        budget = self.max_statement_bytes() - STATEMENT_ROOM
        chunks: list[list[tuple[int, str | None]]] = [[]]
        size = 0
        for job_id, result in results.items():
            text = None if result is None else json.dumps(result)
            cost = 64 + (0 if text is None else 2 * len(text))
            if chunks[-1] and size + cost > budget:
                chunks.append([])
                size = 0
            chunks[-1].append((job_id, text))
            size += cost
        return chunks

    def _complete_rows(
        self, cursor: Any, rows: list[tuple[int, str | None]], now: datetime | None
    ) -> None:
        values: dict[str, Any] = {"now": self.clock(now)}
        result_sql = "NULL"
        cases = []
        for index, (job_id, text) in enumerate(rows):
            if text is not None:
                values[f"r{index}"] = text
                cases.append(f"WHEN {int(job_id)} THEN %(r{index})s")
        if cases:
            result_sql = f"CASE id {' '.join(cases)} ELSE NULL END"
        now_sql = _now()
        cursor.execute(
            f"UPDATE {self.table} SET status = CASE WHEN cancel_requested_at IS NULL "
            f"THEN 'completed' ELSE 'cancelled' END, result = {result_sql}, "
            f"completed_at = {now_sql}, updated_at = {now_sql}, lease_expires_at = NULL "
            f"WHERE id IN ({', '.join(str(job_id) for job_id, _ in rows)})",
            values,
        )


class MySQLOps(MySQLOutcomeOps):
    """The queue's statements in MariaDB's dialect: the hooks they call, in sections named
    after the module that holds each statement (the claim's in :class:`MySQLClaimOps`)."""

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
        key = (type(self), fixed_time, _now(), False)
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

    def lock_jobs(self, job_ids: Sequence[int], statuses: Sequence[str]) -> None:
        if not job_ids:
            return
        in_sql, params = self.in_list_sql("id", sorted(set(job_ids)), "ids")
        status_sql, status_params = self.in_list_sql("status", list(statuses), "statuses")
        with self.connection.cursor() as cursor:
            cursor.execute(
                f"SELECT id FROM {self.table} WHERE {in_sql} AND {status_sql} "
                f"ORDER BY id FOR UPDATE",
                {**params, **status_params},
            )

    # -- upkeep (upkeep.py) ----------------------------------------------------------------

    def promote(self, *, limit: int = 1000, now: datetime | None = None) -> int:
        rows = self.update_returning(
            f"status = 'pending', updated_at = {_now()}",
            f"id IN (SELECT id FROM (SELECT id FROM {self.table} WHERE status = 'scheduled' "
            f"AND scheduled_at <= {_now()} ORDER BY scheduled_at LIMIT {int(limit)}) AS due) "
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
            cursor.execute(
                f"DELETE FROM {self.table} WHERE id IN ({', '.join(map(str, ids))}) AND {where}",
                params,
            )
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
        return _append(entry)

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

    def change_check_interval(self, poll_interval: float) -> float:
        return min(CHANGE_CHECK_INTERVAL, poll_interval)

    def notify(self, queues: Sequence[str]) -> None:
        """A job was made runnable again (not inserted: the newest id does not move): add
        one to the wake-up counter (``sqlq_wake``, migration 0017), seen by idle workers
        once the current transaction commits. Its one row is locked until then: notifiers
        take turns (operators' actions, released dependencies, emitted events; never an
        enqueue)."""
        if not queues:
            return
        try:
            with self.connection.cursor() as cursor:
                cursor.execute("UPDATE sqlq_wake SET n = n + 1 WHERE id = 1")
        except ProgrammingError as exc:
            # Code deployed before its migration: the workers poll meanwhile. (MariaDB rolls
            # back the failed statement alone, not the caller's transaction.)
            if not _wake_table_missing(exc):
                raise

    def data_version(self) -> Any:
        """The newest job's id and the wake-up counter: they change when another connection
        commits a new job, or makes one runnable again (one probe of each primary key, no
        table read)."""
        with self.connection.cursor() as cursor:
            try:
                cursor.execute(
                    f"SELECT (SELECT MAX(id) FROM {self.table}), "
                    "(SELECT n FROM sqlq_wake WHERE id = 1)"
                )
            except ProgrammingError as exc:  # before migration 0017: new jobs only
                if not _wake_table_missing(exc):
                    raise
                cursor.execute(f"SELECT MAX(id), NULL FROM {self.table}")
            return tuple(cursor.fetchone())
