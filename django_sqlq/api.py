"""The public calls: ``enqueue()``, ``bulk_enqueue()`` and ``cancel()``, and their async
forms. Everything is validated first (bad input raises and writes nothing), then
:mod:`django_sqlq.submit` writes the jobs in the caller's transaction (same database) or on
its commit (another database)."""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, ParamSpec, TypeVar

from asgiref.sync import sync_to_async
from django.db import connections

from django_sqlq import lifecycle, validation, workflows
from django_sqlq.conf import get_settings
from django_sqlq.exceptions import (
    ConfigurationError,
    InvalidJobError,
    PayloadError,
)
from django_sqlq.jsoncodec import encode_json
from django_sqlq.models import Chain, Job, JobStatus
from django_sqlq.options import Target, checked_job, job_fields, job_type
from django_sqlq.submit import Submission, new_job, run_inline_after, submit

__all__ = [
    "CancelResult",
    "JobGroup",
    "abulk_enqueue",
    "acancel",
    "aenqueue",
    "bulk_enqueue",
    "cancel",
    "enqueue",
]

#: What ``depends_on`` lists: a Job, a job id, a Chain (``job.chain``), or a group of Jobs.
Dependency = Job | int | Chain | Sequence[Job]

P = ParamSpec("P")
R = TypeVar("R")

#: bulk_enqueue()'s unique_key: one key (or None) per payload, or a function of the payload.
UniqueKeys = Sequence[str | None] | Callable[[Any], str | None]


class JobGroup(list[Job]):
    """The jobs ``bulk_enqueue()`` wrote (a list), which can be waited for as one:
    ``enqueue(..., depends_on=[group])`` or ``group.then(...)`` runs once every job of the
    group (and every chain they start) has completed."""

    def then(self, target: Target, payload: Any = None, **options: Any) -> Job:
        """Enqueue one job that waits for every job of this group (fan-in):
        ``enqueue(target, payload, depends_on=[self], **options)``."""
        depends_on = [self, *(options.pop("depends_on", None) or ())]
        return enqueue(target, payload, depends_on=depends_on, **options)


def enqueue(
    target: Target,
    payload: Any = None,
    *,
    queue: str = "default",
    priority: int = 0,
    run_at: datetime | None = None,
    delay: float | timedelta | None = None,
    max_attempts: int | None = None,
    timeout: float | None = None,
    using: str | None = None,
    unique_key: str | None = None,
    unique_for: timedelta | None = None,
    depends_on: Sequence[Dependency] | None = None,
    on_dependency_failure: str = "fail",
) -> Job:
    """Add a job. Bad input raises here and writes nothing.

    ``target``: a registered handler name, a dotted path, or the handler itself.
    ``payload``: anything JSON can hold (``None`` stores ``{}``).
    ``using``: the alias of the caller's transaction, when the jobs table lives in another
    database and several transactions are open (by default: the first one open).
    ``unique_key``: while a job with this key is scheduled, pending or processing (and,
    with ``unique_for``, while one finished less than that long ago), write nothing and
    return that job instead; ``job.created`` tells which (True: written by this call).
    ``depends_on``: Jobs, job ids, Chains (``job.chain``) and groups (what bulk_enqueue()
    returns): the job is ``blocked`` until every one of them has completed, then runs.
    ``on_dependency_failure``: when one fails for good or is cancelled, ``"fail"`` this
    job (the default), ``"cancel"`` it, or ``"run"`` it anyway.
    """
    conf = get_settings()
    fields, payload, encoded, delay_seconds = checked_job(
        conf,
        target,
        payload,
        queue=queue,
        priority=priority,
        run_at=run_at,
        delay=delay,
        max_attempts=max_attempts,
        timeout=timeout,
    )
    dependencies = _dependencies(depends_on, on_dependency_failure)
    window = validation.check_unique(unique_key, unique_for)
    if unique_key is not None:
        fields["unique_key"] = validation.check_unique_key(unique_key)
    job = new_job(fields, payload)
    submit(
        conf.DATABASE,
        Submission([job], [encoded], dependencies, delay_seconds, window),
        using,
    )
    if conf.TESTING == "inline":
        run_inline_after(conf.DATABASE, [job], using)
    return job


def _dependencies(
    depends_on: Sequence[Dependency] | None, on_dependency_failure: str
) -> workflows.Dependencies | None:
    """enqueue()'s ``depends_on`` and ``on_dependency_failure``, checked (None: none)."""
    policy = workflows.check_policy(on_dependency_failure)
    if depends_on is None:
        return None
    targets = workflows.targets_of(depends_on, get_settings().DATABASE)
    return workflows.Dependencies(targets, policy) if targets else None


