"""Handlers used by the test suite; the worker discovers them like any app's jobs.py."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from django_sqlq import handler


@handler("tests.noop")
def noop(payload: Any) -> None:  # noqa: ARG001 (a handler)
    return None


@handler("tests.echo")
def echo(payload: Any) -> Any:
    return payload


@handler("tests.add")
def add(payload: dict[str, int]) -> int:
    return payload["a"] + payload["b"]


class Boom(Exception):
    pass


@handler("tests.boom")
def boom(payload: Any) -> None:
    raise Boom(f"it went boom: {payload.get('why', 'no reason')}")


@handler("tests.record")
def record(payload: dict[str, Any]) -> str:
    """Append a line to a file, so tests can count how often each job really ran."""
    line = f"{payload['n']} {os.getpid()}\n"
    with Path(payload["path"]).open("a") as fh:
        fh.write(line)
    return line.strip()


@handler("tests.sleep_then_record")
def sleep_then_record(payload: dict[str, Any]) -> str:
    """Announce the start in a file, wait until a release file appears (or a timeout),
    then record. Lets tests act while a job is known to be running."""
    started = Path(payload["started"])
    started.write_text(str(os.getpid()))
    release = Path(payload["release"]) if payload.get("release") else None
    deadline = time.monotonic() + payload.get("max_seconds", 30)
    while time.monotonic() < deadline:
        if release is not None and release.exists():
            break
        time.sleep(0.02)
    with Path(payload["path"]).open("a") as fh:
        fh.write(f"{payload['n']} {os.getpid()}\n")
    return "done"


@handler()
def by_path(payload: Any) -> str:  # noqa: ARG001 (a handler)
    return "by path"


def not_a_handler(payload: Any) -> str:  # noqa: ARG001 (a handler)
    return "should never run"


@handler("tests.unserialisable_result")
def unserialisable_result(payload: Any) -> object:  # noqa: ARG001 (a handler)
    return {1, 2, 3}


@handler("tests.async_add")
async def async_add(payload: dict[str, int]) -> int:
    return payload["a"] + payload["b"]


@handler("tests.with_context", takes_context=True)
def with_context(payload: Any, context: Any) -> dict[str, Any]:  # noqa: ARG001 (a handler)
    return {"attempt": context.attempt, "job_id": context.job_id, "queue": context.queue}


from tests.testapp import (  # noqa: E402, F401
    adversary2_workflow_jobs,
    adversary_workflow_jobs,
    atomic_jobs,
    contention_jobs,
    fault_jobs,
    step_jobs,
    workflow_jobs,
)

# -- cancel and progress (issue 15): each announces its start in payload["started"] and
# waits (at most a minute) for something, so that a test acts while it runs --------------


def _mark(path: str, text: str = "") -> None:
    Path(path).write_text(text)


@handler("tests.cancel_cooperative", takes_context=True)
def cancel_cooperative(payload: dict[str, Any], context: Any) -> str:
    """Report progress and stop at the next checkpoint once its job is cancelled."""
    _mark(payload["started"])
    deadline = time.monotonic() + 60
    step = 0
    while time.monotonic() < deadline:
        step += 1
        context.set_progress(min(step / 1000, 1.0), f"step {step}")
        if context.cancel_requested:
            _mark(payload["saw"], str(step))
        context.check_cancelled()
        time.sleep(0.02)
    return "ran out of time"


@handler("tests.cancel_ignored", takes_context=True)
def cancel_ignored(payload: dict[str, Any], context: Any) -> str:
    """Notice the cancel (writes payload["saw"]) but run on until payload["release"]."""
    _mark(payload["started"])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not Path(payload["release"]).exists():
        if context.cancel_requested:
            _mark(payload["saw"])
        time.sleep(0.02)
    return "ran to the end"


@handler("tests.cancel_async")
async def cancel_async(payload: dict[str, Any]) -> str:
    """Wait on the event loop; record the CancelledError it gets when its job is cancelled."""
    import asyncio

    _mark(payload["started"])
    try:
        await asyncio.sleep(60)
    except asyncio.CancelledError:
        _mark(payload["saw"])
        raise
    return "not cancelled"


@handler("tests.progress", takes_context=True)
def progress(payload: dict[str, Any], context: Any) -> str:
    """Report 40%, wait for payload["release"], report 100% and finish."""
    context.set_progress(0.4, "resized 40 of 100")
    _mark(payload["started"])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not Path(payload["release"]).exists():
        time.sleep(0.02)
    context.set_progress(1.0, "resized 100 of 100")
    return "done"


@handler("tests.span")
def span(payload: dict[str, Any]) -> None:
    """Append "+n" when it starts and "-n" when it ends (O_APPEND: one order for every
    process), sleeping ``seconds`` between: tests replay the file to find the most jobs
    that ever ran at once."""
    with Path(payload["path"]).open("a") as fh:
        fh.write(f"+{payload['n']}\n")
    time.sleep(payload.get("seconds", 0.1))
    with Path(payload["path"]).open("a") as fh:
        fh.write(f"-{payload['n']}\n")
