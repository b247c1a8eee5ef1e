"""The ``sqlq_queue`` table: paused queues, and the rows a claim of limited queues locks
to count what those queues run and started (``SQLQ["QUEUE_LIMITS"]``)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from django_sqlq.db.dialect import Dialect
from django_sqlq.limits import QueueLimit

#: A queue's room under global limits when it has neither kind (never the smaller value).
MAX_LIMIT_ROOM = 2**31 - 1


def read_starts(value: Any) -> list[float]:
    """``recent_starts`` as read by raw SQL (JSON text: Django does not decode raw JSON)."""
    starts = json.loads(value) if isinstance(value, (str, bytes)) else value
    return sorted(float(t) for t in starts or [] if isinstance(t, (int, float)))


class QueueRowOps(Dialect):
    """Statements on the queues' rows; :class:`~django_sqlq.db.claim.ClaimOps` uses them."""

    queue_table = "sqlq_queue"

    def paused_queues(self) -> list[str]:
        """The names of the paused queues (a read of the small ``sqlq_queue`` table)."""
        with self.connection.cursor() as cursor:
            cursor.execute(
                f"SELECT name FROM {self.queue_table} WHERE paused = %(yes)s", {"yes": True}
            )
            return [row[0] for row in cursor.fetchall()]

    @staticmethod
    def global_room(
        limit: QueueLimit,
        running: int,
        starts: Mapping[str, list[float]],
        name: str,
        clock: float,
    ) -> int:
        """How many jobs of queue ``name`` may start now under its global ``limit``."""
        if name not in starts:
            return 0  # no row to lock (deleted meanwhile): claim none of it this time
        room = MAX_LIMIT_ROOM
        if limit.concurrency is not None:
            room = min(room, limit.concurrency - running)
        if limit.rate is not None and limit.period is not None:
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
    ) -> tuple[dict[str, list[float]], float]:
        """Lock the rows of ``names`` in ``sqlq_queue`` until the transaction ends, and read
        their recent starts; and now, by the database's clock once the lock is held (seconds
        since the epoch: the claim's jobs start at it, and the rate window records it).
        A queue without a row is left out (``ensure_queue_rows`` writes them).

        Here, for engines with row locks: in name order (two claims never wait for each
        other crosswise), held until the claim's transaction ends; every other claim of
        these queues waits. The counts that follow are separate statements: in READ
        COMMITTED each sees what the claims before it committed. The clock is read after the
        lock is held, in a statement of its own: a statement's timestamp is taken before it
        waits, and a rate window needs each holder's clock later than the last holder's
        starts."""
        in_sql, params = self.in_list_sql("name", sorted(names), "names")
        with self.connection.cursor() as cursor:
            cursor.execute(
                f"SELECT name, recent_starts FROM {self.queue_table} WHERE {in_sql} "
                "ORDER BY name FOR UPDATE",
                params,
            )
            rows = cursor.fetchall()
            cursor.execute(f"SELECT {self.epoch_sql()}", {"now": self.clock(now)})
            clock = float(cursor.fetchone()[0])
        return {row[0]: read_starts(row[1]) for row in rows}, clock

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
                    self.insert_or_nothing_sql(
                        self.queue_table,
                        "name, paused, updated_at, recent_starts",
                        f"%(name)s, %(paused)s, {self.now_sql()}, {self.empty_json_list_sql()}",
                        "name",
                    ),
                    {"name": name, "paused": False, "now": None},
                )
