"""Helpers for testing code that enqueues jobs.

- :func:`assert_enqueued`, :func:`refute_enqueued`, :func:`enqueued_jobs`: look for waiting
  jobs by type, payload (a subset), queue and count.
- :func:`run_jobs` and :func:`run_job`: run due jobs (or one job) synchronously, in the
  test's own thread, connection and transaction, with the real handlers and the real
  lifecycle writes, so a plain ``TestCase`` (or ``@pytest.mark.django_db``) works.
- :func:`inline`: ``SQLQ["TESTING"] = "inline"`` for a block or a test, so that ``enqueue()``
  runs each job at once.

:func:`run_jobs` and :func:`run_job` live in :mod:`django_sqlq.inline`, which ``enqueue()``
uses in inline mode.

The pytest plugin (``django_sqlq.pytest_plugin``, registered through the ``pytest11`` entry
point) offers them as the ``sqlq`` fixture.
"""

from __future__ import annotations

import contextlib
import difflib
import json
from collections.abc import Callable
from typing import Any, TypeAlias, cast

from django.conf import settings
from django.test.utils import override_settings

from django_sqlq import compat, registry
from django_sqlq.conf import get_settings
from django_sqlq.exceptions import UnknownHandlerError
from django_sqlq.inline import RunResult, run_job, run_jobs
from django_sqlq.models import Job, JobStatus

__all__ = [
    "RunResult",
    "assert_enqueued",
    "enqueued_jobs",
    "inline",
    "refute_enqueued",
    "run_job",
    "run_jobs",
]

# The statuses of a job that waits to run ("enqueued"): waiting for its time, its turn or
# other jobs.
ENQUEUED_STATUSES: tuple[str, ...] = (JobStatus.BLOCKED, JobStatus.PENDING, JobStatus.SCHEDULED)

# A job type: a registered name, a dotted path, the handler function, or a @task.
Target: TypeAlias = "str | Callable[..., Any] | compat.Task[Any, Any]"


def _type_name(target: Target) -> str:
    if compat.AVAILABLE and isinstance(target, compat.Task):
        # A @task: its jobs' type is the function's module path (see backend.enqueue).
        return str(target.module_path)
    return registry.type_name_for(cast("str | Callable[..., Any]", target))


def _check_known(name: str) -> None:
    try:
        registry.get(registry.type_name_for(name))
        return
    except UnknownHandlerError:
        registry.autodiscover()  # the installed apps' jobs.py, as the worker imports them
    try:
        registry.get(registry.type_name_for(name))
    except UnknownHandlerError:
        close = difflib.get_close_matches(name, sorted(registry.registered()), n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ValueError(
            f"refute_enqueued({name!r}): no handler or task is registered for this job type, "
            f"so no job of it could be found, whatever the code under test does.{hint}"
        ) from None


def _matches(payload: Any, subset: Any) -> bool:
    """``subset`` is a dict whose keys all appear in ``payload`` with equal values, or equals
    ``payload``; equal as JSON values (``True`` is not ``1``, a tuple is the list JSON
    stored)."""
    # Not JSON: compared as it is (and never equal to what JSON stored).
    with contextlib.suppress(TypeError, ValueError):
        subset = json.loads(json.dumps(subset))
    if isinstance(subset, dict) and isinstance(payload, dict):
        return all(key in payload and _same(payload[key], value) for key, value in subset.items())
    return _same(payload, subset)


def _same(a: Any, b: Any) -> bool:
    """``a == b`` as JSON values: a boolean equals only a boolean (Python's ``True == 1``)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[key], b[key]) for key in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


# -- assertions ---------------------------------------------------------------------------


def enqueued_jobs(
    target: Target | None = None,
    *,
    payload: Any = None,
    queue: str | None = None,
    using: str | None = None,
) -> list[Job]:
    """The jobs waiting to run (pending, whatever their scheduled time) that match: of type
    ``target`` (a name, dotted path or the handler), whose payload contains ``payload``
    (for a dict: these keys with these values; otherwise: equal), on ``queue``. Oldest
    first."""
    jobs = Job.objects.using(using or get_settings().DATABASE).filter(status__in=ENQUEUED_STATUSES)
    if target is not None:
        jobs = jobs.filter(type=_type_name(target))
    if queue is not None:
        jobs = jobs.filter(queue=queue)
    found = list(jobs.order_by("id"))
    if payload is not None:
        found = [job for job in found if _matches(job.payload, payload)]
    return found


def _describe(target: Target | None, payload: Any, queue: str | None) -> str:
    parts = [f"type={_type_name(target)!r}" if target is not None else "any type"]
    if payload is not None:
        parts.append(f"payload containing {payload!r}")
    if queue is not None:
        parts.append(f"queue={queue!r}")
    return ", ".join(parts)


def _listing(using: str | None) -> str:
    waiting = enqueued_jobs(using=using)
    if not waiting:
        return "No job is enqueued."
    lines = [
        f"  #{job.pk} {job.type} queue={job.queue} payload={job.payload!r}" for job in waiting
    ]
    return f"Enqueued jobs ({len(waiting)}):\n" + "\n".join(lines)


def assert_enqueued(
    target: Target | None = None,
    *,
    payload: Any = None,
    queue: str | None = None,
    count: int | None = None,
    using: str | None = None,
) -> list[Job]:
    """Fail unless a job matching (see :func:`enqueued_jobs`) is enqueued; exactly ``count``
    of them if given. Returns the matching jobs."""
    if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 0):
        raise ValueError(f"count must be a whole number >= 0, got {count!r}.")
    found = enqueued_jobs(target, payload=payload, queue=queue, using=using)
    if (count is None and not found) or (count is not None and len(found) != count):
        wanted = "at least one job" if count is None else f"{count} job(s)"
        raise AssertionError(
            f"Expected {wanted} with {_describe(target, payload, queue)}; found "
            f"{len(found)}.\n{_listing(using)}"
        )
    return found


def refute_enqueued(
    target: Target | None = None,
    *,
    payload: Any = None,
    queue: str | None = None,
    using: str | None = None,
) -> None:
    """Fail if a job matching (see :func:`enqueued_jobs`) is enqueued. A job type named by
    a string no handler or task answers to is a ``ValueError``: a misspelt type would make
    the check pass whatever the code under test enqueues."""
    if isinstance(target, str):
        _check_known(target)
    found = enqueued_jobs(target, payload=payload, queue=queue, using=using)
    if found:
        raise AssertionError(
            f"Expected no job with {_describe(target, payload, queue)}; found "
            f"{len(found)}.\n{_listing(using)}"
        )


def inline() -> override_settings:
    """``SQLQ["TESTING"] = "inline"``, as a decorator (of a test function or class) or a
    context manager: ``enqueue()`` and ``bulk_enqueue()`` run each job at once."""
    current = dict(getattr(settings, "SQLQ", {}) or {})
    return override_settings(SQLQ={**current, "TESTING": "inline"})
