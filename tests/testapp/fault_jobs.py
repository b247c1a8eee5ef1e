"""Handlers for the fault-injection scenarios (tests/faults). Imported by jobs.py, so the
worker discovers them.

Every side effect is an appended line ``"<n> <pid>\\n"`` in a file named by the payload,
written with one ``write()`` on an ``O_APPEND`` descriptor: lines from several processes
never interleave, and a process killed with SIGKILL leaves a whole line or none.
"""

from __future__ import annotations

import ctypes
import os
import sys
import time
from pathlib import Path
from typing import Any

from django_sqlq import handler


def append_line(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{text}\n".encode())
    finally:
        os.close(fd)


def await_release(path: str, max_seconds: float) -> bool:
    """Block the handler until the test creates the file ``path`` (at most ``max_seconds``):
    the condition the test controls, polled, with a deadline. Whether it came."""
    release = Path(path)
    deadline = time.monotonic() + max_seconds
    while not release.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    return release.exists()


@handler("faults.record")
def record(payload: dict[str, Any]) -> int:
    """The side effect the scenarios count: one line per run, after ``before`` seconds of
    work and followed by ``after`` seconds more (both optional)."""
    if payload.get("before"):
        time.sleep(payload["before"])
    append_line(payload["path"], f"{payload['n']} {os.getpid()}")
    if payload.get("after"):
        time.sleep(payload["after"])
    return os.getpid()


@handler("faults.block")
def block(payload: dict[str, Any]) -> int:
    """Announce the start (``started`` gets a line with the pid), wait until the ``release``
    file exists (at most ``max_seconds``), then record the run like faults.record."""
    append_line(payload["started"], f"{payload['n']} {os.getpid()}")
    await_release(payload["release"], payload.get("max_seconds", 30))
    append_line(payload["path"], f"{payload['n']} {os.getpid()}")
    return os.getpid()


@handler("faults.sleep")
def sleep(payload: dict[str, Any]) -> int:
    """Run for ``seconds``, then record the run."""
    append_line(payload["started"], f"{payload['n']} {os.getpid()}")
    time.sleep(payload["seconds"])
    append_line(payload["path"], f"{payload['n']} {os.getpid()}")
    return os.getpid()


# -- poison ----------------------------------------------------------------------------------


@handler("faults.os_exit")
def os_exit(payload: Any) -> None:  # noqa: ARG001 (a handler)
    os._exit(1)


@handler("faults.segfault")
def segfault(payload: Any) -> None:  # noqa: ARG001 (a handler)
    ctypes.string_at(0)


@handler("faults.system_exit")
def system_exit(payload: Any) -> None:  # noqa: ARG001 (a handler)
    sys.exit(3)


@handler("faults.keyboard_interrupt")
def keyboard_interrupt(payload: Any) -> None:  # noqa: ARG001 (a handler)
    raise KeyboardInterrupt("pressed ^C inside a job")


@handler("faults.async_keyboard_interrupt")
async def async_keyboard_interrupt(payload: Any) -> None:  # noqa: ARG001 (a handler)
    raise KeyboardInterrupt("pressed ^C inside an async job")


class Bare(BaseException):
    pass


@handler("faults.base_exception")
def base_exception(payload: Any) -> None:  # noqa: ARG001 (a handler)
    raise Bare("a bare BaseException subclass")


@handler("faults.recursion")
def recursion(payload: Any) -> int:  # noqa: ARG001 (a handler)
    def down(n: int) -> int:
        return down(n + 1) + 1

    return down(0)


@handler("faults.hang")
def hang(payload: dict[str, Any]) -> None:
    """Never returns, as far as the test can tell (gives up after ``max_seconds``, so that an
    abandoned thread does not outlive the test run)."""
    deadline = time.monotonic() + payload.get("max_seconds", 60)
    while time.monotonic() < deadline:
        time.sleep(0.05)


@handler("faults.raise")
def raise_message(payload: dict[str, Any]) -> None:
    """Raise a ValueError with the payload's message (NUL bytes, surrogates...)."""
    message = payload["message"]
    if payload.get("surrogate"):
        message += "\ud800"
    if payload.get("nul"):
        message += "\x00"
    if payload.get("repeat"):
        message *= payload["repeat"]
    raise ValueError(message)


@handler("faults.return")
def return_value(payload: dict[str, Any]) -> Any:
    """Return the payload's value, with a NUL character or a big string added on request."""
    value = payload.get("value")
    if payload.get("nul"):
        value = f"{value}\x00"
    if payload.get("size"):
        value = "x" * payload["size"]
    return value


@handler("faults.size")
def size(payload: dict[str, Any]) -> int:
    """The length of the payload's ``blob``: proves a big payload arrived whole."""
    return len(payload["blob"])


# -- handlers that misuse their database connection (issue 11) ------------------------------


@handler("faults.write_order")
def write_order(payload: dict[str, Any]) -> int:
    """An ordinary handler that writes a row: its write must be committed."""
    from tests.testapp.models import Order

    return Order.objects.create(item=payload["item"]).pk


@handler("faults.leave_open")
def leave_open(payload: dict[str, Any]) -> str:
    """Return with the connection in a state a handler must not leave it in."""
    from django.db import connection, transaction

    from tests.testapp.models import Order

    how: str = payload["how"]
    if how == "autocommit":  # a write, never committed
        transaction.set_autocommit(False)
        Order.objects.create(item=how)
    elif how == "autocommit_no_writes":
        transaction.set_autocommit(False)
        list(Order.objects.all())
    elif how == "atomic":  # an atomic block entered and never exited
        transaction.atomic().__enter__()
        Order.objects.create(item=how)
    elif how == "savepoint":  # a savepoint inside a transaction left open
        transaction.set_autocommit(False)
        Order.objects.create(item=how)
        transaction.savepoint()
        Order.objects.create(item=how + "-2")
    elif how == "raw_begin":  # a transaction Django does not know of, a write in it
        with connection.cursor() as cursor:
            cursor.execute("BEGIN")
        Order.objects.create(item=how)
    elif how == "cursor":  # a cursor with rows not read, never closed
        for n in range(3):
            Order.objects.create(item=f"{how}-{n}")
        cursor = connection.cursor()
        cursor.execute("SELECT item FROM testapp_order")
        cursor.fetchone()
        payload["_keep"] = cursor  # type: ignore[assignment]
    elif how == "close":  # the connection closed under the worker
        Order.objects.create(item=how)
        connection.close()
    elif how == "close_in_atomic":
        transaction.atomic().__enter__()
        Order.objects.create(item=how)
        connection.close()
    else:  # pragma: no cover
        raise ValueError(how)
    return how


@handler("faults.poison_session")
def poison_session(payload: dict[str, Any]) -> str:
    """Leave the connection in a session state that refuses writes (the worker records
    failures on this thread's connection), then return or raise."""
    from django.db import connection

    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                {"read_only": "SET default_transaction_read_only = on",
                 "search_path": "SET search_path TO pg_catalog"}[payload["how"]]
            )  # fmt: skip
        elif connection.vendor == "mysql":  # the default database is MariaDB's search_path
            cursor.execute(
                {"read_only": "SET SESSION TRANSACTION READ ONLY",
                 "search_path": "USE information_schema"}[payload["how"]]
            )  # fmt: skip
        else:
            cursor.execute("PRAGMA query_only = 1")
    if payload.get("raise"):
        raise ValueError("raised after changing the session")
    how: str = payload["how"]
    return how


