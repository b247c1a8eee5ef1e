"""SQLite: one writer at a time, so the claim needs no row locks; the discipline is in the
connection set-up (WAL, busy timeout, BEGIN IMMEDIATE) and in keeping writes short."""

from __future__ import annotations

import contextlib
import functools
import json
import sqlite3
import sys
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from django_sqlq.conf import DEFAULT_SQLITE_PRAGMAS, get_settings
from django_sqlq.db.base import QueueOps
from django_sqlq.db.dialect import MAX_ERROR_ENTRIES, named_in_list
from django_sqlq.db.outcomes import Finished
from django_sqlq.db.queue_rows import read_starts
from django_sqlq.db.steps import record_sql

_WRITES = frozenset({"INSERT", "UPDATE", "DELETE", "REPLAC"})

# At most this many queues are read by one claim: SQLite refuses a compound SELECT of more
# than 500 arms (SQLITE_MAX_COMPOUND_SELECT); each arm adds one parameter (its queue) to the
# 999 older SQLite allows. The queues take turns leading the claims, so with more queues than
# this (a worker serving every queue of a site with a queue per tenant), each claim reads
# the next MAX_CLAIM_QUEUES of the rotation and every queue still leads one claim a round.
MAX_CLAIM_QUEUES = 300

# %% because Django's SQLite cursor turns %(name)s into :name and %% into %.
_NOW = "strftime('%%Y-%%m-%%d %%H:%%M:%%f', COALESCE(%(now)s, 'now'))"
_LATER = (
    "strftime('%%Y-%%m-%%d %%H:%%M:%%f', COALESCE(%(now)s, 'now'), "
    "printf('%%+.6f seconds', %({seconds})s))"
)
# With USE_TZ = False, Django stores naive local times (TIME_ZONE, which Django also makes the
# process's time zone): SQLite's 'now' is UTC, so the clock is read as local time too, or a
# naive run_at an hour ahead would be hours in the past (or the future) by the claim's clock.
_LOCAL_NOW = "strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now', 'localtime')"
_NOW_LOCAL = f"strftime('%%Y-%%m-%%d %%H:%%M:%%f', COALESCE(%(now)s, {_LOCAL_NOW}))"
_LATER_LOCAL = (
    f"strftime('%%Y-%%m-%%d %%H:%%M:%%f', COALESCE(%(now)s, {_LOCAL_NOW}), "
    "printf('%%+.6f seconds', %({seconds})s))"
)


def _local_time() -> bool:
    return not settings.USE_TZ


# ``errors`` without its oldest entry once it holds MAX_ERROR_ENTRIES (a path that matches
# nothing leaves it whole): with the entry appended next, it never grows past the bound.
_ERRORS_ROOM = (
    f"json_remove(COALESCE(errors, '[]'), CASE WHEN json_array_length(COALESCE(errors, '[]')) "
    f">= {MAX_ERROR_ENTRIES} THEN '$[0]' ELSE '$.none' END)"
)
_LEASE_ERROR = (
    f"json_insert({_ERRORS_ROOM}, '$[#]', json_object("
    "'attempt', attempts, 'worker_id', locked_by, "
    "'exception_class', 'django_sqlq.exceptions.LeaseLostError', "
    "'message', 'lease expired', 'traceback', ''))"
)

# A version 7 UUID (as models.new_uuid) as Django's UUIDField stores it on SQLite (32
# lower-case hex digits): the Unix time in milliseconds (48 bits), the version nibble 7, then
# random bits from randomblob() (SQLite's cryptographic PRNG, seeded from the OS) but for the
# variant nibble, one of 8, 9, a, b. The time is the statement's ('now' is fixed for one
# statement: the rows of a bulk_enqueue share it); the random part is drawn per row. ('%%':
# the statements that hold it take named parameters, which turn it into '%'.)
_UUID7 = (
    "lower(printf('%%012x', CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)) "
    "|| '7' || substr(hex(randomblob(2)), 2) "
    "|| substr('89ab', 1 + (random() & 3), 1) || substr(hex(randomblob(2)), 2) "
    "|| hex(randomblob(6)))"
)

MIN_SQLITE_VERSION = (3, 35, 0)  # UPDATE ... RETURNING

# An idle worker reads PRAGMA data_version this often (a few microseconds each time).
CHANGE_CHECK_INTERVAL = 0.002


