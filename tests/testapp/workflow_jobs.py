"""Handlers for the workflow tests (chains and dependencies, issue 16). Imported by jobs.py,
so the worker discovers them.

Each run appends ``"<name> <pid>"`` to the file ``payload["path"]`` (one ``write()`` on an
``O_APPEND`` descriptor: whole lines, even from a process killed with SIGKILL).
"""

from __future__ import annotations

import os
import time
from typing import Any

from django_sqlq import handler
from django_sqlq.registry import JobContext
from tests.testapp.fault_jobs import append_line


@handler("wf.step", takes_context=True)
def step(payload: dict[str, Any], context: JobContext) -> int:
    """Step ``n`` of a chain of ``of`` steps: record the run (after ``sleep`` seconds), then
    continue with step n + 1 unless it is the last."""
    if payload.get("sleep"):
        time.sleep(payload["sleep"])
    append_line(payload["path"], f"{payload['n']} {os.getpid()}")
    if payload["n"] + 1 < payload["of"]:
        context.continue_with("wf.step", {**payload, "n": payload["n"] + 1})
    return int(payload["n"])


@handler("wf.record")
def record(payload: dict[str, Any]) -> str:
    """Record the run under ``name``; raise if ``fail`` is set (after recording)."""
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
