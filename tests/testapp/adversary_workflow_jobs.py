"""Handlers for tests/workflows/test_workflows_adversary.py (chains and dependencies as
careless code and hostile input use them). Imported by jobs.py, so worker processes
discover them."""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

from django_sqlq import handler
from django_sqlq.jobcontext import JobContext
from tests.testapp.fault_jobs import append_line, await_release


@handler("advwf.continue_into", takes_context=True)
def continue_into(payload: dict[str, Any], context: JobContext) -> str:
    """Continue with ``payload["target"]``; ``bad_payload`` sends a set (not JSON)."""
    next_payload: Any = {1, 2} if payload.get("bad_payload") else payload.get("next", {})
    options: dict[str, Any] = dict(payload.get("options", {}))
    if "queue" in payload:
        options["queue"] = payload["queue"]
    if "delay_seconds" in payload:
        options["delay"] = timedelta(seconds=payload["delay_seconds"])
    context.continue_with(payload["target"], next_payload, **options)
    return "continued"


@handler("advwf.async_continue", takes_context=True)
async def async_continue(payload: dict[str, Any], context: JobContext) -> str:
    context.continue_with("wf.record", {"path": payload["path"], "name": "after-async"})
    return "async"


@handler("advwf.flaky_continue", takes_context=True)
def flaky_continue(payload: dict[str, Any], context: JobContext) -> int:
    """Continue with wf.record, then fail on the first attempt only."""
    context.continue_with("wf.record", {"path": payload["path"], "name": "next"})
    if context.attempt == 1:
        raise RuntimeError("first attempt fails after continue_with")
    return context.attempt


@handler("advwf.continue_then_block", takes_context=True)
def continue_then_block(payload: dict[str, Any], context: JobContext) -> int:
    """Continue with wf.record, announce the attempt, then wait for the release file."""
    context.continue_with("wf.record", {"path": payload["path"], "name": "next"})
    append_line(payload["started"], f"{context.attempt} {os.getpid()}")
    await_release(payload["release"], payload.get("max_seconds", 30))
    return context.attempt


@handler("advwf.recurse", takes_context=True)
def recurse(payload: dict[str, int], context: JobContext) -> int:
    """Continue with itself until step ``of`` - 1; nothing else."""
    if payload["n"] + 1 < payload["of"]:
        context.continue_with("advwf.recurse", {"n": payload["n"] + 1, "of": payload["of"]})
    return payload["n"]


@handler("advwf.async_sleep")
async def async_sleep(payload: dict[str, Any]) -> str:
    """Sleep on the event loop (for timeouts)."""
    import asyncio

    await asyncio.sleep(payload["seconds"])
    return "slept"


@handler("advwf.atomic_continue", atomic=True, takes_context=True)
def atomic_continue(payload: dict[str, Any], context: JobContext) -> int:
    """Atomic: continue with wf.record, then fail while ``attempt <= fail_attempts``."""
    context.continue_with("wf.record", {"path": payload["path"], "name": "next"})
    if context.attempt <= payload.get("fail_attempts", 0):
        raise RuntimeError(f"attempt {context.attempt} fails after continue_with")
    return context.attempt
