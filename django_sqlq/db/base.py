"""The queue operations every engine implements, with the SQL they share.

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

import json
import logging
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, NamedTuple

from django.conf import settings
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models.functions import Now
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from django_sqlq import statuses
from django_sqlq.db.columns import FIELD_COLUMNS, INSERT_COLUMNS, JOB_COLUMNS, New
from django_sqlq.db.columns import ClaimedJob as ClaimedJob  # its home until it moved
from django_sqlq.limits import QueueLimit

#: A queue's room under global limits when it has neither kind (never the smaller value).
MAX_LIMIT_ROOM = 2**31 - 1


class Finished(NamedTuple):
    """The outcome of one attempt, ready to be written."""

    id: int
    attempt: int
    result: Any = None


def read_starts(value: Any) -> list[float]:
    """``recent_starts`` as read by raw SQL (JSON text: Django does not decode raw JSON)."""
    starts = json.loads(value) if isinstance(value, (str, bytes)) else value
    return sorted(float(t) for t in starts or [] if isinstance(t, (int, float)))


def _in(values: Sequence[str]) -> str:
    return ", ".join(f"'{value}'" for value in values)


#: The conflict target of a unique enqueue: the columns and the condition of the partial
#: unique index ``sqlq_job_unique_key_live`` (``Job.Meta.constraints``), as its migration
#: wrote it, so that both engines infer that index from it.
UNIQUE_LIVE_SQL = (
    f"(unique_key) WHERE (status IN ({_in(statuses.LIVE)}) AND unique_key IS NOT NULL)"
)
#: Finished jobs of the key ``%(unique_key)s`` that finished after ``{since}``: the jobs
#: ``unique_for`` covers (completed, failed or cancelled, by ``completed_at``).
#: The key is cast to the column's type, as ``INSERT ... SELECT`` types it: with
#: psycopg's server-side binding one parameter must have one type.
RECENTLY_FINISHED_SQL = (
    "SELECT 1 FROM {table} WHERE unique_key = CAST(%(unique_key)s AS VARCHAR(255)) "
    f"AND status IN ({_in(statuses.FINISHED)}) AND completed_at > {{since}}"
)


#: Enqueue options an INSERT writes as NULL when the fields leave them out.
OPTIONAL_FIELDS = ("unique_key", "trace", "chain_id", "chain_index", "waited_on")

# ``errors`` keeps the entries of the last attempts only: a job retried for ever (a huge
# max_attempts) would otherwise grow its row by an entry (up to ~68 KB) per attempt.
MAX_ERROR_ENTRIES = 50

#: The most values one ``IN (...)`` list of the workflows' statements holds (SQLite takes
#: at most 32,766 parameters in a statement).
IN_CHUNK = 500


class QueueOps:
    """The queue's writes, on one connection. Subclasses fill in the engine's dialect."""

    table = "sqlq_job"
    worker_table = "sqlq_worker"
    #: Whether workers should call :meth:`tidy` after many claims.
    needs_tidy = False

    def __init__(self, connection: BaseDatabaseWrapper) -> None:
        self.connection = connection

    # -- dialect ------------------------------------------------------------------------

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

    def raw_datetime(self, column: str) -> str:
        """``column`` (a datetime) as the driver returns it unconverted: for values that are
        only sorted, or converted once per distinct value rather than once per row."""
        return column

    def clock(self, now: datetime | None) -> Any:
        if now is None:
            return None
        return self.connection.ops.adapt_datetimefield_value(now)

    # -- operations ---------------------------------------------------------------------

    def claim(
        self,
        *,
        queues: Sequence[str] | None,
        worker_id: str,
        limit: int,
        lease_seconds: float,
        now: datetime | None = None,
        exclude_queues: Sequence[str] = (),
        turn: int = 0,
        caps: Mapping[str, int] | None = None,
        limits: Mapping[str, QueueLimit] | None = None,
    ) -> list[ClaimedJob]:
        """Claim up to ``limit`` runnable jobs in one ``UPDATE ... RETURNING``.

        Each queue is read on its own, in the claim index's order (priority, then
        ``scheduled_at``, then id), so nothing is sorted however deep the backlog. Queues
        take turns: the batch is filled from the queues in order, starting at the
        ``turn``-th (the worker counts its claims), so a queue with a few jobs is served
        within one round however many wait in the others.

        ``queues=None`` serves every queue holding pending jobs (found through the claim
        index) but ``exclude_queues``. Returned in (priority, ``scheduled_at``, id) order.

        ``caps``: at most this many jobs of a queue (the worker's ``--queue NAME:N`` room).
        ``limits``: global limits (``SQLQ["QUEUE_LIMITS"]``); a claim that reads a limited
        queue runs in a transaction that first locks the limited queues' rows, then counts
        what they run and started (see :meth:`claim_limited`). Without either, the claim
        is the one statement above.
        """
        if limit < 1:
            return []
        order = self.claim_queues(queues, exclude_queues, turn=turn)
        if not order:
            return []
        if caps or limits:
            return self.claim_limited(
                order,
                worker_id=worker_id,
                limit=limit,
                lease_seconds=lease_seconds,
                now=now,
                caps=caps or {},
                limits=limits or {},
            )
        sql, params = self.claim_sql(
            order, worker_id=worker_id, limit=limit, lease_seconds=lease_seconds, now=now
        )
        return self._run_claim(sql, params)

    def _run_claim(self, sql: str, params: dict[str, Any]) -> list[ClaimedJob]:
        with self.connection.cursor() as cursor:
            cursor.execute(sql, params)
            rows = cursor.fetchall()
        # The columns are in ClaimedJob's order; scheduled_at only orders the batch.
        jobs = list(map(ClaimedJob._make, rows))
        jobs.sort(key=lambda job: (-job.priority, str(job.scheduled_at), job.id))
        return jobs

    def claim_queues(
        self, queues: Sequence[str] | None, exclude_queues: Sequence[str] = (), *, turn: int = 0
    ) -> list[str]:
        """The queues one claim reads, in the order it reads them: ``queues`` (else every
        queue with pending jobs) less ``exclude_queues``, rotated by ``turn``."""
        names = list(dict.fromkeys(queues)) if queues is not None else self.pending_queues()
        if exclude_queues:
            excluded = set(exclude_queues)
            names = [name for name in names if name not in excluded]
        if len(names) > 1:
            start = turn % len(names)
            names = names[start:] + names[:start]
        return names

    def pending_queues(self) -> list[str]:
        """The distinct queues of the pending jobs, in name order: a skip scan of the claim
        index (one index probe per queue), not a read of every pending row."""
        sql = (
            f"WITH RECURSIVE q(name) AS ("
            f"SELECT MIN(queue) FROM {self.table} WHERE status = 'pending' "
            f"UNION ALL SELECT (SELECT MIN(queue) FROM {self.table} "
            f"WHERE status = 'pending' AND queue > q.name) FROM q WHERE q.name IS NOT NULL"
            f") SELECT name FROM q WHERE name IS NOT NULL"
        )
        with self.connection.cursor() as cursor:
            cursor.execute(sql)
            return [row[0] for row in cursor.fetchall()]

    def claim_sql(
        self,
        queues: Sequence[str],
        *,
        worker_id: str,
        limit: int,
        lease_seconds: float,
        now: datetime | None = None,
        caps: Mapping[str, int] | None = None,
    ) -> tuple[str, dict[str, Any]]:
        """The claim statement and its parameters, exactly as :meth:`claim` runs them, for
        ``queues`` read in that order (tests EXPLAIN it); ``caps``: at most that many jobs
        of those queues."""
        now_sql = self.now_sql()
        picked_sql, picked_params = (
            self.claim_ids_sql(queues, caps=caps) if caps else self.claim_ids_sql(queues)
        )
        # ClaimedJob's fields, in order; scheduled_at only orders the batch.
        columns = ", ".join(
            self.raw_datetime(name) if name == "scheduled_at" else name
            for name in ClaimedJob._fields
        )
        sql = (
            f"UPDATE {self.table} SET status = 'processing', attempts = attempts + 1, "
            f"locked_by = %(worker_id)s, locked_at = {now_sql}, started_at = {now_sql}, "
            f"lease_expires_at = {self.later_sql('lease')}, updated_at = {now_sql} "
            f"WHERE id IN ({picked_sql}) "
            f"RETURNING {columns}"
        )
        params = {
            "worker_id": worker_id,
            "now": self.clock(now),
            "lease": lease_seconds,
            "limit": limit,
            **picked_params,
        }
        return sql, params

    def claim_ids_sql(
        self, queues: Sequence[str], caps: Mapping[str, int] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """A SELECT of the ids to claim: up to ``%(limit)s`` runnable jobs (by ``%(now)s``),
        each queue's read in the claim index's order, the queues in the order given (a queue
        in ``caps``: at most that many of it); and the parameters that name the queues."""
        raise NotImplementedError

    # -- per-queue limits (issue 15) ----------------------------------------------------

    queue_table = "sqlq_queue"

    def claim_limited(
        self,
        order: Sequence[str],
        *,
        worker_id: str,
        limit: int,
        lease_seconds: float,
        now: datetime | None,
        caps: Mapping[str, int],
        limits: Mapping[str, QueueLimit],
    ) -> list[ClaimedJob]:
        """The claim of :meth:`claim` for ``order`` when some queues are limited.

        ``caps`` (this worker's room per queue) only lowers that queue's share of the batch.
        If a queue of ``order`` has a global limit, the claim runs in one transaction:
        lock the limited queues' rows in ``sqlq_queue`` (so that claims of a limited queue
        take turns across all workers: SQLite's write lock, PostgreSQL's row locks), count
        the queue's running jobs (``concurrency``) and the starts in its rate window (the
        row's ``recent_starts``), claim at most what is left, and record the new starts.
        The counts are read after the lock, so no other claim can slip in between."""
        caps = {name: cap for name, cap in caps.items() if name in order}
        limited = sorted(name for name in order if name in limits)
        if not limited:
            return self._claim_capped(order, caps, worker_id, limit, lease_seconds, now)
        from django.db import transaction

        with transaction.atomic(using=self.connection.alias, savepoint=False):
            starts, clock = self.lock_queue_rows(limited, now=now)
            missing = [name for name in limited if name not in starts]
            if missing:  # its row was deleted: none of it this time, a row for the next
                self.ensure_queue_rows(missing)
            running = self.running_counts(
                [name for name in limited if limits[name].concurrency is not None]
            )
            for name in limited:
                room = self.global_room(limits[name], running.get(name, 0), starts, name, clock)
                caps[name] = min(caps.get(name, limit), room)
            jobs = self._claim_capped(order, caps, worker_id, limit, lease_seconds, now)
            claimed: dict[str, int] = {}
            for job in jobs:
                claimed[job.queue] = claimed.get(job.queue, 0) + 1
            for name, count in claimed.items():
                rate = limits[name].rate if name in limits else None
                if rate is not None and clock is not None:
                    window = [*starts.get(name, []), *([clock] * count)][-rate:]
                    self.save_recent_starts(name, window)
        return jobs

    def _claim_capped(
        self,
        order: Sequence[str],
        caps: dict[str, int],
        worker_id: str,
        limit: int,
        lease_seconds: float,
        now: datetime | None,
    ) -> list[ClaimedJob]:
        order = [name for name in order if caps.get(name, limit) > 0]
        if not order:
            return []
        caps = {name: min(cap, limit) for name, cap in caps.items() if name in order}
        sql, params = self.claim_sql(
            order,
            worker_id=worker_id,
            limit=limit,
            lease_seconds=lease_seconds,
            now=now,
            caps=caps or None,
        )
        return self._run_claim(sql, params)

    @staticmethod
    def global_room(
        limit: QueueLimit,
        running: int,
        starts: Mapping[str, list[float]],
        name: str,
        clock: float | None,
    ) -> int:
        """How many jobs of queue ``name`` may start now under its global ``limit``."""
        if name not in starts:
            return 0  # no row to lock (deleted meanwhile): claim none of it this time
        room = MAX_LIMIT_ROOM
        if limit.concurrency is not None:
            room = min(room, limit.concurrency - running)
        if limit.rate is not None and limit.period is not None and clock is not None:
            since = clock - limit.period
            recent = sum(1 for started in starts[name] if started > since)
            room = min(room, limit.rate - recent)
        return max(room, 0)

    def epoch_sql(self) -> str:
        """SQL for now (the ``now`` parameter or the database's clock) in seconds since the
        epoch, as a floating-point number."""
        raise NotImplementedError

    def lock_queue_rows(
        self, names: Sequence[str], *, now: datetime | None = None
    ) -> tuple[dict[str, list[float]], float | None]:
        """Lock the rows of ``names`` in ``sqlq_queue`` until the transaction ends, and read
        their recent starts; and now, by the database's clock (seconds since the epoch).
        A queue without a row is left out (``ensure_queue_rows`` writes them)."""
        raise NotImplementedError

    def running_counts(self, names: Sequence[str]) -> dict[str, int]:
        """Processing jobs per queue of ``names`` (the processing rows' partial index)."""
        if not names:
            return {}
        in_sql, params = self.in_list_sql("queue", list(names), "running")
        sql = (
            f"SELECT queue, COUNT(*) FROM {self.table} "
            f"WHERE status = 'processing' AND {in_sql} GROUP BY queue"
        )
        with self.connection.cursor() as cursor:
            cursor.execute(sql, params)
            return {row[0]: int(row[1]) for row in cursor.fetchall()}

    def save_recent_starts(self, name: str, starts: Sequence[float]) -> None:
        with self.connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {self.queue_table} SET recent_starts = "
                f"{self.json_param_sql('starts')} WHERE name = %(name)s",
                {"starts": json.dumps(list(starts)), "name": name},
            )

    def ensure_queue_rows(self, names: Sequence[str]) -> None:
        """Write a row in ``sqlq_queue`` for each of ``names`` that has none (running, no
        starts), leaving existing rows alone."""
        for name in sorted(set(names)):
            with self.connection.cursor() as cursor:
                cursor.execute(
                    f"INSERT INTO {self.queue_table} (name, paused, updated_at, recent_starts) "
                    f"VALUES (%(name)s, %(paused)s, {self.now_sql()}, "
                    f"{self.empty_json_list_sql()}) ON CONFLICT (name) DO NOTHING",
                    {"name": name, "paused": False, "now": None},
                )

    def take_write_lock(self) -> None:
        """At the start of a transaction that will write, take what a write needs up front
        (an atomic handler's: SQLite's write lock). Nothing on engines whose writers do not
        exclude each other."""

    def paused_queues(self) -> list[str]:
        """The names of the paused queues (a read of the small ``sqlq_queue`` table)."""
        with self.connection.cursor() as cursor:
            cursor.execute(
                f"SELECT name FROM {self.queue_table} WHERE paused = %(yes)s", {"yes": True}
            )
            return [row[0] for row in cursor.fetchall()]

    def complete(
        self, finished: Sequence[Finished], *, worker_id: str, now: datetime | None = None
    ) -> list[int]:
        """Mark many attempts completed in one statement. Returns the ids written: an
        attempt this worker no longer held (its lease ran out) is fenced out."""
        return list(self.complete_statuses(finished, worker_id=worker_id, now=now))

    def complete_statuses(
        self,
        finished: Sequence[Finished],
        *,
        worker_id: str,
        now: datetime | None = None,
        unwaited: bool = False,
        skip_locked: bool = False,
    ) -> dict[int, str]:
        """:meth:`complete`, returning each written job's new status: ``completed``, or
        ``cancelled`` for a job whose cancel was requested while it ran (the handler ran to
        its end, but the job was cancelled: its outcome is recorded as such).
        ``unwaited``: only jobs no other job waits for (``waited_on`` unset); the others
        are left out, as a lost job is, for the caller to complete with their waiters.
        ``skip_locked``: a job another transaction holds right now (an enqueue about to
        depend on it, an operator) is left out too, rather than waited for with the others
        held (see :meth:`in_id_order`)."""
        if not finished:
            return {}
        now_sql = self.now_sql()
        source, columns, source_params = self.finished_rows_sql(finished)
        status_sql = (
            f"CASE WHEN {self.table}.cancel_requested_at IS NULL THEN 'completed' "
            f"ELSE 'cancelled' END"
        )
        sql = (
            f"UPDATE {self.table} SET status = {status_sql}, result = {columns['result']}, "
            f"completed_at = {now_sql}, updated_at = {now_sql}, lease_expires_at = NULL "
            f"FROM {source} "
            f"WHERE {self.table}.id = {columns['id']} "
            f"AND {self.table}.attempts = {columns['attempt']} "
            f"AND {self.unindexed(f'{self.table}.status')} = 'processing' "
            f"AND {self.table}.locked_by = %(worker_id)s "
            f"{f'AND {self.table}.waited_on IS NULL ' if unwaited else ''}"
            f"{self.finished_lock_sql(unwaited=unwaited, skip_locked=skip_locked)}"
            f"RETURNING {self.table}.id, {self.table}.status"
        )
        params = {"now": self.clock(now), "worker_id": worker_id, **source_params}
        with self.connection.cursor() as cursor:
            cursor.execute(sql, params)
            return {row[0]: str(row[1]) for row in cursor.fetchall()}

    def finished_lock_sql(
        self,
        *,
        unwaited: bool,  # noqa: ARG002 (for engines with row locks)
        skip_locked: bool,  # noqa: ARG002
    ) -> str:
        """What :meth:`complete_statuses` adds to its WHERE to take its rows in id order
        (:meth:`in_id_order`), with the parameters of :meth:`finished_rows_sql`. Nothing
        here (SQLite)."""
        return ""

    # -- workflows (django_sqlq.workflows): chains and jobs that wait for others ----------

    blocker_table = "sqlq_job_blocker"

    def mark_waited(self, job_ids: Sequence[int]) -> dict[int, tuple[str, int | None]]:
        """Mark the jobs ``job_ids`` as waited for (``waited_on``: their completion then
        takes the path that releases their waiters) and return {id: (status, chain_id)} of
        those that exist. The UPDATE locks their rows until the caller's transaction ends
        (PostgreSQL), in id order: a completion of one of them waits for the enqueue that
        is about to depend on it, then sees the mark and the blocker rows."""
        found: dict[int, tuple[str, int | None]] = {}
        ids = sorted(set(job_ids))
        for start in range(0, len(ids), IN_CHUNK):
            in_sql, params = self.in_list_sql("id", ids[start : start + IN_CHUNK], "ids")
            with self.connection.cursor() as cursor:
                cursor.execute(
                    f"UPDATE {self.table} SET waited_on = %(yes)s "
                    f"WHERE {self.in_id_order(in_sql)} "
                    f"RETURNING id, status, chain_id",
                    {**params, "yes": True},
                )
                found.update({row[0]: (str(row[1]), row[2]) for row in cursor.fetchall()})
        return found

    def chain_last_steps(self, roots: Sequence[int]) -> dict[int, int]:
        """{root: id of its last step written so far} for the chains ``roots`` that have
        more than their first job (a chain's steps are written one after another, so its
        last step has its highest id). Not locked: see :meth:`mark_waited`. One statement
        per chunk of roots, on the chains' index."""
        lasts: dict[int, int] = {}
        ids = sorted(set(roots))
        for start in range(0, len(ids), IN_CHUNK):
            in_sql, params = self.in_list_sql("chain_id", ids[start : start + IN_CHUNK], "roots")
            with self.connection.cursor() as cursor:
                cursor.execute(
                    f"SELECT chain_id, MAX(id) FROM {self.table} WHERE {in_sql} GROUP BY chain_id",
                    params,
                )
                lasts.update((int(row[0]), int(row[1])) for row in cursor.fetchall())
        return lasts

    def add_blockers(
        self,
        job_id: int,
        blockers: Sequence[tuple[int, bool]],
        *,
        depends_on: list[dict[str, int]],
        policy: str,
    ) -> None:
        """Make the new job ``job_id`` wait: one blocker row per (id, chain) in ``blockers``,
        and the job ``blocked`` with that many left. With no blockers, it keeps its status
        and only records what it depended on."""
        with self.connection.cursor() as cursor:
            for start in range(0, len(blockers), IN_CHUNK):
                chunk = blockers[start : start + IN_CHUNK]
                values = ", ".join(
                    f"(%(job)s, %(b{index})s, %(c{index})s)" for index in range(len(chunk))
                )
                params: dict[str, Any] = {"job": job_id}
                for index, (blocker, chain) in enumerate(chunk):
                    params[f"b{index}"] = blocker
                    params[f"c{index}"] = chain
                cursor.execute(
                    f"INSERT INTO {self.blocker_table} (job_id, blocker_id, chain) "
                    f"VALUES {values}",
                    params,
                )
            status = "'blocked'" if blockers else "status"
            cursor.execute(
                f"UPDATE {self.table} SET status = {status}, blockers_left = %(left)s, "
                f"depends_on = {self.json_param_sql('depends_on')}, "
                f"dependency_policy = %(policy)s WHERE id = %(job)s",
                {
                    "job": job_id,
                    "left": len(blockers) or None,
                    "depends_on": json.dumps(depends_on),
                    "policy": policy,
                },
            )

    def take_blockers(
        self, job_ids: Sequence[int], ended_chains: Sequence[int]
    ) -> list[tuple[int, int, bool]]:
        """Delete the blocker rows that name the jobs ``job_ids`` (which just finished) and
        the chains ``ended_chains`` (by their first job's id: chains that just ended).
        Returns (blocked job, blocker id, chain) of each row deleted. One probe of the
        blockers' index, which is empty unless jobs wait."""
        ids = list(job_ids)
        if not ids:
            return []
        in_ids, params = self.in_list_sql("blocker_id", ids, "done")
        where = f"({in_ids} AND chain = %(no)s)"
        if ended_chains:
            in_chains, chain_params = self.in_list_sql("blocker_id", list(ended_chains), "ended")
            where += f" OR ({in_chains} AND chain = %(yes)s)"
            params.update(chain_params)
        where = self.in_id_order(where, table=self.blocker_table, delete=True)
        sql = f"DELETE FROM {self.blocker_table} WHERE {where} RETURNING job_id, blocker_id, chain"
        with self.connection.cursor() as cursor:
            cursor.execute(sql, {**params, "yes": True, "no": False})
            return [(row[0], row[1], bool(row[2])) for row in cursor.fetchall()]

    def delete_jobs(self, job_ids: Sequence[int]) -> list[tuple[int, str, int | None]]:
        """Delete the jobs ``job_ids`` that are not running, in one conditional statement
        per chunk (a job claimed meanwhile no longer matches). Returns (id, status,
        chain_id) of each job deleted."""
        ids = sorted(set(job_ids))
        deleted: list[tuple[int, str, int | None]] = []
        not_running = " AND status <> 'processing'"
        for start in range(0, len(ids), IN_CHUNK):
            in_sql, params = self.in_list_sql("id", ids[start : start + IN_CHUNK], "ids")
            with self.connection.cursor() as cursor:
                cursor.execute(
                    f"DELETE FROM {self.table} "
                    f"WHERE {self.in_id_order(in_sql + not_running, delete=True)} "
                    f"RETURNING id, status, chain_id",
                    params,
                )
                deleted.extend((row[0], str(row[1]), row[2]) for row in cursor.fetchall())
        return deleted

    def lock_jobs(self, job_ids: Sequence[int], statuses: Sequence[str]) -> None:
        """Lock the rows of the jobs ``job_ids`` that are in one of ``statuses`` until the
        transaction ends, in id order (PostgreSQL): the jobs a statement of several steps
        (a resolution, an operator's action) is about to change, so that two of them over
        overlapping jobs take them in one order and cannot wait for each other. Only those
        it changes: a running job another transaction holds (a worker completing it) is not
        waited for. SQLite: nothing (one writer at a time)."""

    def start_chain(self, job_id: int) -> None:
        """Make the job ``job_id`` the first step of a chain (as it continues)."""
        with self.connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {self.table} SET chain_id = id, chain_index = 0 "
                f"WHERE id = %(id)s AND chain_id IS NULL",
                {"id": job_id},
            )

    def drop_blockers_of(self, job_ids: Sequence[int]) -> None:
        """Delete the blocker rows of the jobs ``job_ids``: they no longer wait (cancelled,
        failed by their policy, deleted)."""
        ids = list(job_ids)
        for start in range(0, len(ids), IN_CHUNK):
            in_sql, params = self.in_list_sql("job_id", ids[start : start + IN_CHUNK], "ids")
            with self.connection.cursor() as cursor:
                where = self.in_id_order(in_sql, table=self.blocker_table, delete=True)
                cursor.execute(f"DELETE FROM {self.blocker_table} WHERE {where}", params)

    def unblock(
        self, counts: Mapping[int, int], *, now: datetime | None = None
    ) -> tuple[list[int], list[str]]:
        """Count ``counts[id]`` more dependencies of each blocked job done; a job with none
        left becomes runnable (``scheduled`` when its time is still to come). Returns the
        ids of the jobs released and the queues of those made pending (to wake workers).
        One statement per chunk of jobs, which locks them in id order (PostgreSQL): two
        completions that count off the same jobs cannot wait for each other."""
        now_sql = self.now_sql()
        released: list[int] = []
        queues: list[str] = []
        ids = sorted(counts)
        for start in range(0, len(ids), IN_CHUNK):
            chunk = ids[start : start + IN_CHUNK]
            in_sql, params = self.in_list_sql("id", chunk, "ids")
            blocked = f" AND {self.unindexed('status')} = 'blocked'"
            cases = " ".join(f"WHEN {int(job_id)} THEN {int(counts[job_id])}" for job_id in chunk)
            left = f"(COALESCE(blockers_left, 0) - CASE id {cases} ELSE 0 END)"
            sql = (
                f"UPDATE {self.table} SET blockers_left = CASE WHEN {left} > 0 THEN {left} "
                f"ELSE NULL END, status = CASE WHEN {left} > 0 THEN 'blocked' "
                f"WHEN scheduled_at > {now_sql} THEN 'scheduled' ELSE 'pending' END, "
                f"updated_at = {now_sql} "
                f"WHERE {self.in_id_order(in_sql + blocked)} "
                f"RETURNING id, status, queue"
            )
            with self.connection.cursor() as cursor:
                cursor.execute(sql, {**params, "now": self.clock(now)})
                for job_id, status, queue in cursor.fetchall():
                    if status != "blocked":
                        released.append(job_id)
                    if status == "pending":
                        queues.append(str(queue))
        return released, queues

    def break_blocked(
        self, reasons: Mapping[int, str], *, now: datetime | None = None, blocked: bool = True
    ) -> list[tuple[int, str]]:
        """The blocked jobs ``reasons`` names, whose dependency failed or was cancelled, are
        failed or cancelled by their policy (``run``: left alone), with ``reasons[id]`` as
        their error. Returns (id, new status) of each job changed. ``blocked=False``: a job
        just written, not blocked yet (a dependency had failed already)."""
        now_sql = self.now_sql()
        waiting = "'blocked'" if blocked else "'blocked', 'scheduled', 'pending'"
        changed: list[tuple[int, str]] = []
        with self.connection.cursor() as cursor:
            for job_id, reason in sorted(reasons.items()):
                cursor.execute(
                    f"UPDATE {self.table} SET status = CASE WHEN dependency_policy = 'cancel' "
                    f"THEN 'cancelled' ELSE 'failed' END, blockers_left = NULL, "
                    f"completed_at = {now_sql}, updated_at = {now_sql}, last_error = %(error)s "
                    f"WHERE id = %(id)s AND {self.unindexed('status')} IN ({waiting}) "
                    f"AND COALESCE(dependency_policy, 'fail') <> 'run' RETURNING id, status",
                    {"id": job_id, "error": reason, "now": self.clock(now)},
                )
                changed.extend((row[0], str(row[1])) for row in cursor.fetchall())
        return changed

    def finished_rows_sql(
        self, finished: Sequence[Finished]
    ) -> tuple[str, dict[str, str], dict[str, Any]]:
        """A FROM item with one row (id, attempt, result) per finished attempt, its columns,
        and its parameters."""
        raise NotImplementedError

    def insert_one(
        self, *, payload: str, fields: dict[str, Any], delay_seconds: float | None
    ) -> tuple[int, Any, Any, uuid.UUID]:
        """Insert one job (and wake workers on commit, where the engine can). Returns
        (id, scheduled_at, created_at, uuid)."""
        scheduled = fields.get("scheduled_at")
        params = self.new_job_params(fields, delay_seconds)
        params["payload"] = payload
        with self.connection.cursor() as cursor:
            cursor.execute(self._insert_one_sql(scheduled is not None), params)
            row = cursor.fetchone()
        return row[0], self.to_datetime(row[1]), self.to_datetime(row[2]), self.to_uuid(row[3])

    def insert_unique(
        self,
        *,
        payload: str,
        fields: dict[str, Any],
        delay_seconds: float | None,
        unique_for: float | None,
    ) -> tuple[int, Any, Any, uuid.UUID] | None:
        """Insert one job with ``fields["unique_key"]`` unless a live job holds that key (or,
        with ``unique_for`` seconds, one with that key finished less than that long ago).
        Returns what :meth:`insert_one` returns, or None when it wrote nothing.

        ``INSERT ... ON CONFLICT DO NOTHING`` on the live jobs' unique index: on PostgreSQL
        it waits for a transaction that inserted the same key and has not committed yet
        (nothing if that one rolls back); on SQLite, one writer at a time, the other
        transaction has committed or rolled back before this one can write."""
        scheduled = fields.get("scheduled_at")
        params = self.new_job_params(fields, delay_seconds)
        params["payload"] = payload
        params["unique_since"] = -unique_for if unique_for is not None else None
        sql = self._insert_unique_sql(scheduled is not None, unique_for is not None)
        with self.connection.cursor() as cursor:
            cursor.execute(sql, params)
            row = cursor.fetchone()
        if row is None:
            return None
        return row[0], self.to_datetime(row[1]), self.to_datetime(row[2]), self.to_uuid(row[3])

    def _insert_unique_sql(self, fixed_time: bool, window: bool) -> str:
        key = (type(self), fixed_time, self.now_sql(), window)
        sql = self._insert_unique_cache.get(key)
        if sql is None:
            columns, values = self.new_row_sql(
                payload_sql=self.json_param_sql("payload"), fixed_time=fixed_time
            )
            if window:
                recent = RECENTLY_FINISHED_SQL.format(
                    table=self.table, since=self.later_sql("unique_since")
                )
                source = f"SELECT {values} WHERE NOT EXISTS ({recent})"
            else:
                # WHERE true: SQLite would read the ON of ON CONFLICT as a join's.
                source = f"SELECT {values} WHERE true"
            sql = self.with_notify(
                f"INSERT INTO {self.table} ({columns}) {source} "
                f"ON CONFLICT {UNIQUE_LIVE_SQL} DO NOTHING "
                f"RETURNING id, scheduled_at, created_at, uuid"
            )
            self._insert_unique_cache[key] = sql
        return sql

    tick_table = "sqlq_schedule_tick"

    def insert_tick(self, name: str, tick_at: datetime, spec: str) -> int | None:
        """Insert a recurring job's tick row unless it exists (``INSERT ... ON CONFLICT DO
        NOTHING`` on its (name, tick_at) constraint: a worker that loses the race writes
        nothing, and PostgreSQL logs no unique-violation ERROR for it). On PostgreSQL it
        waits for a transaction that inserted the same tick and has not committed yet.
        Returns the row's id, or None when the tick was taken (django_sqlq.schedules)."""
        with self.connection.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {self.tick_table} (name, tick_at, spec) "
                f"VALUES (%(name)s, %(tick_at)s, %(spec)s) "
                f"ON CONFLICT (name, tick_at) DO NOTHING RETURNING id",
                {
                    "name": name,
                    "tick_at": self.connection.ops.adapt_datetimefield_value(tick_at),
                    "spec": spec,
                },
            )
            row = cursor.fetchone()
        return None if row is None else int(row[0])

    def holder_sql(self, key: str) -> tuple[str, dict[str, Any]]:
        """A SELECT of every column of the job that holds ``key`` (for ``Job.objects.raw``):
        the live one, else the newest; and its parameters. One probe of the key's index."""
        sql = (
            f"SELECT * FROM {self.table} WHERE unique_key = %(unique_key)s "
            f"ORDER BY CASE WHEN status IN ({_in(statuses.LIVE)}) THEN 0 ELSE 1 END, id DESC "
            f"LIMIT 1"
        )
        return sql, {"unique_key": key}

    _insert_unique_cache: dict[tuple[type, bool, str, bool], str] = {}
    _insert_one_cache: dict[tuple[type, bool, str], str] = {}

    def _insert_one_sql(self, fixed_time: bool) -> str:
        key = (type(self), fixed_time, self.now_sql())  # now_sql follows USE_TZ on SQLite
        sql = self._insert_one_cache.get(key)
        if sql is None:
            columns, values = self.new_row_sql(
                payload_sql=self.json_param_sql("payload"), fixed_time=fixed_time
            )
            sql = self.with_notify(
                f"INSERT INTO {self.table} ({columns}) VALUES ({values}) "
                f"RETURNING id, scheduled_at, created_at, uuid"
            )
            self._insert_one_cache[key] = sql
        return sql

    def scheduled_sql(self, fixed_time: bool) -> str:
        """A new job's ``scheduled_at``: the ``scheduled_at`` parameter (``fixed_time``), else
        now plus the ``delay`` parameter, by the database's clock."""
        return "%(scheduled_at)s" if fixed_time else self.later_sql("delay")

    def new_row_sql(self, *, payload_sql: str, fixed_time: bool) -> tuple[str, str]:
        """(column list, value list) of an INSERT of new jobs, from ``JOB_COLUMNS``."""
        scheduled_sql = self.scheduled_sql(fixed_time)
        values = [
            self.new_value_sql(
                name, JOB_COLUMNS[name], payload_sql=payload_sql, scheduled_sql=scheduled_sql
            )
            for name in INSERT_COLUMNS
        ]
        return ", ".join(INSERT_COLUMNS), ", ".join(values)

    def new_value_sql(
        self, column: str, new: New | str | None, *, payload_sql: str, scheduled_sql: str
    ) -> str:
        """SQL for what an INSERT writes in ``column`` of a new job (see ``New``)."""
        if new is New.FIELD:
            return f"%({column})s"
        if new is New.FLOAT_FIELD:
            return self.float_param_sql(column)
        if new is New.PAYLOAD:
            return payload_sql
        if new is New.INITIAL_STATUS:
            return self.initial_status_sql(scheduled_sql)
        if new is New.SCHEDULED_AT:
            return scheduled_sql
        if new is New.NOW:
            return self.now_sql()
        if new is New.UUID:
            return self.uuid_sql()
        if new is New.EMPTY_JSON_LIST:
            return self.empty_json_list_sql()
        if isinstance(new, str):
            return new
        raise ValueError(f"{column}: not written by an INSERT")

    def new_job_params(
        self, fields: dict[str, Any], delay_seconds: float | None
    ) -> dict[str, Any]:
        """The parameters of an INSERT of new jobs with ``fields``, but their payloads."""
        # Only a unique enqueue's fields hold a unique_key, only a traced one's a trace;
        # every other field is given.
        params = {name: fields[name] for name in FIELD_COLUMNS if name not in OPTIONAL_FIELDS}
        for name in OPTIONAL_FIELDS:
            params[name] = fields.get(name)
        scheduled = fields.get("scheduled_at")
        if scheduled is not None:
            scheduled = self.connection.ops.adapt_datetimefield_value(scheduled)
        params["scheduled_at"] = scheduled
        params["delay"] = delay_seconds or 0
        params["now"] = None  # the database's clock: web hosts with skewed clocks agree
        return params

    def initial_status_sql(self, scheduled_sql: str) -> str:
        """A new job's status: ``scheduled`` when ``scheduled_sql`` is later than now, else
        ``pending``."""
        return f"CASE WHEN {scheduled_sql} > {self.now_sql()} THEN 'scheduled' ELSE 'pending' END"

    def with_notify(self, insert_sql: str) -> str:
        """The INSERT ... RETURNING statement, extended to wake workers on commit."""
        return insert_sql

    def fail(
        self,
        *,
        job_id: int,
        attempt: int,
        worker_id: str,
        error: str,
        error_entry: dict[str, Any],
        retry_in: float | None,
        now: datetime | None = None,
        cancel: bool = False,
    ) -> str | None:
        """Record a failed attempt: ``scheduled`` again ``retry_in`` seconds ahead (``pending``
        for no wait) while attempts remain (``retry_in=None``: no retry), else failed; or
        ``cancelled`` (no retry) when ``cancel`` or when a cancel was requested while it ran.
        Returns the new status, or None if this worker no longer held the job (fenced)."""
        now_sql = self.now_sql()
        cancelled = "(cancel_requested_at IS NOT NULL OR %(cancel)s)"
        final = f"(attempts >= max_attempts OR %(no_retry)s OR {cancelled})"
        sql = (
            f"UPDATE {self.table} SET "
            f"status = CASE WHEN {cancelled} THEN 'cancelled' WHEN {final} THEN 'failed' "
            f"WHEN {self.float_param_sql('retry_in')} > 0 THEN 'scheduled' ELSE 'pending' END, "
            f"scheduled_at = CASE WHEN {final} THEN scheduled_at "
            f"ELSE {self.later_sql('retry_in')} END, "
            f"completed_at = CASE WHEN {final} THEN {now_sql} ELSE NULL END, "
            f"locked_by = CASE WHEN {final} THEN locked_by ELSE '' END, "
            f"last_error = %(error)s, errors = {self.append_error_sql('error_entry')}, "
            f"lease_expires_at = NULL, updated_at = {now_sql} "
            f"WHERE id = %(job_id)s AND status = 'processing' AND locked_by = %(worker_id)s "
            f"AND attempts = %(attempt)s "
            f"RETURNING status"
        )
        params = {
            "no_retry": retry_in is None,
            "cancel": cancel,
            "retry_in": retry_in or 0,
            "now": self.clock(now),
            "error": error,
            "error_entry": json.dumps(error_entry),
            "job_id": job_id,
            "worker_id": worker_id,
            "attempt": attempt,
        }
        with self.connection.cursor() as cursor:
            cursor.execute(sql, params)
            row = cursor.fetchone()
        return None if row is None else str(row[0])

    def release(
        self, job_ids: Sequence[int], *, worker_id: str, now: datetime | None = None
    ) -> int:
        """Give back claimed-but-unstarted jobs: pending again, the attempt not counted (a job
        whose cancel was requested meanwhile is cancelled instead)."""
        if not job_ids:
            return 0
        in_sql, in_params = self.in_list_sql("id", list(job_ids), "ids")
        now_sql = self.now_sql()
        sql = (
            f"UPDATE {self.table} SET "
            f"status = CASE WHEN cancel_requested_at IS NULL THEN 'pending' ELSE 'cancelled' END, "
            f"completed_at = CASE WHEN cancel_requested_at IS NULL THEN NULL ELSE {now_sql} END, "
            f"attempts = attempts - 1, "
            f"locked_by = '', locked_at = NULL, started_at = NULL, lease_expires_at = NULL, "
            f"updated_at = {now_sql} "
            "WHERE "
            + self.in_id_order(f"{in_sql} AND status = 'processing' AND locked_by = %(worker_id)s")
        )
        with self.connection.cursor() as cursor:
            cursor.execute(sql, {"now": self.clock(now), "worker_id": worker_id, **in_params})
            return int(cursor.rowcount)

    def promote(self, *, limit: int = 1000, now: datetime | None = None) -> int:
        """Move up to ``limit`` scheduled jobs whose time has come to pending (oldest first),
        where the claim finds them. Reads the scheduled jobs' own index: nothing when none is
        due. Returns how many were moved."""
        now_sql = self.now_sql()
        sql = self.with_promote_notify(
            f"UPDATE {self.table} SET status = 'pending', updated_at = {now_sql} "
            f"WHERE id IN (SELECT id FROM {self.table} WHERE status = 'scheduled' "
            f"AND scheduled_at <= {now_sql} ORDER BY scheduled_at LIMIT %(limit)s"
            f"{self.skip_locked()}) AND {self.unindexed('status')} = 'scheduled' RETURNING queue"
        )
        with self.connection.cursor() as cursor:
            cursor.execute(sql, {"now": self.clock(now), "limit": limit})
            return len(cursor.fetchall())

    def with_promote_notify(self, update_sql: str) -> str:
        """The promotion's UPDATE ... RETURNING queue, extended to wake idle workers."""
        return update_sql

    def next_due_in(self, *, now: datetime | None = None) -> float | None:
        """Seconds until the earliest scheduled job is due (<= 0: due now), by the database's
        clock; None when no job is scheduled. One probe of the scheduled jobs' index."""
        sql = (
            f"SELECT {self.seconds_between_sql('MIN(scheduled_at)', self.now_sql())} "
            f"FROM {self.table} WHERE status = 'scheduled'"
        )
        with self.connection.cursor() as cursor:
            cursor.execute(sql, {"now": self.clock(now)})
            row = cursor.fetchone()
        return None if row is None or row[0] is None else float(row[0])

    def seconds_between_sql(self, later: str, earlier: str) -> str:
        """SQL for ``later - earlier`` in seconds (two timestamps)."""
        raise NotImplementedError

    def reap(self, *, now: datetime | None = None) -> list[tuple[int, str, str, int, str]]:
        """Return jobs whose lease ran out to pending (or failed once their attempts are
        spent). Returns (id, type, new status, attempts, queue) for each."""
        now_sql = self.now_sql()
        spent = "attempts >= max_attempts"
        message = (
            "'Lease expired: worker ' || locked_by || ' stopped renewing it during attempt ' "
            "|| attempts || ' (killed, crashed, frozen or cut off from the database).'"
        )
        # A job whose cancel was requested is cancelled, not run again.
        cancelled = "cancel_requested_at IS NOT NULL"
        final = f"({spent} OR {cancelled})"
        sql = (
            f"UPDATE {self.table} SET "
            f"status = CASE WHEN {cancelled} THEN 'cancelled' WHEN {spent} THEN 'failed' "
            f"ELSE 'pending' END, "
            f"completed_at = CASE WHEN {final} THEN {now_sql} ELSE NULL END, "
            f"locked_by = CASE WHEN {final} THEN locked_by ELSE '' END, "
            f"last_error = {message}, "
            f"errors = {self.lease_error_sql()}, "
            f"lease_expires_at = NULL, updated_at = {now_sql} "
            # A processing row without a lease was set so by hand: nobody renews it either.
            "WHERE "
            + self.in_id_order(
                f"status = 'processing' "
                f"AND (lease_expires_at < {now_sql} OR lease_expires_at IS NULL)"
            )
            + " RETURNING id, type, status, attempts, queue"
        )
        with self.connection.cursor() as cursor:
            cursor.execute(sql, {"now": self.clock(now)})
            return [(row[0], row[1], row[2], row[3], row[4]) for row in cursor.fetchall()]

    def lease_error_sql(self) -> str:
        raise NotImplementedError

    def payloads_sql(self, payloads: Sequence[str]) -> tuple[str, str, str, Any]:
        """(FROM clause, payload expression, order expression, parameter) that expand one
        parameter, ``payloads``, holding every payload into one row per payload, in order."""
        raise NotImplementedError

    def insert_many(
        self,
        *,
        payloads: Sequence[str],
        fields: dict[str, Any],
        delay_seconds: float | None,
    ) -> list[tuple[int, Any, Any, uuid.UUID]]:
        """Insert one job per JSON-encoded payload, all sharing ``fields``, in one statement.

        ``scheduled_at`` is ``fields["scheduled_at"]`` if given, else now (+ ``delay_seconds``)
        by the database clock. Returns (id, scheduled_at, created_at, uuid) in payload order.
        """
        source, payload_sql, order_sql, payloads_param = self.payloads_sql(payloads)
        columns, values = self.new_row_sql(
            payload_sql=payload_sql, fixed_time=fields.get("scheduled_at") is not None
        )
        sql = (
            f"INSERT INTO {self.table} ({columns}) SELECT {values} "
            f"FROM {source} ORDER BY {order_sql} "
            f"RETURNING id, {self.raw_datetime('scheduled_at')}, "
            f"{self.raw_datetime('created_at')}, uuid"
        )
        params = self.new_job_params(fields, delay_seconds)
        params["payloads"] = payloads_param
        with self.connection.cursor() as cursor:
            cursor.execute(self.with_notify(sql), params)
            rows = cursor.fetchall()
        # Ids are handed out in insertion order, which ORDER BY fixed to payload order.
        rows.sort(key=lambda row: row[0])
        # Every row of one statement shares its timestamps: convert each distinct value once.
        seen: dict[Any, Any] = {}

        def convert(value: Any) -> Any:
            if value not in seen:
                seen[value] = self.to_datetime(value)
            return seen[value]

        return [(row[0], convert(row[1]), convert(row[2]), self.to_uuid(row[3])) for row in rows]

    def to_uuid(self, value: Any) -> uuid.UUID:
        """A uuid column read by raw SQL, as the ORM would return it."""
        return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))

    def to_datetime(self, value: Any) -> Any:
        """A datetime column read by raw SQL, as the ORM would return it."""
        parsed = parse_datetime(value) if isinstance(value, str) else value
        if isinstance(parsed, datetime) and settings.USE_TZ and timezone.is_naive(parsed):
            parsed = timezone.make_aware(parsed, UTC)
        return parsed

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
            where += f" AND {in_sql}"
            params.update(in_params)
        # A row another transaction holds (an enqueue marking it waited for, an operator)
        # is renewed by the next beat: the heartbeat never waits, so it never holds this
        # worker's other rows while it does.
        sql = (
            f"UPDATE {self.table} SET lease_expires_at = {self.later_sql('lease')} "
            f"WHERE {self.in_id_order(where, skip_locked=True)}"
        )
        with self.connection.cursor() as cursor:
            cursor.execute(sql, params)
            return int(cursor.rowcount)

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
        running = " AND status = 'processing'"
        sql = (
            f"UPDATE {self.table} SET "
            f"cancel_requested_at = COALESCE(cancel_requested_at, {now_sql}), "
            f"updated_at = {now_sql} "
            f"WHERE {self.in_id_order(in_sql + running)}"
        )
        with self.connection.cursor() as cursor:
            cursor.execute(sql, {"now": self.clock(now), **in_params})
            return int(cursor.rowcount)

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

    # -- retention ----------------------------------------------------------------------

    maintenance_table = "sqlq_maintenance"

    def _finished_sql(
        self, status: str, queues: Sequence[str] | None
    ) -> tuple[str, dict[str, Any]]:
        """The WHERE clause of ``status``'s rows that finished more than ``%(keep)s`` seconds
        ago (in ``queues``, or any): a range of ``sqlq_job_finished_idx``, whose condition
        it repeats word for word, so that SQLite's planner sees that the index covers it."""
        if status not in statuses.FINISHED:  # a literal in the SQL: never anything else
            raise ValueError(f"only finished jobs are pruned, not {status!r}")
        where = (
            f"status = '{status}' AND status IN ({_in(statuses.FINISHED)}) "
            f"AND completed_at < {self.later_sql('back')}"
        )
        params: dict[str, Any] = {}
        if queues is not None:
            queue_sql, params = self.in_list_sql("queue", queues, "queue")
            where += f" AND {queue_sql}"
        return where, params

    def prune(
        self,
        *,
        status: str,
        keep_seconds: float,
        queues: Sequence[str] | None = None,
        limit: int = 1000,
        now: datetime | None = None,
    ) -> int:
        """Delete up to ``limit`` of the oldest ``status`` rows (a finished status) that
        finished more than ``keep_seconds`` ago, in one short statement. Returns how many."""
        where, params = self._finished_sql(status, queues)
        sql = (
            f"DELETE FROM {self.table} WHERE id IN (SELECT id FROM {self.table} WHERE {where} "
            f"ORDER BY completed_at LIMIT %(limit)s{self.skip_locked()}) "
            f"AND {self.unindexed('status')} = '{status}'"
        )
        params.update(now=self.clock(now), back=-float(keep_seconds), limit=limit)
        with self.connection.cursor() as cursor:
            cursor.execute(sql, params)
            return int(cursor.rowcount)

    def prunable(
        self,
        *,
        status: str,
        keep_seconds: float,
        queues: Sequence[str] | None = None,
        now: datetime | None = None,
    ) -> dict[str, int]:
        """How many rows :meth:`prune` would delete, per queue (the same condition)."""
        where, params = self._finished_sql(status, queues)
        sql = f"SELECT queue, COUNT(*) FROM {self.table} WHERE {where} GROUP BY queue"
        params.update(now=self.clock(now), back=-float(keep_seconds))
        with self.connection.cursor() as cursor:
            cursor.execute(sql, params)
            return {row[0]: int(row[1]) for row in cursor.fetchall()}

    def take_lease(
        self, duty: str, *, holder: str, seconds: float, now: datetime | None = None
    ) -> bool:
        """Hold the maintenance ``duty`` for ``seconds``, unless another holder's lease is
        still running. True if ``holder`` holds it now (taken, or renewed). The duty's row
        must exist (``Maintenance.objects.get_or_create``)."""
        now_sql = self.now_sql()
        sql = (
            f"UPDATE {self.maintenance_table} SET holder = %(holder)s, "
            f"lease_expires_at = {self.later_sql('seconds')} WHERE duty = %(duty)s "
            f"AND (holder = '' OR holder = %(holder)s OR lease_expires_at IS NULL "
            f"OR lease_expires_at < {now_sql})"
        )
        params = {"now": self.clock(now), "holder": holder, "seconds": seconds, "duty": duty}
        with self.connection.cursor() as cursor:
            cursor.execute(sql, params)
            return int(cursor.rowcount) == 1

    def release_lease(self, duty: str, *, holder: str) -> None:
        sql = (
            f"UPDATE {self.maintenance_table} SET holder = '', lease_expires_at = NULL "
            "WHERE duty = %(duty)s AND holder = %(holder)s"
        )
        with self.connection.cursor() as cursor:
            cursor.execute(sql, {"duty": duty, "holder": holder})

    def reclaim_space(self, *, max_pages: int) -> int | None:  # noqa: ARG002 (for engines)
        """Give freed pages back to the file system, at most ``max_pages`` of them, in one
        short write. Returns how many pages are still free afterwards; None when the engine
        (or the database's settings) cannot. Default: None (PostgreSQL reuses the space
        VACUUM frees)."""
        return None

    def tidy(self) -> bool:
        """Maintenance after many claims: clear what finished jobs left in the claim's index.
        Returns True if it ran. Default: nothing to do (SQLite deletes index entries in
        place)."""
        return False

    def notify(self, queues: Sequence[str]) -> None:
        """Wake idle workers once the current transaction commits. Default: nothing."""

    def data_version(self) -> Any:
        """A cheap value that changes when another connection commits, or None."""
        return None

    def change_check_interval(self, poll_interval: float) -> float:
        """How often an idle worker calls data_version()."""
        return poll_interval

    def listen(
        self,
        *,
        # The default for engines without notifications; the others override it.
        queues: Sequence[str] | None,  # noqa: ARG002
        wake: Callable[[], None],  # noqa: ARG002
        stop: threading.Event,  # noqa: ARG002
        logger: logging.Logger,  # noqa: ARG002
        alias: str | None = None,  # noqa: ARG002
        probe: Callable[[str], None] | None = None,  # noqa: ARG002
    ) -> threading.Thread | None:
        """Start a thread that calls ``wake()`` when jobs for ``queues`` are committed, if
        the engine can tell. Returns it, or None. ``alias``: listen through this database
        alias instead of this connection's. ``probe(token)``: called once listening; it
        sends a notification with that payload, and the listener warns if it never hears it."""
        return None


class DatabaseNow(Now):
    """``Now()`` in the time the jobs table's columns hold. On SQLite with ``USE_TZ = False``
    that is local time (see ``sqlite.SQLiteOps.now_sql``), where Django's ``Now()`` is UTC."""

    def as_sqlite(self, compiler: Any, connection: Any, **extra_context: Any) -> Any:
        if not settings.USE_TZ:
            return self.as_sql(
                compiler,
                connection,
                template="STRFTIME('%%%%Y-%%%%m-%%%%d %%%%H:%%%%M:%%%%f', 'NOW', 'localtime')",
                **extra_context,
            )
        return super().as_sqlite(compiler, connection, **extra_context)
