"""PostgreSQL: many workers on many hosts. The claim skips rows other workers are locking
(FOR UPDATE SKIP LOCKED), and NOTIFY wakes idle workers when a transaction that enqueued
commits."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from django.db import connections

from django_sqlq.db.base import QueueOps
from django_sqlq.db.dialect import MAX_ERROR_ENTRIES
from django_sqlq.db.notify import CHANNEL, listen_in_thread
from django_sqlq.db.outcomes import Finished
from django_sqlq.db.queue_rows import MAX_LIMIT_ROOM

_NOW = "COALESCE(%(now)s::timestamptz, statement_timestamp())"


def _later(seconds: str) -> str:
    return f"({_NOW} + make_interval(secs => %({seconds})s::double precision))"


# The last MAX_ERROR_ENTRIES entries (lax mode: fewer when there are fewer).
_KEEP_LAST = f"'$[last - {MAX_ERROR_ENTRIES - 1} to last]'"
_LEASE_ERROR = (
    "jsonb_path_query_array(COALESCE(errors, '[]'::jsonb) || jsonb_build_array(jsonb_build_object("
    "'attempt', attempts, 'worker_id', locked_by, "
    "'exception_class', 'django_sqlq.exceptions.LeaseLostError', "
    f"'message', 'lease expired', 'traceback', '')), {_KEEP_LAST})"
)


# A version 7 UUID (as models.new_uuid): gen_random_uuid()'s (built in since PostgreSQL 13,
# strong randomness) with its first 48 bits replaced by the time in milliseconds, and its
# version nibble turned from 4 (0100) to 7 (0111) by setting bits 52 and 53. PostgreSQL 18
# has uuidv7(); this works from 13 on. clock_timestamp(): each row its own.
_UUID7 = (
    "encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid()) placing "
    "substring(int8send(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint) "
    "FROM 3) FROM 1 FOR 6), 52, 1), 53, 1), 'hex')::uuid"
)


# pg_try_advisory_lock key: one tidy (VACUUM of the jobs table) at a time across workers.
TIDY_LOCK = 0x5351_4C51_7469_6479  # "SQLQtidy"


class PostgreSQLOps(QueueOps):
    """The queue's statements in PostgreSQL's dialect: the hooks they call, in sections
    named after the module that holds each statement."""

    needs_tidy = True

    # -- the fragments every statement uses (dialect.py) -----------------------------------

    def now_sql(self) -> str:
        return _NOW

    def later_sql(self, seconds: str) -> str:
        return _later(seconds)

    def uuid_sql(self) -> str:
        return _UUID7

    def append_error_sql(self, entry: str) -> str:
        return (
            "jsonb_path_query_array("
            f"COALESCE(errors, '[]'::jsonb) || jsonb_build_array(%({entry})s::jsonb), "
            f"{_KEEP_LAST})"
        )

    def json_param_sql(self, name: str) -> str:
        return f"%({name})s::jsonb"

    def float_param_sql(self, name: str) -> str:
        return f"%({name})s::double precision"

    def empty_json_list_sql(self) -> str:
        return "'[]'::jsonb"

    def skip_locked(self) -> str:
        return " FOR UPDATE SKIP LOCKED"

    def in_list_sql(
        self, column: str, values: Sequence[Any], name: str
    ) -> tuple[str, dict[str, Any]]:
        if len(values) == 1:
            # Plain equality lets the planner read the claim index in order (no sort).
            return f"{column} = %({name})s", {name: values[0]}
        return f"{column} = ANY(%({name})s)", {name: list(values)}

    def in_id_order(
        self,
        where: str,
        *,
        table: str | None = None,
        skip_locked: bool = False,
        delete: bool = False,
    ) -> str:
        # The sub-SELECT's rows are locked as they leave its sort (LockRows runs above the
        # Sort), whatever plan the outer statement gets: an UPDATE's own rows are locked in
        # the order its plan reads them (a hash join's, a bitmap scan's), which is not id
        # order. The outer statement then changes rows this transaction already holds.
        # NO KEY UPDATE is the lock an UPDATE that keeps the id takes; a DELETE takes UPDATE.
        table = table or self.table
        strength = "UPDATE" if delete else "NO KEY UPDATE"
        skip = " SKIP LOCKED" if skip_locked else ""
        return (
            f"{table}.id IN (SELECT id FROM {table} WHERE {where} "
            f"ORDER BY id FOR {strength}{skip})"
        )

    # -- the claim (claim.py, queue_rows.py) -----------------------------------------------

    def claim_ids_sql(
        self, queues: Sequence[str], caps: Mapping[str, int] | None = None
    ) -> tuple[str, dict[str, Any]]:
        # One index scan per queue (LATERAL), each in the claim index's order and skipping
        # rows other workers hold; the nested loop reads the queues in the array's order
        # and stops once ``limit`` rows are locked, so later queues are not even read. One
        # queue needs no loop (and plans about 0.1 ms quicker without it).
        if caps:
            return self._capped_claim_ids_sql(queues, caps)
        if len(queues) == 1:
            sql = (
                f"SELECT id FROM {self.table} WHERE status = 'pending' AND queue = %(queue)s "
                f"AND scheduled_at <= {_NOW} "
                f"ORDER BY priority DESC, scheduled_at, id LIMIT %(limit)s FOR UPDATE SKIP LOCKED"
            )
            return sql, {"queue": queues[0]}
        sql = (
            f"SELECT picked.id FROM unnest(%(queues)s::text[]) WITH ORDINALITY AS q(name, n) "
            f"CROSS JOIN LATERAL (SELECT id FROM {self.table} WHERE status = 'pending' "
            f"AND queue = q.name AND scheduled_at <= {_NOW} "
            f"ORDER BY priority DESC, scheduled_at, id LIMIT %(limit)s FOR UPDATE SKIP LOCKED) "
            f"AS picked LIMIT %(limit)s"
        )
        return sql, {"queues": list(queues)}

    def _capped_claim_ids_sql(
        self, queues: Sequence[str], caps: Mapping[str, int]
    ) -> tuple[str, dict[str, Any]]:
        # The same loop, each queue with its own LIMIT (a lateral reference to its cap).
        sql = (
            f"SELECT picked.id FROM unnest(%(queues)s::text[], %(caps)s::integer[]) "
            f"WITH ORDINALITY AS q(name, cap, n) "
            f"CROSS JOIN LATERAL (SELECT id FROM {self.table} WHERE status = 'pending' "
            f"AND queue = q.name AND scheduled_at <= {_NOW} "
            f"ORDER BY priority DESC, scheduled_at, id LIMIT q.cap FOR UPDATE SKIP LOCKED) "
            f"AS picked LIMIT %(limit)s"
        )
        return sql, {
            "queues": list(queues),
            "caps": [caps.get(name, MAX_LIMIT_ROOM) for name in queues],
        }

    def epoch_sql(self) -> str:
        return f"EXTRACT(EPOCH FROM {_NOW})::double precision"

    # -- new jobs (insert.py) --------------------------------------------------------------

    def payloads_sql(self, payloads: Sequence[str]) -> tuple[str, str, str, Any]:
        return (
            "jsonb_array_elements(%(payloads)s::jsonb) WITH ORDINALITY AS p(value, n)",
            "p.value",
            "p.n",
            "[" + ",".join(payloads) + "]",
        )

    def with_notify(self, insert_sql: str) -> str:
        # pg_notify is transactional (delivered on commit), and PostgreSQL folds identical
        # notifications of one transaction into one, so one per row costs nothing extra.
        return (
            f"WITH inserted AS ({insert_sql}, queue) "
            f"SELECT id, scheduled_at, created_at, uuid, pg_notify('{CHANNEL}', queue) "
            f"FROM inserted"
        )

    # -- outcomes (outcomes.py) ------------------------------------------------------------

    def finished_rows_sql(
        self, finished: Sequence[Finished]
    ) -> tuple[str, dict[str, str], dict[str, Any]]:
        source = (
            "unnest(%(done_ids)s::bigint[], %(done_attempts)s::integer[], "
            "%(done_results)s::jsonb[]) AS done(id, attempt, result)"
        )
        columns = {"id": "done.id", "attempt": "done.attempt", "result": "done.result"}
        return (
            source,
            columns,
            {
                "done_ids": [f.id for f in finished],
                "done_attempts": [f.attempt for f in finished],
                "done_results": [
                    None if f.result is None else json.dumps(f.result) for f in finished
                ],
            },
        )

    def finished_lock_sql(self, *, unwaited: bool, skip_locked: bool) -> str:
        # The batch's rows by their ids (the primary key), whatever the statistics say:
        # ``status || ''`` is an expression no index covers. Driven from the lease index's
        # "processing" rows instead, a completion read every running job once per job of
        # its batch once a VACUUM without ANALYZE had updated the table's size (a drain at
        # 0.4-0.6x).
        where = (
            "id = ANY(%(done_ids)s) AND (status || '') = 'processing' "
            "AND locked_by = %(worker_id)s"
        )
        if unwaited:
            where += " AND waited_on IS NULL"
        return f"AND {self.in_id_order(where, skip_locked=skip_locked)} "

    # -- workflows (blockers.py) -----------------------------------------------------------

    def lock_jobs(self, job_ids: Sequence[int], statuses: Sequence[str]) -> list[int] | None:
        if not job_ids:
            return []
        with self.connection.cursor() as cursor:
            cursor.execute(
                f"SELECT id FROM {self.table} WHERE id = ANY(%(ids)s) "
                f"AND status = ANY(%(statuses)s) ORDER BY id FOR NO KEY UPDATE",
                {"ids": sorted(set(job_ids)), "statuses": list(statuses)},
            )
            return [int(row[0]) for row in cursor.fetchall()]

    # -- upkeep (upkeep.py) ----------------------------------------------------------------

    def with_promote_notify(self, update_sql: str) -> str:
        # Idle workers of the promoted jobs' queues wake on commit, as after an enqueue.
        return (
            f"WITH promoted AS ({update_sql}) "
            f"SELECT queue, pg_notify('{CHANNEL}', queue) FROM promoted"
        )

    def seconds_between_sql(self, later: str, earlier: str) -> str:
        return f"EXTRACT(EPOCH FROM ({later} - {earlier}))"

    def lease_error_sql(self) -> str:
        return _LEASE_ERROR

    def tidy(self) -> bool:
        # Every claimed job leaves a dead entry in the claim index until VACUUM removes it,
        # and every claim walks the dead entries before the first live one: during a burst
        # the claim slows down with each job done (0.28x after 90,000). VACUUM (concurrent
        # with claims and writes) removes them; INDEX_CLEANUP ON, because PostgreSQL skips
        # the indexes when few heap pages hold dead rows, which is the case on a table of
        # many finished jobs. One worker at a time (an advisory lock), never waiting for a
        # lock (SKIP_LOCKED: an autovacuum already at work is enough).
        with self.connection.cursor() as cursor:
            cursor.execute("SELECT pg_try_advisory_lock(%s)", [TIDY_LOCK])
            if not cursor.fetchone()[0]:
                return False
            try:
                cursor.execute(f"VACUUM (INDEX_CLEANUP ON, SKIP_LOCKED) {self.table}")
            finally:
                cursor.execute("SELECT pg_advisory_unlock(%s)", [TIDY_LOCK])
        return True

    # -- wake-ups (notify.py) --------------------------------------------------------------

    def notify(self, queues: Sequence[str]) -> None:
        # NOTIFY is transactional: it is delivered when (and only if) the enqueue commits.
        with self.connection.cursor() as cursor:
            for queue in sorted(set(queues)):
                cursor.execute("SELECT pg_notify(%s, %s)", [CHANNEL, queue])

    def listen(
        self,
        *,
        queues: Sequence[str] | None,
        wake: Callable[[], None],
        stop: threading.Event,
        logger: logging.Logger,
        alias: str | None = None,
        probe: Callable[[str], None] | None = None,
    ) -> threading.Thread | None:
        connection = connections[alias] if alias is not None else self.connection
        return listen_in_thread(
            connection, queues=queues, wake=wake, stop=stop, logger=logger, probe=probe
        )


def server_identity(connection: Any) -> tuple[str, str]:
    """(database name, server start time): equal for two connections to one database,
    whatever pooler or address is between them (for the LISTEN_DATABASE check)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_database(), pg_postmaster_start_time()::text")
        name, started = cursor.fetchone()
    return str(name), str(started)
