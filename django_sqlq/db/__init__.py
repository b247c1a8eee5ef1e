"""Everything that speaks SQL or knows which engine it talks to.

The rest of django_sqlq calls :func:`ops_for` and the methods of the returned
:class:`~django_sqlq.db.base.QueueOps`; nothing outside this package writes SQL, opens a
cursor for queue work, or looks at ``connection.vendor``.

Each statement lives in the module of its concern (``claim``, ``insert``, ``outcomes``,
``blockers``, ``running``, ``upkeep``, ``notify``); an engine is a module that subclasses
``QueueOps`` with its dialect's hooks (``sqlite``, ``postgresql``), listed in :data:`ENGINES`.
Another engine fills in every hook that raises ``NotImplementedError`` and overrides the
defaults that do not hold for it (``in_id_order`` for row locks, ``notify``/``listen``...).
"""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Callable
from typing import Any, TypeVar

from django.db import InterfaceError, OperationalError, connections
from django.db.backends.base.base import BaseDatabaseWrapper

from django_sqlq.conf import get_settings
from django_sqlq.db import mariadb_session
from django_sqlq.db.base import QueueOps
from django_sqlq.db.mysql import MySQLOps
from django_sqlq.db.postgresql import PostgreSQLOps
from django_sqlq.db.sqlite import SQLiteOps, configure

__all__ = ["QueueOps", "configure_connection", "is_transient", "ops_for"]

T = TypeVar("T")

#: The queue operations of each supported engine, by ``connection.vendor``.
ENGINES: dict[str, type[QueueOps]] = {
    "sqlite": SQLiteOps,
    "postgresql": PostgreSQLOps,
    "mysql": MySQLOps,
}


def _ops_class(vendor: str) -> type[QueueOps]:
    try:
        return ENGINES[vendor]
    except KeyError:
        raise NotImplementedError(
            f"django_sqlq does not support the {vendor!r} database engine yet "
            "(SQLite, PostgreSQL and MariaDB are supported)."
        ) from None


def ops_for(alias: str) -> QueueOps:
    """The queue operations for the database ``alias``, on this thread's connection."""
    connection = connections[alias]
    return _ops_class(connection.vendor)(connection)


def json_depth_limit(default: int, alias: str | None = None) -> int:
    """The deepest nesting of JSON arrays and objects the queue database (or ``alias``)
    stores: its engine's ``max_json_depth``, else ``default``."""
    try:
        vendor = connections[alias or get_settings().DATABASE].vendor
    except Exception:  # no settings or no such alias: reported where they are used
        return default
    engine = ENGINES.get(vendor)
    depth = getattr(engine, "max_json_depth", None)
    return default if depth is None else min(default, depth)


def json_size_limit(default: int, alias: str | None = None) -> int:
    """The largest JSON text (bytes) one statement of the queue database (or ``alias``)
    carries: its engine's ``max_json_bytes()`` (MariaDB's ``max_allowed_packet``), else
    ``default``. Asks the server once per connection, where the engine has a limit."""
    try:
        connection = connections[alias or get_settings().DATABASE]
        engine = ENGINES.get(connection.vendor)
    except Exception:  # no settings or no such alias: reported where they are used
        return default
    if engine is None:
        return default
    limit = engine(connection).max_json_bytes()
    return default if limit is None else min(default, limit)


def supported(alias: str) -> bool:
    return connections[alias].vendor in ENGINES


def vendor(alias: str) -> str:
    return connections[alias].vendor


def configure_connection(sender: Any, connection: BaseDatabaseWrapper, **kwargs: Any) -> None:  # noqa: ARG001 (a signal receiver)
    """``connection_created`` receiver: tune new connections to the queue's database."""
    if connection.vendor == "mysql":  # any alias: a handler's statement there can time out
        mariadb_session.remember_thread_id(connection)
    try:
        queue_alias = get_settings().DATABASE
    except Exception:  # a bad SQLQ setting is reported by the system checks
        queue_alias = "default"
    if connection.alias != queue_alias:
        return
    if connection.vendor == "sqlite":
        configure(connection)


def is_transient(exc: BaseException) -> bool:
    """True for errors that mean "try again" (a lock, a lost connection), not "bad job"."""
    if isinstance(exc, InterfaceError):
        return True
    if not isinstance(exc, OperationalError):
        return False
    code = _mysql_code(exc)
    if code is not None:  # MariaDB's OperationalError is also a trigger's SIGNAL, and more
        return code in MYSQL_TRANSIENT or 2000 <= code < 3000  # 2xxx: the client's
    message = str(exc).lower()
    return not (
        "no such table" in message or "does not exist" in message or "doesn't exist" in message
    )


#: SQLSTATEs of a statement that lost a race for row locks, which a new try can win:
#: deadlock_detected, lock_not_available, serialization_failure.
LOCK_CONFLICTS = frozenset({"40P01", "55P03", "40001"})
#: MySQL/MariaDB error numbers of the same: ER_LOCK_DEADLOCK, ER_LOCK_WAIT_TIMEOUT.
MYSQL_LOCK_CONFLICTS = frozenset({1213, 1205})
#: MySQL/MariaDB server errors that a new try (on a new connection) can get past: the lock
#: conflicts, too many connections, shutdown, a killed connection or statement, an idle
#: connection closed, a server read-only while it fails over. Every other server error
#: mysqlclient raises as OperationalError (a trigger's SIGNAL, 1644) is the statement's.
MYSQL_TRANSIENT = frozenset(
    {*MYSQL_LOCK_CONFLICTS, 1040, 1053, 1290, 1317, 1792, 1836, 1927, 4031}
)


