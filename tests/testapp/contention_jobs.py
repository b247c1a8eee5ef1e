"""Handlers for tests/workflows/test_contention_adversary.py (an adversary's process
tests):
work that reports progress while it runs, optionally continues a chain, plain or atomic. Each run
appends ``"<name> <pid>"`` to ``payload["path"]`` at its end."""

from __future__ import annotations

import os
import time
from typing import Any

from django_sqlq import handler
from django_sqlq.jobcontext import JobContext
from tests.testapp.fault_jobs import append_line
from tests.testapp.models import Order


def _work(payload: dict[str, Any], context: JobContext) -> str:
    total = float(payload.get("sleep", 0))
    slices = max(1, int(total / 0.05))
    for i in range(slices):
        context.set_progress((i + 1) / slices, f"{payload['name']} {i + 1}/{slices}")
        if total:
            time.sleep(total / slices)
    append_line(payload["path"], f"{payload['name']} {os.getpid()}")
    left = int(payload.get("next", 0))
    if left > 0:
        context.continue_with(
            context_type(payload),
            {**payload, "name": f"{payload['name']}+", "next": left - 1},
        )
    return str(payload["name"])


def context_type(payload: dict[str, Any]) -> str:
    return "contention.atomic" if payload.get("atomic") else "contention.work"


@handler("contention.work", takes_context=True)
def work(payload: dict[str, Any], context: JobContext) -> str:
    return _work(payload, context)


@handler("contention.atomic", atomic=True, takes_context=True)
def atomic(payload: dict[str, Any], context: JobContext) -> str:
    Order.objects.create(item=f"contention {payload['name']} {context.attempt}")
    return _work(payload, context)
