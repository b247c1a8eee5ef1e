"""Inserts: new jobs (one, many in one statement, unique by key) and recurring jobs'
ticks. Every INSERT writes the columns of ``columns.JOB_COLUMNS``."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from django_sqlq import statuses
from django_sqlq.db.columns import FIELD_COLUMNS, INSERT_COLUMNS, JOB_COLUMNS, New
from django_sqlq.db.dialect import Dialect, any_status_sql, literals

#: The conflict target of a unique enqueue: the columns and the condition of the partial
#: unique index ``sqlq_job_unique_key_live`` (``Job.Meta.constraints``), as its migration
#: wrote it, so that both engines infer that index from it.
UNIQUE_LIVE_SQL = (
    f"(unique_key) WHERE (unique_key IS NOT NULL AND {any_status_sql(statuses.LIVE)})"
)
#: Finished jobs of the key ``%(unique_key)s`` that finished after ``{since}``: the jobs
#: ``unique_for`` covers (completed, failed or cancelled, by ``completed_at``).
#: The key is cast to the column's type, as ``INSERT ... SELECT`` types it: with
#: psycopg's server-side binding one parameter must have one type.
RECENTLY_FINISHED_SQL = (
    "SELECT 1 FROM {table} WHERE unique_key = CAST(%(unique_key)s AS VARCHAR(255)) "
    f"AND status IN ({literals(statuses.FINISHED)}) AND completed_at > {{since}}"
)

#: Enqueue options an INSERT writes as NULL when the fields leave them out.
OPTIONAL_FIELDS = ("unique_key", "trace", "chain_id", "chain_index", "waited_on")


class InsertOps(Dialect):
    """Writing new rows: jobs, and the ticks of recurring jobs."""

    tick_table = "sqlq_schedule_tick"
    # The texts of the single-row INSERTs, built once per process: by engine class, fixed
    # time or delay, the clock's SQL (SQLite's follows USE_TZ) and, for a unique insert,
    # whether it has a ``unique_for`` window.
    _insert_unique_cache: dict[tuple[type, bool, str, bool], str] = {}
    _insert_one_cache: dict[tuple[type, bool, str], str] = {}

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
            rows = list(cursor.fetchall())
        # Ids are handed out in insertion order, which ORDER BY fixed to payload order.
        rows.sort(key=lambda row: row[0])
        # Every row of one statement shares its timestamps: convert each distinct value once.
        seen: dict[Any, Any] = {}

        def convert(value: Any) -> Any:
            if value not in seen:
                seen[value] = self.to_datetime(value)
            return seen[value]

        return [(row[0], convert(row[1]), convert(row[2]), self.to_uuid(row[3])) for row in rows]

    def payloads_sql(self, payloads: Sequence[str]) -> tuple[str, str, str, Any]:
        """(FROM clause, payload expression, order expression, parameter) that expand one
        parameter, ``payloads``, holding every payload into one row per payload, in order."""
        raise NotImplementedError

    def with_notify(self, insert_sql: str) -> str:
        """The INSERT ... RETURNING statement, extended to wake workers on commit."""
        return insert_sql

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

    def to_uuid(self, value: Any) -> uuid.UUID:
        """A uuid column read by raw SQL, as the ORM would return it."""
        return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))

    def to_datetime(self, value: Any) -> Any:
        """A datetime column read by raw SQL, as the ORM would return it."""
        parsed = parse_datetime(value) if isinstance(value, str) else value
        if isinstance(parsed, datetime) and settings.USE_TZ and timezone.is_naive(parsed):
            parsed = timezone.make_aware(parsed, UTC)
        return parsed

    def holder_sql(self, key: str) -> tuple[str, dict[str, Any]]:
        """A SELECT of every column of the job that holds ``key`` (for ``Job.objects.raw``):
        the live one, else the newest; and its parameters. One probe of the key's index."""
        sql = (
            f"SELECT * FROM {self.table} WHERE unique_key = %(unique_key)s "
            f"ORDER BY CASE WHEN status IN ({literals(statuses.LIVE)}) THEN 0 ELSE 1 END, id DESC "
            f"LIMIT 1"
        )
        return sql, {"unique_key": key}

    def insert_tick(self, name: str, tick_at: datetime, spec: str) -> int | None:
        """Insert a recurring job's tick row unless it exists (``INSERT ... ON CONFLICT DO
        NOTHING`` on its (name, tick_at) constraint: a worker that loses the race writes
        nothing, and PostgreSQL logs no unique-violation ERROR for it). On PostgreSQL it
        waits for a transaction that inserted the same tick and has not committed yet.
        Returns the row's id, or None when the tick was taken (django_sqlq.schedules)."""
        with self.connection.cursor() as cursor:
            cursor.execute(
                self.insert_or_nothing_sql(
                    self.tick_table,
                    "name, tick_at, spec",
                    "%(name)s, %(tick_at)s, %(spec)s",
                    "name, tick_at",
                    "id",
                ),
                {
                    "name": name,
                    "tick_at": self.connection.ops.adapt_datetimefield_value(tick_at),
                    "spec": spec,
                },
            )
            row = cursor.fetchone()
        return None if row is None else int(row[0])
