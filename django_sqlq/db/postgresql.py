"""PostgreSQL: many workers on many hosts. The claim skips rows other workers are locking
(FOR UPDATE SKIP LOCKED), and NOTIFY wakes idle workers when a transaction that enqueued
commits."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django_sqlq.db.base import QueueOps

CHANNEL = "django_sqlq"

_NOW = "COALESCE(%s::timestamptz, statement_timestamp())"
_LATER = (
    "(COALESCE(%s::timestamptz, statement_timestamp()) "
    "+ make_interval(secs => %s::double precision))"
)
_LEASE_ERROR = (
    "COALESCE(errors, '[]'::jsonb) || jsonb_build_array(jsonb_build_object("
    "'attempt', attempts, 'worker_id', locked_by, "
    "'exception_class', 'django_sqlq.exceptions.LeaseLostError', "
    "'message', 'lease expired', 'traceback', ''))"
)


class PostgreSQLOps(QueueOps):
    def now_sql(self) -> str:
        return _NOW

    def later_sql(self) -> str:
        return _LATER

    def append_error_sql(self) -> str:
        return "COALESCE(errors, '[]'::jsonb) || jsonb_build_array(%s::jsonb)"

    def lease_error_sql(self) -> str:
        return _LEASE_ERROR

    def json_param_sql(self) -> str:
        return "%s::jsonb"

    def float_param_sql(self) -> str:
        return "%s::double precision"

    def skip_locked(self) -> str:
        return " FOR UPDATE SKIP LOCKED"

    def in_list_sql(self, column: str, values: Sequence[Any]) -> tuple[str, list[Any]]:
        return f"{column} = ANY(%s)", [list(values)]

    def payloads_sql(self, payloads: Sequence[str]) -> tuple[str, str, str, Any]:
        return (
            "jsonb_array_elements(%s::jsonb) WITH ORDINALITY AS p(value, n)",
            "p.value",
            "p.n",
            "[" + ",".join(payloads) + "]",
        )

    def notify(self, queues: Sequence[str]) -> None:
        # NOTIFY is transactional: it is delivered when (and only if) the enqueue commits.
        with self.connection.cursor() as cursor:
            for queue in sorted(set(queues)):
                cursor.execute("SELECT pg_notify(%s, %s)", [CHANNEL, queue])

    def explain_claim(self, queues: Sequence[str]) -> str:
        in_sql, params = self.in_list_sql("queue", queues)
        sql = (
            f"EXPLAIN SELECT id FROM {self.table} WHERE status = 'pending' "
            f"AND {in_sql} AND scheduled_at <= {_NOW} "
            f"ORDER BY priority DESC, scheduled_at, id LIMIT 10 FOR UPDATE SKIP LOCKED"
        )
        with self.connection.cursor() as cursor:
            cursor.execute(sql, [*params, None])
            return "\n".join(str(row[0]) for row in cursor.fetchall())