def _mysql_code(exc: BaseException) -> int | None:
    """The MySQL/MariaDB error number of ``exc`` (a DatabaseError Django wrapped), if any."""
    cause = exc.__cause__
    if cause is None or type(cause).__module__.split(".")[0] != "MySQLdb":
        return None
    args = getattr(cause, "args", ())
    return args[0] if args and isinstance(args[0], int) else None


def is_lock_conflict(exc: BaseException) -> bool:
    """True when the database failed a statement to break a deadlock (or a lock wait)."""
    cause = exc.__cause__
    code = getattr(cause, "sqlstate", None) or getattr(cause, "pgcode", None)
    if code in LOCK_CONFLICTS:
        return True
    args: tuple[Any, ...] = getattr(cause, "args", None) or exc.args
    return bool(args) and args[0] in MYSQL_LOCK_CONFLICTS


def is_deadlock(exc: BaseException) -> bool:
    """True when the database rolled back the transaction to break a deadlock (PostgreSQL's
    40P01, MariaDB's 1213): a new try of the whole transaction can succeed."""
    cause = exc.__cause__
    if (getattr(cause, "sqlstate", None) or getattr(cause, "pgcode", None)) == "40P01":
        return True
    args: tuple[Any, ...] = getattr(cause, "args", None) or exc.args
    return bool(args) and args[0] == 1213


#: How many times a transaction of django_sqlq's own is tried when the database rolls it
#: back whole to break a deadlock.
DEADLOCK_TRIES = 5


def retrying_deadlocks(alias: str, step: Callable[[], T]) -> T:
    """``step()``, a transaction of django_sqlq's own on ``alias``, tried again when the
    database rolled it back whole to break a deadlock (MariaDB's 1213, PostgreSQL's 40P01):
    two transactions over overlapping rows (operators' actions, an enqueue that waits for
    jobs a worker completes) can each hold a row the other needs, and the database ends one
    of them. Not when the caller has a transaction open there: that rollback took the
    caller's other work with it, so the error is the caller's to handle."""
    for attempt in range(1, DEADLOCK_TRIES + 1):
        try:
            return step()
        except OperationalError as exc:
            own = connections[alias].in_atomic_block
            if own or attempt == DEADLOCK_TRIES or not is_deadlock(exc):
                raise
            time.sleep(random.uniform(0, 0.01 * attempt))  # the winner commits meanwhile
    raise AssertionError("unreachable")


def is_missing_table(exc: BaseException) -> bool:
    """True when the jobs table is not there: ``migrate`` has not been run."""
    message = str(exc).lower()
    return (
        "no such table" in message
        or ("does not exist" in message and "relation" in message)
        or ("doesn't exist" in message and "table" in message)  # MariaDB: 1146
    )


def in_raw_transaction(connection: BaseDatabaseWrapper) -> bool:
    """Whether the driver has a transaction open on ``connection`` while Django believes it
    is in autocommit outside any atomic block: a raw ``BEGIN`` ran through a cursor. Read
    from the driver's own state, without a round trip."""
    raw = connection.connection
    if raw is None or connection.in_atomic_block or not connection.autocommit:
        return False
    try:
        if connection.vendor == "sqlite":
            return bool(raw.in_transaction)
        if connection.vendor == "postgresql":
            # psycopg 3 and psycopg2 >= 2.8: libpq's status; IDLE (0) is no transaction,
            # ACTIVE (1) a command in progress; INTRANS, INERROR: a transaction is open.
            return int(raw.info.transaction_status) in (2, 3)
        if connection.vendor == "mysql":
            return mariadb_session.in_transaction(raw)
    except Exception:
        return False
    return False


def has_uncommitted_writes(connection: BaseDatabaseWrapper) -> bool:
    """Whether the transaction open on ``connection`` has written anything that a rollback
    would lose. True when it cannot tell (an aborted transaction, another engine)."""
    raw = connection.connection
    if raw is None:
        return False
    try:
        if connection.vendor == "sqlite":
            # BEGIN is issued before the first write (or by an atomic block): a transaction
            # is open only once something wrote, or an atomic block holds the write lock.
            return bool(raw.in_transaction)
        if connection.vendor == "postgresql":
            # Raw cursor: no Django wrapper, no query logged, nothing changed on error.
            with raw.cursor() as cursor:
                cursor.execute("SELECT txid_current_if_assigned() IS NOT NULL")
                row = cursor.fetchone()
            return bool(row[0]) if row is not None else True
        if connection.vendor == "mysql":
            return mariadb_session.has_writes(raw)
    except Exception:
        return True
    return True


def stop_abandoned(connection: BaseDatabaseWrapper, *, end_transaction: bool = False) -> None:
    """Stop what an abandoned call (a timed-out handler, in another thread) is doing on
    ``connection``: the statement it waits on, if any, and with ``end_transaction`` (an
    atomic handler's connection) its transaction too, so that it cannot commit and holds no
    lock. Best effort: a call between statements runs on.

    - PostgreSQL: a cancel request. The transaction it cancels in cannot commit any more,
      and the completion an atomic handler would write is fenced: it can only roll back.
    - SQLite: ``interrupt()``; ending the transaction closes the connection (the database
      rolls back and the write lock is released; the call's next statement fails).
    - MariaDB: ``KILL QUERY`` of its session; ending the transaction, ``KILL CONNECTION``
      instead, as the statement a ``KILL QUERY`` stops leaves its transaction open and able
      to commit (an atomic handler that caught the error committed its outcome and every
      write made after its timeout)."""
    raw = connection.connection
    if raw is None:
        return
    with contextlib.suppress(Exception):
        if connection.vendor == "postgresql":
            raw.cancel()
        elif connection.vendor == "sqlite":
            raw.interrupt()
            if end_transaction:
                raw.close()
        elif connection.vendor == "mysql":
            mariadb_session.kill(connection, session=end_transaction)
