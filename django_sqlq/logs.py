"""What every log line about a job carries in ``extra``, so that JSON log formatters (and
any ``%(job_id)s`` in a format string) pick it up: the job's id, type, queue and attempt.

The keys are ``job_id``, ``job_type``, ``job_queue`` and ``job_attempt``: attributes of the
``LogRecord``, prefixed so that they never collide with the record's own (``id`` and
``type`` would not clash, but ``queue`` reads as the handler's queue in some formatters).
"""

from __future__ import annotations

from typing import Any, Protocol

#: The ``extra`` keys, in order.
JOB_FIELDS = ("job_id", "job_type", "job_queue", "job_attempt")


class _JobLike(Protocol):
    @property
    def id(self) -> int: ...
    @property
    def type(self) -> str: ...
    @property
    def queue(self) -> str: ...
    @property
    def attempts(self) -> int: ...


def job_extra(job_id: Any, job_type: str, queue: str, attempt: int) -> dict[str, Any]:
    """The ``extra`` of a log line about one job."""
    return {"job_id": job_id, "job_type": job_type, "job_queue": queue, "job_attempt": attempt}


def extra_for(job: _JobLike) -> dict[str, Any]:
    """The ``extra`` of a log line about ``job`` (a claimed job, or a Job)."""
    return {
        "job_id": job.id,
        "job_type": job.type,
        "job_queue": job.queue,
        "job_attempt": job.attempts,
    }
