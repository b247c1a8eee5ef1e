"""A handler's hooks (``on_start``, ``on_finish``) and the ``JobContext`` they and
``takes_context`` handlers get. A hook that raises is logged, never the job's outcome."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from django_sqlq import registry
from django_sqlq.control import JobControl
from django_sqlq.db.columns import ClaimedJob
from django_sqlq.logs import job_extra

logger = logging.getLogger("django_sqlq.worker")


def job_context(
    job: ClaimedJob, worker_id: str, database: str, control: JobControl | None = None
) -> registry.JobContext:
    return registry.JobContext(
        control=control,
        job_id=job.id,
        type=job.type,
        queue=job.queue,
        attempt=job.attempts,
        max_attempts=job.max_attempts,
        worker_id=worker_id,
        database=database,
    )


def call_hook(worker_id: str, hook: Callable[..., None] | None, *args: Any) -> None:
    """Call ``hook(context, ...)``; log what it raises, with the job (its first argument)."""
    if hook is None:
        return
    try:
        hook(*args)
    except Exception:
        context = args[0] if args else None
        extra = (
            job_extra(context.job_id, context.type, context.queue, context.attempt)
            if isinstance(context, registry.JobContext)
            else None
        )
        logger.exception("Worker %s: a handler hook raised", worker_id, extra=extra)