def _short_repr(value: object, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def bulk_enqueue(
    target: Target,
    payloads: Iterable[Any],
    *,
    queue: str = "default",
    priority: int = 0,
    run_at: datetime | None = None,
    delay: float | timedelta | None = None,
    max_attempts: int | None = None,
    timeout: float | None = None,
    using: str | None = None,
    unique_key: UniqueKeys | None = None,
    unique_for: timedelta | None = None,
    depends_on: Sequence[Dependency] | None = None,
    on_dependency_failure: str = "fail",
) -> JobGroup:
    """Add one job per payload, all of one type, in one statement (a few for huge lists).

    Every payload is checked before anything is written: one bad payload writes no job.
    ``unique_key``: a list of keys (``None`` for no key), one per payload, or a function
    that returns the key (or ``None``) of a payload. Each job with a key is one INSERT of
    its own, as in enqueue(); a key a live job holds, or one given twice in the call, gives
    that job back in the key's places (``job.created`` False) instead of writing another.
    Returns the jobs as a :class:`JobGroup` (a list), which other
    jobs can wait for: ``enqueue(..., depends_on=[group])``, or ``group.then(...)``.
    ``depends_on``, ``on_dependency_failure``: as enqueue() takes them, for every job.
    """
    if isinstance(payloads, (str, bytes, bytearray, Mapping)) or not isinstance(
        payloads, Iterable
    ):
        # A string or a dict is iterable, so it made one job per character or per key: the
        # mistake of passing one payload where the list of them goes.
        raise PayloadError(
            "bulk_enqueue() takes a list (or other iterable) of payloads, one per job; got "
            f"{type(payloads).__name__} {_short_repr(payloads)}. For one job, use enqueue()."
        )
    conf = get_settings()
    type_name = job_type(conf, target)
    dependencies = _dependencies(depends_on, on_dependency_failure)
    items: Sequence[Any] = [{} if p is None else p for p in payloads]
    encoded: list[str] = []
    for index, payload in enumerate(items):
        try:
            encoded.append(encode_json(payload, limit=conf.MAX_PAYLOAD_BYTES))
        except PayloadError as exc:
            raise PayloadError(f"payloads[{index}]: {exc}") from exc
    fields = job_fields(
        conf,
        type_name,
        queue=queue,
        priority=priority,
        run_at=run_at,
        delay=delay,
        max_attempts=max_attempts,
        timeout=timeout,
    )
    window = validation.check_unique(unique_key, unique_for)
    keys = _unique_keys(unique_key, items)
    delay_seconds = fields.pop("_delay_seconds", None)
    jobs = JobGroup(new_job(fields, payload) for payload in items)
    if keys is not None:
        for job, key in zip(jobs, keys, strict=True):
            job.unique_key = key
    if jobs:
        submit(
            conf.DATABASE,
            Submission(jobs, encoded, dependencies, delay_seconds, window),
            using,
        )
        if conf.TESTING == "inline":
            run_inline_after(conf.DATABASE, jobs, using)
    return jobs


def _unique_keys(unique_key: UniqueKeys | None, items: Sequence[Any]) -> list[str | None] | None:
    """bulk_enqueue()'s ``unique_key``, as one checked key (or None) per payload."""
    if unique_key is None:
        return None
    if isinstance(unique_key, (str, bytes)) or not (
        callable(unique_key) or isinstance(unique_key, Sequence)
    ):
        raise InvalidJobError(
            "bulk_enqueue()'s unique_key is a list of keys, one per payload, or a function "
            f"of the payload that returns its key; got {_short_repr(unique_key)}. One key for "
            "every payload would make one job: use enqueue()."
        )
    if callable(unique_key):
        keys = [unique_key(payload) for payload in items]
    else:
        keys = list(unique_key)
        if len(keys) != len(items):
            raise InvalidJobError(
                f"bulk_enqueue() got {len(items)} payloads and {len(keys)} unique keys: give "
                "one key (or None) per payload."
            )
    checked: list[str | None] = []
    for index, key in enumerate(keys):
        try:
            checked.append(None if key is None else validation.check_unique_key(key))
        except InvalidJobError as exc:
            raise InvalidJobError(f"unique_key of payloads[{index}]: {exc}") from exc
    return checked


def _awaitable(func: Callable[P, R], name: str, doc: str) -> Callable[P, Coroutine[Any, Any, R]]:
    """``func`` for async code, with ``func``'s signature: it runs through
    ``sync_to_async(thread_sensitive=True)``, in the thread where the request's other
    synchronous database work runs, on the same connections."""

    @functools.wraps(func)
    async def call(*args: P.args, **kwargs: P.kwargs) -> R:
        return await sync_to_async(func, thread_sensitive=True)(*args, **kwargs)

    call.__name__ = call.__qualname__ = name
    call.__doc__ = doc
    return call


aenqueue = _awaitable(
    enqueue,
    "aenqueue",
    """``enqueue()`` for async code (an ``async def`` view), as ``Task.aenqueue`` is.

    It runs ``enqueue()`` through ``sync_to_async(thread_sensitive=True)``: in the thread
    where the request's other synchronous database work runs, on the same connections. Django
    has no transactions in async code, so outside ``sync_to_async`` there is no open
    transaction and the job is committed before this returns. For "the job exists if and only
    if my writes commit", put the writes and ``enqueue()`` in one synchronous function under
    ``transaction.atomic()`` and await it through ``sync_to_async``.
    """,
)

abulk_enqueue = _awaitable(
    bulk_enqueue,
    "abulk_enqueue",
    """``bulk_enqueue()`` for async code; the same guarantees as :func:`aenqueue`. The jobs
    are written in one transaction: all of them, or (on any error) none.""",
)


class CancelResult(enum.StrEnum):
    """What :func:`cancel` did. A ``str``: ``result == "requested"`` works too."""

    #: The job was blocked, scheduled or pending: it is ``cancelled`` now and will not run.
    CANCELLED = "cancelled"
    #: The job is running: its worker is asked to stop it. Within about a second the worker
    #: sets the handler's ``cancel_requested`` flag (and cancels an async handler's task);
    #: the job ends ``cancelled``, even if its handler runs to its end.
    REQUESTED = "requested"
    #: The job had already finished (completed, failed or cancelled): nothing changed.
    FINISHED = "finished"
    #: No job has that id (never existed, or deleted/pruned): nothing changed.
    MISSING = "missing"


# Times cancel() reads the job again when it changed status between its two statements (a
# worker claimed it, or retried it): each try either changes it or finds it finished.
CANCEL_TRIES = 3
BIGINT_MAX = 2**63 - 1


def _cancel_target(job_or_id: object, using: str | None) -> tuple[int, str]:
    """(job id, alias) for cancel()'s arguments, or TypeError/ValueError saying why not."""
    if using is not None and using not in connections:
        raise ConfigurationError(f"cancel(using={using!r}): no such database alias.")
    if isinstance(job_or_id, Job):
        if job_or_id.pk is None:
            raise ValueError("cancel() was given a Job that is not saved (it has no id).")
        return job_or_id.pk, using or job_or_id._state.db or get_settings().DATABASE
    if isinstance(job_or_id, int) and not isinstance(job_or_id, bool):
        return job_or_id, using or get_settings().DATABASE
    raise TypeError(f"cancel() takes a Job or a job id (an int), got {job_or_id!r}.")


def cancel(job_or_id: Job | int, *, using: str | None = None) -> CancelResult:
    """Cancel a job: at once if it has not started, else ask its worker to stop it.

    ``job_or_id``: a Job or its id. ``using``: the alias of the database that holds the
    jobs table (default: the Job's own, else ``SQLQ["DATABASE"]``). Returns a
    :class:`CancelResult`: ``CANCELLED`` (it will never run), ``REQUESTED`` (it is running;
    it will end ``cancelled``), ``FINISHED`` or ``MISSING`` (nothing changed). Cancelling a
    job whose cancel was already requested answers ``REQUESTED`` again (the first
    request's time is kept).
    """
    job_id, alias = _cancel_target(job_or_id, using)
    if not 0 < job_id <= BIGINT_MAX:
        return CancelResult.MISSING  # no job can have that id (PostgreSQL would refuse it)
    for _ in range(CANCEL_TRIES):
        if lifecycle.cancel([job_id], alias=alias).changed:
            return CancelResult.CANCELLED
        if lifecycle.request_cancel([job_id], alias=alias).changed:
            return CancelResult.REQUESTED
        status = Job.objects.using(alias).filter(pk=job_id).values_list("status", flat=True)
        found = status.first()
        if found is None:
            return CancelResult.MISSING
        if found in (JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELLED):
            return CancelResult.FINISHED
        # Scheduled, pending or processing again: it changed between the statements.
    raise RuntimeError(
        f"Job id={job_id} changed status {CANCEL_TRIES} times while cancel() ran; try again."
    )


acancel = _awaitable(
    cancel,
    "acancel",
    """``cancel()`` for async code, through ``sync_to_async(thread_sensitive=True)``.""",
)
