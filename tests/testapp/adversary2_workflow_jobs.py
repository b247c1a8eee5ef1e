"""Handlers for tests/workflows/test_workflows_adversary2.py. Imported by jobs.py, so worker
processes discover them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django_sqlq import handler
from django_sqlq.jobcontext import JobContext


@handler("advwf2.continue_unless_broken", takes_context=True)
def continue_unless_broken(payload: dict[str, Any], context: JobContext) -> int:
    """Continue with wf.record ``next``, then raise unless the file ``fixed`` exists (an
    operator "fixes" the cause, then retries the step)."""
    context.continue_with("wf.record", {"path": payload["path"], "name": "next"})
    if not Path(payload["fixed"]).exists():
        raise RuntimeError("broken until fixed")
    return context.attempt