def configure(connection: BaseDatabaseWrapper) -> None:
    """Apply ``SQLQ["SQLITE_PRAGMAS"]`` to a new connection to the queue database, and make
    its transactions take the write lock up front (BEGIN IMMEDIATE) unless the project chose
    a transaction mode itself: a deferred transaction that reads, then writes, fails with
    "database is locked" at once instead of waiting for the busy timeout."""
    try:
        pragmas = get_settings().SQLITE_PRAGMAS
    except Exception:  # a bad SQLQ setting is reported by the system checks
        pragmas = DEFAULT_SQLITE_PRAGMAS
    raw = connection.connection
    # busy_timeout first: a PRAGMA that needs a lock then waits for it like any statement.
    for name, value in sorted(pragmas.items(), key=lambda item: item[0] != "busy_timeout"):
        if not str(name).replace("_", "").isalnum():
            continue  # reported by the system checks
        if str(name) == "journal_mode" and connection.settings_dict["NAME"] in ("", ":memory:"):
            continue
        if "mode=memory" in str(connection.settings_dict["NAME"]):
            continue
        if str(name) == "auto_vacuum":
            _set_auto_vacuum(raw, value)
            continue
        try:
            raw.execute(f"PRAGMA {name} = {_pragma_value(value)}")
        except sqlite3.OperationalError as exc:
            # A read-only connection (mode=ro) to a file whose header is not written yet:
            # switching its journal mode would write it. It reads as it is; a writable
            # connection applies the PRAGMA.
            if "readonly" not in str(exc):
                raise
    if getattr(connection, "transaction_mode", "unset") is None:
        connection.transaction_mode = "IMMEDIATE"  # type: ignore[attr-defined]


AUTO_VACUUM_MODES = {"none": 0, "0": 0, "full": 1, "1": 1, "incremental": 2, "2": 2}


def _set_auto_vacuum(raw: Any, value: str | int) -> None:
    """Give a database that has no table yet the ``auto_vacuum`` mode ``value``.

    On a new, empty file the PRAGMA alone does it. But Django runs the project's
    ``OPTIONS["init_command"]`` before this receiver, and its usual ``PRAGMA journal_mode =
    WAL`` writes the file's header: from then on the PRAGMA is only remembered for the next
    VACUUM. With no table there is nothing to copy, so that VACUUM is instant; it runs only
    on a database without tables, outside a transaction. A database with tables is left as
    it is (converting it rewrites the file: the check django_sqlq.W002 says how)."""
    if str(value).lower() not in AUTO_VACUUM_MODES or not _auto_vacuum_settable(raw, value):
        return
    # A read-only connection, or a lock past the busy timeout: the connection is still good,
    # and the next one tries again while the database is empty. (Newer SQLite libraries
    # refuse the PRAGMA itself on a read-only file; older ones ignore it.)
    with contextlib.suppress(sqlite3.DatabaseError):
        raw.execute(f"PRAGMA auto_vacuum = {_pragma_value(value)}")
        if _auto_vacuum_settable(raw, value) and not raw.in_transaction:
            raw.execute("VACUUM")


def _auto_vacuum_settable(raw: Any, value: str | int) -> bool:
    """Whether to set ``auto_vacuum``: only on a database that has no table yet, whose mode
    differs. Setting it takes the write lock even when the mode is already that value (on
    every new connection, it would wait for, or fail on, any writer's transaction), and on a
    database with tables it changes nothing until a VACUUM of all its data."""
    wanted = AUTO_VACUUM_MODES.get(str(value).lower())
    if raw.execute("PRAGMA auto_vacuum").fetchone()[0] == wanted:
        return False
    return raw.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchone() is None


def _pragma_value(value: str | int) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    text = str(value)
    if not text.replace("_", "").replace("-", "").isalnum():
        raise ValueError(f"Unsafe SQLite pragma value: {value!r}")
    return text


def pragma(connection: BaseDatabaseWrapper, name: str) -> Any:
    with connection.cursor() as cursor:
        cursor.execute(f"PRAGMA {name}")
        row = cursor.fetchone()
    return None if row is None else row[0]


