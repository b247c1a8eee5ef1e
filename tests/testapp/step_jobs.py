"""Handlers with durable steps (tests/steps). Imported by jobs.py, so the worker discovers
them.

``steps.flow`` is an order flow as a shop writes it: charge (a step that writes an Order row
``"<tag> charge"``), a sleep, a wait for the payment's event, then ship (a step that writes
``"<tag> ship"``). The payload picks where it crashes: ``"crash": "in-charge"`` kills the
worker (SIGKILL) inside the charge step, after its write and before its record commits;
``"between"`` right after the charge step committed. Each crash happens once per job (a
marker file under ``payload["dir"]``), so the next attempt goes on."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

from django.db import transaction

from django_sqlq import handler
from django_sqlq.exceptions import EventTimeout
from django_sqlq.jobcontext import JobContext
from tests.testapp.fault_jobs import append_line
from tests.testapp.models import Order


def _crash_once(payload: dict[str, Any], where: str, context: JobContext) -> None:
    if payload.get("crash") != where:
        return
    marker = Path(payload["dir"]) / f"crashed-{context.job_id}-{where}"
    if marker.exists():
        return
    marker.touch()
    os.kill(os.getpid(), signal.SIGKILL)


def _write(payload: dict[str, Any], what: str, context: JobContext) -> int:
    row = Order.objects.create(item=f"{payload['tag']} {what}")
    _crash_once(payload, f"in-{what}", context)
    return row.pk


@handler("steps.flow", takes_context=True)
def flow(payload: dict[str, Any], context: JobContext) -> dict[str, Any]:
    if payload.get("log"):
        append_line(payload["log"], f"{context.job_id} {context.attempt} {os.getpid()}")
    charged = context.step("charge", _write, payload, "charge", context)
    _crash_once(payload, "between", context)
    if payload.get("sleep") is not None:
        context.sleep("nap", payload["sleep"])
    paid: Any = None
    if payload.get("key"):
        try:
            paid = context.wait_for_event("paid", payload["key"], timeout=payload.get("timeout"))
        except EventTimeout:
            paid = "timed out"
    shipped = context.step("ship", _write, payload, "ship", context)
    if payload.get("fail_once") and context.attempt == 1:
        raise RuntimeError("failing after the steps, once")
    return {"charged": charged, "paid": paid, "shipped": shipped}


@handler("steps.twice", takes_context=True)
def twice(payload: Any, context: JobContext) -> None:  # noqa: ARG001 (a handler)
    context.step("same", lambda: 1)
    context.step("same", lambda: 2)


@handler("steps.not_json", takes_context=True)
def not_json(payload: dict[str, Any], context: JobContext) -> None:
    context.step("set", lambda: Order.objects.create(item=payload["tag"]) and {1, 2})


@handler("steps.sleep_in_transaction", takes_context=True)
def sleep_in_transaction(payload: Any, context: JobContext) -> None:  # noqa: ARG001
    with transaction.atomic():
        context.sleep("nap", 60)


@handler("steps.sleep_atomic", takes_context=True, atomic=True)
def sleep_atomic(payload: Any, context: JobContext) -> None:  # noqa: ARG001
    context.sleep("nap", 60)


@handler("steps.nap", takes_context=True)
def nap(payload: dict[str, Any], context: JobContext) -> str:
    context.sleep("nap", payload["seconds"])
    return "rested"


@handler("steps.emit")
def emit(payload: dict[str, Any]) -> bool:
    from django_sqlq import emit_event

    return emit_event(payload["key"], payload.get("payload"))


@handler("steps.swallow", takes_context=True)
def swallow(payload: Any, context: JobContext) -> str:  # noqa: ARG001 (a handler)
    try:
        context.sleep("nap", 3600)
    except BaseException:
        return "woke an hour early"
    return "slept"
