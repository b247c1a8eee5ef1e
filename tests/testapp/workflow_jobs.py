"""Handlers for the workflow tests (chains and dependencies, issue 16). Imported by jobs.py,
so the worker discovers them.

Each run appends ``"<name> <pid>"`` to the file ``payload["path"]`` (one ``write()`` on an
``O_APPEND`` descriptor: whole lines, even from a process killed with SIGKILL). The atomic
step writes an Order row ``"<tag> <n> <attempt> <pid>"`` in its transaction instead.
"""

from __future__ import annotations

import os
import time
from typing import Any

from django_sqlq import handler
from django_sqlq.jobcontext import JobContext
from tests.testapp.fault_jobs import append_line
from tests.testapp.models import Order


@handler("wf.step", takes_context=True)
def step(payload: dict[str, Any], context: JobContext) -> int:
    """Step ``n`` of a chain of ``of`` steps: record the run (after ``sleep`` seconds), then
    continue with step n + 1 (with ``max_attempts``, if given) unless it is the last.
    ``started`` (optional) gets the same line
    before the sleep, so a test can tell a step is running."""
    if payload.get("started"):
        append_line(payload["started"], f"{payload['n']} {os.getpid()}")
    if payload.get("sleep"):
        time.sleep(payload["sleep"])
    append_line(payload["path"], f"{payload['n']} {os.getpid()}")
    if payload["n"] + 1 < payload["of"]:
        context.continue_with(
            "wf.step",
            {**payload, "n": payload["n"] + 1},
            max_attempts=payload.get("max_attempts"),
        )
    return int(payload["n"])


@handler("wf.record")
def record(payload: dict[str, Any]) -> str:
    """Record the run under ``name`` (after ``sleep`` seconds, if given); raise if ``fail``
    is set (after recording)."""
    if payload.get("sleep"):
        time.sleep(payload["sleep"])
    append_line(payload["path"], f"{payload['name']} {os.getpid()}")
    if payload.get("fail"):
        raise RuntimeError(f"{payload['name']} fails on purpose")
    return str(payload["name"])


@handler("wf.continue_then_fail", takes_context=True)
def continue_then_fail(payload: dict[str, Any], context: JobContext) -> None:
    """Ask for a next step, then raise: the next step must not be written."""
    context.continue_with("wf.record", {"path": payload["path"], "name": "never"})
    raise RuntimeError("fails after continue_with")


@handler("wf.continue_twice", takes_context=True)
def continue_twice(payload: dict[str, Any], context: JobContext) -> None:
    context.continue_with("wf.record", {"path": payload["path"], "name": "first"})
    context.continue_with("wf.record", {"path": payload["path"], "name": "second"})


@handler("wf.atomic_step", atomic=True, takes_context=True)
def atomic_step(payload: dict[str, Any], context: JobContext) -> int:
    """Step ``n`` of a chain of ``of`` atomic steps: record the run in ``path`` (if given),
    write the Order row, continue with step n + 1 (as wf.step does) unless it is the last,
    then raise if this step is ``fail_at`` and this attempt is at most ``fail_attempts``
    (default 1), or sleep ``sleep`` seconds (if given) and return."""
    n = payload["n"]
    if payload.get("path"):
        append_line(payload["path"], f"{n} {os.getpid()}")
    Order.objects.create(item=f"{payload['tag']} {n} {context.attempt} {os.getpid()}")
    if n + 1 < payload["of"]:
        context.continue_with(
            "wf.atomic_step", {**payload, "n": n + 1}, max_attempts=payload.get("max_attempts")
        )
    if payload.get("fail_at") == n and context.attempt <= payload.get("fail_attempts", 1):
        raise RuntimeError(f"step {n} fails attempt {context.attempt} on purpose")
    if payload.get("sleep"):
        time.sleep(payload["sleep"])
    return int(n)