class SQLiteOps(QueueOps):
    """The queue's statements in SQLite's dialect: the hooks they call, in sections named
    after the module that holds each statement."""

    # -- the fragments every statement uses (dialect.py) -----------------------------------

    def now_sql(self) -> str:
        return _NOW_LOCAL if _local_time() else _NOW

    def later_sql(self, seconds: str) -> str:
        # The templates leave "{seconds}" for the parameter's name.
        return (_LATER_LOCAL if _local_time() else _LATER).replace("{seconds}", seconds)

    def uuid_sql(self) -> str:
        return _UUID7

    def append_error_sql(self, entry: str) -> str:
        return f"json_insert({_ERRORS_ROOM}, '$[#]', json(%({entry})s))"

    def in_list_sql(
        self, column: str, values: Sequence[Any], name: str
    ) -> tuple[str, dict[str, Any]]:
        return named_in_list(column, values, name)

    def unindexed(self, column: str) -> str:
        # Unary + keeps SQLite from scanning the status index for every row of the batch;
        # the batch's ids lead, through the primary key.
        return f"+{column}"

    def raw_datetime(self, column: str) -> str:
        # An expression has no declared type, so Django's "datetime" converter skips it; the
        # text sorts as the time does.
        return f"CAST({column} AS TEXT)"

    def take_write_lock(self) -> None:
        """Take the write lock now, in a transaction Django began DEFERRED (a project that
        chose ``"transaction_mode": "DEFERRED"``): a no-op UPDATE takes it, waiting up to
        the busy timeout. A transaction begun IMMEDIATE (the default on the queue database,
        see :func:`configure`) holds it already."""
        if getattr(self.connection, "transaction_mode", None) in ("IMMEDIATE", "EXCLUSIVE"):
            return
        with self.connection.cursor() as cursor:
            cursor.execute(self.TAKE_WRITE_LOCK)

    #: A no-op write: it takes the write lock, waiting up to the busy timeout.
    TAKE_WRITE_LOCK = "UPDATE sqlq_job SET id = id WHERE 0"

    @contextlib.contextmanager
    def step_transaction(self) -> Iterator[None]:
        """A durable step's transaction (``django_sqlq.steps``). The queue's transactions
        begin IMMEDIATE (holding the database's one write lock from BEGIN); a step's begins
        DEFERRED and takes the write lock just before its first statement: a step that calls
        a payment provider and writes nothing holds no lock meanwhile (every worker's writes
        would wait for it); one that queries first holds it from that query on (a write after
        a read could not take it later without failing at once, SQLITE_BUSY_SNAPSHOT)."""
        connection = self.connection
        if connection.in_atomic_block:  # a savepoint of the caller's transaction
            with transaction.atomic(using=connection.alias):
                yield
            return
        mode = getattr(connection, "transaction_mode", None)
        lock_first = _LockFirst(self.TAKE_WRITE_LOCK)
        connection.ensure_connection()
        connection.transaction_mode = None  # type: ignore[attr-defined]
        try:
            atomic = transaction.atomic(using=connection.alias)
            atomic.__enter__()
        finally:
            connection.transaction_mode = mode  # type: ignore[attr-defined]
        wrappers = connection.execute_wrappers
        wrappers.append(lock_first)
        try:
            yield
        except BaseException:
            wrappers.remove(lock_first)
            atomic.__exit__(*sys.exc_info())
            raise
        wrappers.remove(lock_first)
        atomic.__exit__(None, None, None)

    def record_step(
        self,
        *,
        job_id: int,
        name: str,
        kind: str,
        state: str,
        result: str,
        wait_key: str | None = None,
        wake_at: datetime | None = None,
        returning: bool = True,
    ) -> int | None:
        connection = self.connection
        if returning or _watched(connection):
            return super().record_step(
                job_id=job_id,
                name=name,
                kind=kind,
                state=state,
                result=result,
                wait_key=wait_key,
                wake_at=wake_at,
                returning=returning,
            )
        # A step's record, on the path of every step a job takes, goes to the DB-API cursor
        # when nothing watches Django's (no query log, no execute wrapper but the step's own):
        # Django's layers cost a step's record a quarter of its time. Its errors are still
        # Django's (an IntegrityError when another attempt recorded the step).
        sql = _native_sql(record_sql(self.json_param_sql("result"), self.now_sql(), False))
        params = {
            "now": None,
            "job_id": job_id,
            "name": name,
            "kind": kind,
            "state": state,
            "result": result,
            "wait_key": wait_key,
            "wake_at": None if wake_at is None else self.clock(wake_at),
        }
        with connection.wrap_database_errors:
            connection.connection.execute(sql, params)
        return None

    def has_recorded_steps(self, job_id: int) -> bool:
        connection = self.connection
        if _watched(connection):
            return super().has_recorded_steps(job_id)
        with connection.wrap_database_errors:  # as record_step's, read by every such attempt
            cursor = connection.connection.execute(self.ANY_RECORDED_STEP_NATIVE, (job_id,))
            return cursor.fetchone() is not None

    ANY_RECORDED_STEP_NATIVE = QueueOps.ANY_RECORDED_STEP.replace("%s", "?")

    # -- the claim (claim.py, queue_rows.py) -----------------------------------------------

    def claim_ids_sql(
        self, queues: Sequence[str], caps: Mapping[str, int] | None = None
    ) -> tuple[str, dict[str, Any]]:
        # One index range per queue, each in the claim index's order, glued by UNION ALL:
        # SQLite runs the arms in turn and stops once ``limit`` ids are found. (Naming
        # several queues in one WHERE would sort every runnable row of them.) A capped
        # queue's arm has its own LIMIT (parameter cap_<its parameter>).
        now_sql = self.now_sql()
        caps = caps or {}

        def one(queue: str, name: str) -> str:
            limit = f"%(cap_{name})s" if queue in caps else "%(limit)s"
            return (
                f"SELECT id FROM {self.table} WHERE status = 'pending' AND queue = %({name})s "
                f"AND scheduled_at <= {now_sql} "
                f"ORDER BY priority DESC, scheduled_at, id LIMIT {limit}"
            )

        def cap_params(params: dict[str, str]) -> dict[str, Any]:
            return {f"cap_{name}": caps[queue] for name, queue in params.items() if queue in caps}

        if len(queues) == 1:
            params = {"queue": queues[0]}
            return one(queues[0], "queue"), {**params, **cap_params(params)}
        params = {f"queue_{index}": queue for index, queue in enumerate(queues[:MAX_CLAIM_QUEUES])}
        arms = " UNION ALL ".join(
            f"SELECT id FROM ({one(queue, name)})" for name, queue in params.items()
        )
        return f"{arms} LIMIT %(limit)s", {**params, **cap_params(params)}

    def epoch_sql(self) -> str:
        return f"((julianday({self.now_sql()}) - 2440587.5) * 86400.0)"

    def moment_at(self, epoch: float) -> datetime:
        moment = super().moment_at(epoch)
        # Under USE_TZ = False the clock reads local wall time (now_sql): the same, naive.
        return moment.replace(tzinfo=None) if _local_time() else moment

    def lock_queue_rows(
        self, names: Sequence[str], *, now: datetime | None = None
    ) -> tuple[dict[str, list[float]], float]:
        # A write first: it takes SQLite's write lock (whatever the transaction mode), which
        # every other claim of a limited queue, on any connection, then waits for.
        # The clock is read once the lock is held (a statement that waited for it may have
        # read 'now' before it waited).
        in_sql, params = self.in_list_sql("name", list(names), "names")
        sql = (
            f"UPDATE {self.queue_table} SET recent_starts = recent_starts WHERE {in_sql} "
            f"RETURNING name, recent_starts"
        )
        with self.connection.cursor() as cursor:
            cursor.execute(sql, params)
            rows = cursor.fetchall()
            cursor.execute(f"SELECT {self.epoch_sql()}", {"now": self.clock(now)})
            clock = float(cursor.fetchone()[0])
        return {row[0]: read_starts(row[1]) for row in rows}, clock

    # -- new jobs (insert.py) --------------------------------------------------------------

    def payloads_sql(self, payloads: Sequence[str]) -> tuple[str, str, str, Any]:
        # Each element is the payload's JSON text as a JSON string, so that json_each's
        # ``value`` is exactly that text whatever the payload's type.
        return "json_each(%(payloads)s)", "value", "key", json.dumps(list(payloads))

    # -- outcomes (outcomes.py) ------------------------------------------------------------

    def finished_rows_sql(
        self, finished: Sequence[Finished]
    ) -> tuple[str, dict[str, str], dict[str, Any]]:
        if all(f.result is None for f in finished):
            # The common case, no results: {"id": attempt, ...}, whose json_each rows carry
            # both numbers without a second parse (about 15 % quicker than the general form).
            source = (
                "(SELECT CAST(key AS INTEGER) AS id, value AS attempt, NULL AS result "
                "FROM json_each(%(done)s)) AS done"
            )
            columns = {"id": "done.id", "attempt": "done.attempt", "result": "done.result"}
            return source, columns, {"done": json.dumps({f.id: f.attempt for f in finished})}
        # One JSON parameter: [[id, attempt, "result as JSON text" or null], ...].
        rows = [
            [f.id, f.attempt, None if f.result is None else json.dumps(f.result)] for f in finished
        ]
        source = (
            "(SELECT json_extract(value, '$[0]') AS id, json_extract(value, '$[1]') AS attempt, "
            "json_extract(value, '$[2]') AS result FROM json_each(%(done)s)) AS done"
        )
        columns = {"id": "done.id", "attempt": "done.attempt", "result": "done.result"}
        return source, columns, {"done": json.dumps(rows)}

    # -- upkeep (upkeep.py) ----------------------------------------------------------------

    def seconds_between_sql(self, later: str, earlier: str) -> str:
        return f"((julianday({later}) - julianday({earlier})) * 86400.0)"

    def lease_error_sql(self) -> str:
        return _LEASE_ERROR

    def auto_vacuum(self) -> int:
        """The database's ``PRAGMA auto_vacuum``: 0 none, 1 full, 2 incremental."""
        return int(pragma(self.connection, "auto_vacuum") or 0)

    def reclaim_space(self, *, max_pages: int) -> int | None:
        # Only with auto_vacuum = INCREMENTAL (set before the first table was created, or
        # followed by one VACUUM): then each call frees up to max_pages pages from the end
        # of the file, in one short write transaction.
        # executescript(), because the sqlite3 module steps a statement that returns no row
        # only once, and each step of incremental_vacuum frees one page.
        if self.auto_vacuum() != 2:
            return None
        with self.connection.wrap_database_errors:
            self.connection.connection.executescript(
                f"PRAGMA incremental_vacuum({int(max_pages)})"
            )
        return int(pragma(self.connection, "freelist_count") or 0)

    # -- wake-ups (notify.py) --------------------------------------------------------------

    def change_check_interval(self, poll_interval: float, wanted: float | None = None) -> float:
        return min(CHANGE_CHECK_INTERVAL if wanted is None else wanted, poll_interval)

    def data_version(self) -> Any:
        """Changes whenever another connection commits to the database file: a check that
        costs microseconds and reads no table, for the idle worker's wake-up."""
        self.connection.ensure_connection()
        with self.connection.wrap_database_errors:
            return self.connection.connection.execute("PRAGMA data_version").fetchone()[0]


