"""MariaDB's statements on every job's path (``django_sqlq.db.mysql``'s dialect): the claim
and the completion of a batch, and the SQL pieces the rest of the dialect shares.

See ``django_sqlq.db.mysql`` for how MariaDB differs from the other engines.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import transaction

from django_sqlq.db.base import QueueOps
from django_sqlq.db.columns import ClaimedJob
from django_sqlq.db.dialect import MAX_ERROR_ENTRIES, named_in_list
from django_sqlq.db.outcomes import Finished

#: Bytes of a statement kept for what is not JSON text (SQL, ids, other values), within
#: the server's max_allowed_packet.
STATEMENT_ROOM = 64 * 1024

_NOW_UTC = "COALESCE(CAST(%(now)s AS DATETIME(6)), UTC_TIMESTAMP(6))"
_NOW_LOCAL = "COALESCE(CAST(%(now)s AS DATETIME(6)), NOW(6))"


def server_now() -> str:
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


def append_error(entry: str) -> str:
    return _keep_last(f"JSON_ARRAY_APPEND(COALESCE(errors, '[]'), '$', JSON_COMPACT({entry}))")


#: The claim's index on MariaDB (migration 0015): status, queue, priority DESC,
#: scheduled_at, id.
CLAIM_INDEX = "sqlq_job_claim_idx"


def by_id(table: str, where: str) -> str:
    """``table`` as a locking read names it: through its primary key when ``where`` leads
    with the rows' ids (``id = ...``, ``id IN (...)``; the queue's statements write them
    first). MariaDB's planner may prefer an index led by ``status`` when few rows have
    that status (a few processing or blocked jobs: ``status = 'processing' AND id = 7`` is
    one entry of ``sqlq_job_failed_idx``). A locking read through it locks the index's
    entry, then the row; an UPDATE by primary key that changes the status locks the row,
    then that entry: each held what the other waited for (a deadlock, 1213, between a
    worker's completion and ``cancel()``). Through the primary key, the row comes first.
    (A single-table DELETE takes no index hint: those lock their rows here first. Ids
    picked by a sub-SELECT are left to the planner: it reads the sub-SELECT first.)"""
    if where.startswith(("id =", "id IN")) and not where.startswith("id IN (SELECT"):
        return f"{table} FORCE INDEX (PRIMARY)"
    return table


class MySQLClaimOps(QueueOps):
    """MariaDB's fragments, its UPDATE that returns rows, and the claim."""

    #: JSON_VALID (the JSON columns' CHECK) refuses text nested deeper.
    max_json_depth = 31

    # -- the fragments every statement uses (dialect.py) -----------------------------------

    def now_sql(self) -> str:
        return server_now()

    def later_sql(self, seconds: str) -> str:
        rounded = f"CAST(ROUND(%({seconds})s * 1000000) AS SIGNED)"
        return f"({server_now()} + INTERVAL {rounded} MICROSECOND)"

    def uuid_sql(self) -> str:
        return _UUID7

    def append_error_sql(self, entry: str) -> str:
        return append_error(f"%({entry})s")

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
            if by_id(table, where) == table and not skip_locked:
                # Rows picked by other columns (the reaper's expired leases): found by a
                # plain read, then locked through the primary key, the condition checked
                # again. A locking read through an index led by status would hold the
                # entries it passed while it waited for a row a completion holds, and
                # that completion needs one of them (see by_id()). One that skips locked
                # rows never waits.
                cursor.execute(f"SELECT id FROM {table} WHERE {where} ORDER BY id", params)
                found = ", ".join(str(int(row[0])) for row in cursor.fetchall())
                if not found:
                    return []
                where = f"id IN ({found}) AND ({where})"
            cursor.execute(
                f"SELECT id FROM {by_id(table, where)} WHERE {where} ORDER BY id FOR UPDATE{skip}",
                params,
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
        probe: bool = False,
    ) -> tuple[str, dict[str, Any]]:
        """The claim's locking read, as :meth:`_claim_capped` runs it (tests EXPLAIN it):
        one arm per queue, each on the claim index (status, queue, priority DESC,
        scheduled_at, id) from the queue's first runnable row, so nothing is sorted however
        deep the backlog; SKIP LOCKED passes over rows other workers are claiming. Each arm
        takes up to ``limit`` (its cap): the batch is the first ``limit`` rows in the
        queues' order, and the rows read beyond it are let go at the commit.

        The index is named: a row SKIP LOCKED passes over keeps the lock on the index
        entry that led to it until the commit. Two claims through two indexes (the
        planner took (status, scheduled_at) for one when few rows were pending) each held
        an entry of a row the other had claimed, whose UPDATE needs it: a deadlock
        (1213). Through one index, the claim that locks an entry first is the only one
        that reaches its row.

        ``probe``: the same arms reading ids only, locking nothing (the index holds them):
        how many rows each queue has to give, so that the locking read takes no more."""
        columns = "id" if probe else ", ".join(ClaimedJob._fields)
        lock = "" if probe else " FOR UPDATE SKIP LOCKED"
        arms = []
        params: dict[str, Any] = {"now": self.clock(now)}
        for arm, queue in enumerate(queues):
            room = min(limit, (caps or {}).get(queue, limit))
            if room <= 0:
                continue
            params[f"queue_{arm}"] = queue
            arms.append(
                f"SELECT {arm} AS arm, {columns} FROM {self.table} "
                f"FORCE INDEX ({CLAIM_INDEX}) WHERE status = 'pending' "
                f"AND queue = %(queue_{arm})s AND scheduled_at <= {server_now()} "
                f"ORDER BY priority DESC, scheduled_at, id LIMIT {int(room)}{lock}"
            )
        if probe and arms:
            # An arm that reads nothing (an impossible WHERE) but names every column the
            # claim reads: the probe fails as the claim would on a table that lacks one (a
            # migration faked as applied; a --burst worker exits on that error).
            arms.append(
                f"SELECT -1 AS arm, id FROM {self.table} WHERE 1 = 0 AND "
                f"CONCAT_WS('', {', '.join(ClaimedJob._fields)}) IS NULL"
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
        # returned as read, one attempt more. Over several queues, a read of ids first
        # (locking nothing) says how many rows each queue gives to the batch: each arm of
        # the locking read reads and locks no more than its share, where it would take a
        # whole batch (and with 20 queues holding work, lock 20 batches to keep one).
        with (
            transaction.atomic(using=self.connection.alias, savepoint=False),
            self.connection.cursor() as cursor,
        ):
            shares = caps
            if sum(1 for queue in order if caps.get(queue, limit) > 0) > 1:
                probed = self._shares(cursor, order, caps, limit, now)
                if probed is None:
                    return []  # nothing runnable: an idle worker's claim is one statement
                shares = probed
            sql, params = self.claim_sql(
                order, worker_id=worker_id, limit=limit, lease_seconds=lease_seconds, now=now,
                caps=shares,
            )  # fmt: skip
            if not sql:
                return []
            cursor.execute(sql, params)
            found = {int(row[1]): row for row in cursor.fetchall()}
            if shares is not caps and len(found) < sum(shares.values()):
                # Rows the probe counted were being claimed by other workers, and the
                # shares were spent on them: read every queue for its whole room, as
                # without the probe (the rows locked above come back again: one each).
                sql, params = self.claim_sql(
                    order, worker_id=worker_id, limit=limit, lease_seconds=lease_seconds,
                    now=now, caps=caps,
                )  # fmt: skip
                cursor.execute(sql, params)
                found.update((int(row[1]), row) for row in cursor.fetchall())
            # The queues' order, then the claim index's within each (UNION ALL promises
            # no order of its own).
            rows = sorted(found.values(), key=lambda row: (row[0], -row[8], str(row[9]), row[1]))[
                :limit
            ]
            if not rows:
                return []
            now_sql = server_now()
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

    def _shares(
        self,
        cursor: Any,
        order: Sequence[str],
        caps: Mapping[str, int],
        limit: int,
        now: datetime | None,
    ) -> dict[str, int] | None:
        """Each queue's share of the batch: its runnable rows (the probe), taken in the
        queues' order until ``limit``; None when no queue has any. Rows other workers are
        claiming count too (a plain read sees them pending); the locking read passes over
        them to the next ones."""
        sql, params = self.claim_sql(
            order, worker_id="", limit=limit, lease_seconds=0, now=now, caps=caps, probe=True
        )
        found: dict[int, int] = {}
        if sql:
            cursor.execute(sql, params)
            for arm, _id in cursor.fetchall():
                found[int(arm)] = found.get(int(arm), 0) + 1
        if not found:
            return None
        shares: dict[str, int] = {}
        left = limit
        for arm, queue in enumerate(order):
            shares[queue] = min(found.get(arm, 0), left)
            left -= shares[queue]
        return shares

    def epoch_sql(self) -> str:
        return f"(TIMESTAMPDIFF(MICROSECOND, '1970-01-01', {server_now()}) / 1000000.0)"


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
                "SELECT id, attempts, cancel_requested_at IS NULL "
                f"FROM {by_id(self.table, where)} WHERE {where} ORDER BY id FOR UPDATE{skip}",
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
        now_sql = server_now()
        cursor.execute(
            f"UPDATE {self.table} SET status = CASE WHEN cancel_requested_at IS NULL "
            f"THEN 'completed' ELSE 'cancelled' END, result = {result_sql}, "
            f"completed_at = {now_sql}, updated_at = {now_sql}, lease_expires_at = NULL "
            f"WHERE id IN ({', '.join(str(job_id) for job_id, _ in rows)})",
            values,
        )