@handler("faults.db_hang", timeout=0.5)
def db_hang(payload: dict[str, Any]) -> str:
    """Wait in the database far past the timeout (a lock wait, a slow query), then append
    to ``path`` how the statement ended."""
    from django.db import connection

    try:
        with connection.cursor() as cursor:
            if connection.vendor == "postgresql":
                cursor.execute("SELECT pg_sleep(%s)", [payload.get("seconds", 60)])
            elif connection.vendor == "mysql":  # a killed SLEEP() or BENCHMARK() just returns
                rows = int(payload.get("seconds", 60)) * 10**7  # seconds' worth at least
                cursor.execute(f"SELECT MAX(MD5(seq)) FROM seq_1_to_{rows}")
            else:  # a statement that runs for minutes
                cursor.execute(
                    "WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r "
                    "LIMIT 10000000000) SELECT count(*) FROM r"
                )
    except Exception as exc:
        append_line(payload["path"], f"interrupted {type(exc).__name__}")
        raise
    append_line(payload["path"], "ran to the end")
    return "ran to the end"


@handler("faults.declared_timeout", timeout=0.5)
def declared_timeout(payload: dict[str, Any]) -> int:
    """Runs past its declared timeout: until ``release`` exists (if given), at most
    ``max_seconds``."""
    release = Path(payload["release"]) if payload.get("release") else None
    deadline = time.monotonic() + payload.get("max_seconds", 30)
    while time.monotonic() < deadline and not (release is not None and release.exists()):
        time.sleep(0.02)
    return os.getpid()


@handler("faults.async_block", timeout=0.5)
async def async_block(payload: dict[str, Any]) -> int:
    """An async handler that blocks its event loop (a synchronous call inside ``async def``)
    past its declared timeout, until ``release`` exists (at most ``max_seconds``)."""
    release = Path(payload["release"])
    deadline = time.monotonic() + payload.get("max_seconds", 60)
    while not release.exists() and time.monotonic() < deadline:
        time.sleep(0.05)  # never yields to the loop
    return os.getpid()


@handler("faults.unstorable_result")
def unstorable_result(payload: dict[str, Any]) -> Any:
    """Record the run (a side effect), then return what JSON cannot hold."""
    import datetime

    append_line(payload["path"], f"{payload['n']} {os.getpid()}")
    return {"datetime": datetime.datetime.now(), "set": {1}}[payload["kind"]]
