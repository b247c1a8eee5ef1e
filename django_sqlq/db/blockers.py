"""Workflows (``django_sqlq.workflows``): chains, and jobs that wait for others through
the blocker rows of ``sqlq_job_blocker``. Every statement that changes several jobs takes
them in id order (``Dialect.in_id_order``), so two of them cannot wait for each other."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from django_sqlq.db.dialect import Dialect

#: The most values one ``IN (...)`` list of the workflows' statements holds (SQLite takes
#: at most 32,766 parameters in a statement).
IN_CHUNK = 500


class BlockerOps(Dialect):
    """Dependencies between jobs."""

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
            rows = self.update_returning(
                "waited_on = %(yes)s",
                in_sql,
                "id, status, chain_id",
                {**params, "yes": True},
                lock=True,
            )
            found.update({row[0]: (str(row[1]), row[2]) for row in rows})
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
        rows = self.delete_rows(
            self.blocker_table,
            where,
            {**params, "yes": True, "no": False},
            returning="job_id, blocker_id, chain",
        )
        return [(row[0], row[1], bool(row[2])) for row in rows]

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

    def lock_jobs(
        self,
        job_ids: Sequence[int],  # noqa: ARG002 (for engines with row locks)
        statuses: Sequence[str],  # noqa: ARG002
    ) -> list[int] | None:
        """Lock the rows of the jobs ``job_ids`` that are in one of ``statuses`` until the
        transaction ends, in id order (PostgreSQL, MariaDB): the jobs a statement of several
        steps (a resolution, an operator's action) is about to change, so that two of them
        over overlapping jobs take them in one order and cannot wait for each other. Only
        those it changes: a running job another transaction holds (a worker completing it)
        is not waited for. Returns the ids locked: the statement that follows changes only
        those (one that reached a row locked after, by another, would wait for it while
        holding these). SQLite: nothing, None (one writer at a time)."""
        return None

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
            self.delete_rows(self.blocker_table, in_sql, params)

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
            rows = self.update_returning(
                # The status first: it reads blockers_left, which the next assignment changes.
                f"status = CASE WHEN {left} > 0 THEN 'blocked' "
                f"WHEN scheduled_at > {now_sql} THEN 'scheduled' ELSE 'pending' END, "
                f"blockers_left = CASE WHEN {left} > 0 THEN {left} ELSE NULL END, "
                f"updated_at = {now_sql}",
                in_sql + blocked,
                "id, status, queue",
                {**params, "now": self.clock(now)},
                lock=True,
            )
            for job_id, status, queue in rows:
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
        for job_id, reason in sorted(reasons.items()):
            rows = self.update_returning(
                "status = CASE WHEN dependency_policy = 'cancel' "
                "THEN 'cancelled' ELSE 'failed' END, blockers_left = NULL, "
                f"completed_at = {now_sql}, updated_at = {now_sql}, last_error = %(error)s",
                f"id = %(id)s AND {self.unindexed('status')} IN ({waiting}) "
                "AND COALESCE(dependency_policy, 'fail') <> 'run'",
                "id, status",
                {"id": job_id, "error": reason, "now": self.clock(now)},
            )
            changed.extend((row[0], str(row[1])) for row in rows)
        return changed
