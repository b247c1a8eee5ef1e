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


from tests.testapp import fault_jobs  # noqa: E402, F401


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