def _watched(connection: BaseDatabaseWrapper) -> bool:
    """Whether something watches the statements of ``connection`` (a query log: DEBUG, a
    test's CaptureQueriesContext, debug tools; an execute wrapper other than a step's own),
    or it is not open: a statement past Django's cursor would go unseen."""
    return (
        connection.connection is None
        or connection.queries_logged
        or not all(type(wrapper) is _LockFirst for wrapper in connection.execute_wrappers)
    )


class _LockFirst:
    """The execute wrapper of a step's transaction (``SQLiteOps.step_transaction``): before
    the transaction's first statement, unless it writes (and so takes the lock itself), the
    no-op write takes the write lock (no snapshot yet that could be stale)."""

    __slots__ = ("locked", "take_lock")

    def __init__(self, take_lock: str) -> None:
        self.take_lock = take_lock
        self.locked = False

    def __call__(self, execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if not self.locked:
            self.locked = True
            if sql.lstrip()[:6].upper() not in _WRITES:
                execute(self.take_lock, None, False, context)
        return execute(sql, params, many, context)


@functools.cache
def _native_sql(sql: str) -> str:
    """``sql`` (pyformat, as Django's cursors take it) in sqlite3's named style, as Django's
    SQLite backend converts it: ``%(name)s`` as ``:name``, ``%%`` as ``%``."""
    return sql % _NamedStyle()


class _NamedStyle(dict[str, str]):
    """Every parameter name, as sqlite3's named style writes it."""

    def __missing__(self, key: str) -> str:
        return f":{key}"
