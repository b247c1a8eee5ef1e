"""Atomic handlers for tests/worker/test_atomic.py. Imported by jobs.py, so the worker discovers
them. Each run writes one Order row named ``"<tag> <attempt> <pid>"`` in its transaction,
then announces itself in a file (``started``), so a test knows the row is written but not
committed."""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import Any

from django.db import DatabaseError, transaction

from django_sqlq import enqueue, handler
from django_sqlq.jobcontext import JobContext
from tests.testapp.fault_jobs import append_line
from tests.testapp.models import Order


def _write_and_announce(payload: dict[str, Any], context: JobContext) -> None:
    Order.objects.create(item=f"{payload['tag']} {context.attempt} {os.getpid()}")
    if payload.get("started"):
        append_line(payload["started"], f"{context.attempt} {os.getpid()}")


def _wait_for_release(payload: dict[str, Any]) -> None:
    release = Path(payload["release"]) if payload.get("release") else None
    deadline = time.monotonic() + payload.get("max_seconds", 30)
    while release is not None and not release.exists() and time.monotonic() < deadline:
        time.sleep(0.02)


@handler("atomic.write", atomic=True, takes_context=True)
def write(payload: dict[str, Any], context: JobContext) -> int:
    """Write the row, wait for ``release`` (if named), then return, or raise if ``fail``."""
    _write_and_announce(payload, context)
    if payload.get("follow_up"):
        # Written in the handler's transaction: exists only if it commits.
        enqueue("faults.record", {"n": context.job_id, "path": payload["follow_up"]})
    _wait_for_release(payload)
    if payload.get("fail"):
        raise RuntimeError("atomic.write failed as asked")
    if payload.get("ended"):
        append_line(payload["ended"], f"{context.attempt} {os.getpid()}")
    return os.getpid()


@handler("atomic.timed", atomic=True, takes_context=True, timeout=1)
def timed(payload: dict[str, Any], context: JobContext) -> int:
    """Write the row, run past the 1 s timeout (until ``release``), then try to finish."""
    _write_and_announce(payload, context)
    _wait_for_release(payload)
    try:
        Order.objects.create(item=f"{payload['tag']} after-timeout")
    finally:
        append_line(payload["ended"], f"{context.attempt} {os.getpid()}")
    return os.getpid()


@handler("atomic.lock_waiter", atomic=True, takes_context=True, timeout=1)
def lock_waiter(payload: dict[str, Any], context: JobContext) -> int:
    """Write the row, then wait past the 1 s timeout for the lock of the Order row named
    ``locked`` (another transaction holds it); when that wait is stopped, carry on as careless
    code does: write again and return."""
    _write_and_announce(payload, context)
    try:
        Order.objects.select_for_update().get(item=payload["locked"])
    except DatabaseError:
        with contextlib.suppress(DatabaseError):
            Order.objects.create(item=f"{payload['tag']} after-timeout")
    finally:
        append_line(payload["ended"], f"{context.attempt} {os.getpid()}")
    return os.getpid()


@handler("atomic.left_open", atomic=True, takes_context=True)
def left_open(payload: dict[str, Any], context: JobContext) -> None:
    """Write the row inside an atomic block it never exits."""
    transaction.atomic().__enter__()
    _write_and_announce(payload, context)


@handler("atomic.until_cancelled", atomic=True, takes_context=True)
def until_cancelled(payload: dict[str, Any], context: JobContext) -> None:
    """Write the row, wait until the worker learns of the job's cancel, then stop at a
    checkpoint (``check``) or return."""
    _write_and_announce(payload, context)
    deadline = time.monotonic() + 30
    while not context.cancel_requested and time.monotonic() < deadline:
        time.sleep(0.02)
    if payload.get("check"):
        context.check_cancelled()


@handler("atomic.bad_result", atomic=True, takes_context=True)
def bad_result(payload: dict[str, Any], context: JobContext) -> object:
    """Write the row, then return what JSON cannot hold."""
    _write_and_announce(payload, context)
    return {1, 2}
