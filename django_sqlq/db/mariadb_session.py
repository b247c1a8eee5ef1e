"""MariaDB sessions (``django_sqlq.db.mysql``'s engine): the server's version, a
transaction a handler left open, and a timed-out handler's statement stopped. Read where
the driver keeps them, without a round trip where it can."""

from __future__ import annotations

import ctypes
import re
from typing import Any

#: The oldest MariaDB the dialect supports: ``SKIP LOCKED`` (10.6), ``INSERT ... RETURNING``
#: (10.5), ``RANDOM_BYTES`` (10.10 for the UUIDs) and ``JSON_TABLE`` (10.6).
MIN_MARIADB_VERSION = (10, 11)


def unsupported_server(connection: Any) -> str | None:
    """The server behind the ``mysql`` backend's ``connection`` ("MySQL 8.4.3", "MariaDB
    10.6.21") when the dialect cannot run on it; None when it can, or when no server
    answers now (the worker's first statement will say)."""
    try:
        mariadb, version = connection.mysql_is_mariadb, connection.mysql_version
    except Exception:
        return None
    if mariadb and version >= MIN_MARIADB_VERSION:
        return None
    return f"{'MariaDB' if mariadb else 'MySQL'} {'.'.join(map(str, version))}"


# -- the session's state, read where the driver keeps it ------------------------------------

#: The server's status flags that the last reply carried: in a transaction, autocommit on.
SERVER_STATUS_IN_TRANS = 1
SERVER_STATUS_AUTOCOMMIT = 2
#: ``MARIADB_CONNECTION_SERVER_STATUS`` of Connector/C's ``enum mariadb_value``.
_SERVER_STATUS_INFO = 30
_status_reader: Any = None


def _server_status(raw: Any) -> int | None:
    """The status flags of the server's last reply to ``raw`` (a mysqlclient connection), as
    libmariadb keeps them: no round trip. None where the library cannot tell (a client
    library without ``mariadb_get_infov``)."""
    global _status_reader
    if _status_reader is None:
        try:
            from MySQLdb import _mysql

            function = ctypes.CDLL(_mysql.__file__).mariadb_get_infov
            function.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
            pointer = ctypes.pythonapi.PyCapsule_GetPointer
            pointer.restype = ctypes.c_void_p
            pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
            _status_reader = (function, pointer)
        except Exception:
            _status_reader = False
    if not _status_reader:
        return None
    function, pointer = _status_reader
    native = pointer(raw._get_native_connection(), b"_mysql.connection.native_connection")
    status = ctypes.c_uint(0)
    if function(native, _SERVER_STATUS_INFO, ctypes.byref(status)) != 0:
        return None
    return status.value


def in_transaction(raw: Any) -> bool:
    """Whether the session of ``raw`` has a transaction open, or autocommit off, that
    Django does not know of (a raw ``BEGIN``, ``START TRANSACTION``, ``SET autocommit=0``
    run through a cursor). Read from the driver's copy of the server's status; a round trip
    (``@@in_transaction``) where it has none."""
    status = _server_status(raw)
    if status is None:
        with raw.cursor() as cursor:
            cursor.execute("SELECT @@in_transaction, @@autocommit")
            open_, autocommit = cursor.fetchone()
        return bool(open_) or not autocommit
    return bool(status & SERVER_STATUS_IN_TRANS) or not status & SERVER_STATUS_AUTOCOMMIT


#: Said in SHOW ENGINE INNODB STATUS when it left part of the transaction list out.
_TRUNCATED = "truncated..."


def has_writes(raw: Any) -> bool:
    """Whether the transaction open on ``raw`` changed rows: InnoDB's own count of its undo
    entries, in the list of transactions of ``SHOW ENGINE INNODB STATUS`` (none when InnoDB
    has no transaction for the session). Raises without the PROCESS privilege it needs: the
    caller then counts the writes as lost; so does a list cut short (a server with very many
    transactions), where the session's may be left out.

    Not ``information_schema.innodb_trx``: InnoDB serves that from a copy it remakes only
    when nobody has read it for 100 ms, so other sessions reading it (other workers' checks,
    a monitoring tool) keep it old for as long as they go on; a transaction begun since
    looked as if it had written nothing, and its writes were lost with the job recorded
    completed. The status is made on each call. Called only for a transaction a handler
    left open, never on a job's plain path."""
    thread = getattr(raw, "sqlq_thread_id", None)
    if thread is None:
        thread = raw.thread_id()
    with raw.cursor() as cursor:
        cursor.execute("SHOW ENGINE INNODB STATUS")
        row = cursor.fetchone()
    status = str(row[2]) if row else ""
    if _TRUNCATED in status:
        return True
    transactions = status.split("\nTRANSACTIONS\n", 1)[-1]
    mark = re.compile(rf"thread id {int(thread)},")
    for block in transactions.split("\n---TRANSACTION ")[1:]:
        found = mark.search(block)
        if found:
            undo = re.search(r"undo log entries (\d+)", block[: found.start()])
            return undo is not None and int(undo.group(1)) > 0
    return False


def remember_thread_id(connection: Any) -> None:
    """``connection_created``: keep the new session's id for kill(), which needs it
    while the connection runs a statement in another thread (mysqlclient 2.3 refuses any
    call on a connection in use there, ``thread_id()`` too). No round trip."""
    raw = connection.connection
    raw.sqlq_thread_id = raw.thread_id()


def kill(connection: Any, *, session: bool = False) -> None:
    """Stop the statement running on ``connection`` (in another thread): ``KILL QUERY`` of
    its session, sent on a connection of its own, as MariaDB has no cancel request. With
    ``session``, ``KILL CONNECTION``: the session ends, its transaction rolled back."""
    import MySQLdb

    raw = connection.connection
    thread = getattr(raw, "sqlq_thread_id", None)
    if thread is None:
        thread = raw.thread_id()
    killer = MySQLdb.connect(**connection.get_connection_params())
    try:
        with killer.cursor() as cursor:
            cursor.execute(f"KILL {'CONNECTION' if session else 'QUERY'} {int(thread)}")
    finally:
        killer.close()
