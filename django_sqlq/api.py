"""enqueue() and bulk_enqueue(): validate everything first, then write in the caller's
transaction (same database) or on its commit (another database)."""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from functools import partial
from typing import Any, cast

from asgiref.sync import sync_to_async
from django.db import DatabaseError, connections, transaction

from django_sqlq import lifecycle, tracing, validation, workflows
from django_sqlq._django import unsaved_instance
from django_sqlq.conf import get_settings
from django_sqlq.db import is_missing_table, ops_for
from django_sqlq.db.base import QueueOps
from django_sqlq.exceptions import (
    ConfigurationError,
    InvalidJobError,
    PayloadError,
)
from django_sqlq.inline import run_inline
from django_sqlq.jsoncodec import encode_json
from django_sqlq.logs import job_extra
from django_sqlq.models import Chain, Job, JobStatus
from django_sqlq.options import Target, checked_job, job_fields, job_type
from django_sqlq.schema import migrate_command

__all__ = [
    "CancelResult",
    "Chain",
    "JobGroup",
    "abulk_enqueue",
    "acancel",
    "aenqueue",
    "bulk_enqueue",
    "cancel",
    "enqueue",
    "submit_job",
]

#: What ``depends_on`` lists: a Job, a job id, a Chain (``job.chain``), or a group of Jobs.
Dependency = Job | int | Chain | Sequence[Job]

# A DEBUG line per job written, with the job in ``extra`` (see django_sqlq.logs).
logger = logging.getLogger("django_sqlq.enqueue")

# Jobs per INSERT in bulk_enqueue: large enough to amortise the round trip, small enough to
# keep one statement's memory and lock time modest.
BULK_CHUNK = 10_000

# Times a unique enqueue tries again when the job that held its key was gone (deleted,
# pruned) by the time it looked for it: each try either writes the job or finds one.
UNIQUE_TRIES = 3

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


def _caller_alias(queue_alias: str, using: str | None) -> str | None:
    """The alias whose open transaction the enqueue belongs to, or None if there is none."""
    if using is not None:
        return using if connections[using].in_atomic_block else None
    if connections[queue_alias].in_atomic_block:
        return queue_alias
    for alias in connections:
        if alias in connections.settings and connections[alias].in_atomic_block:
            return alias
    return None


def _write(
    queue_alias: str,
    jobs: list[Job],
    delay_seconds: float | None = None,
    unique_for: float | None = None,
) -> None:
    """Insert the jobs with one statement per chunk (one per job with a ``unique_key``). On
    PostgreSQL the same statement sends the NOTIFY that wakes idle workers when the
    transaction commits."""
    dependencies: workflows.Dependencies | None = getattr(jobs[0], "_sqlq_deps", None)
    try:
        if dependencies is None:
            _insert(queue_alias, jobs, delay_seconds, unique_for)
        else:
            # The jobs and what they wait for commit together (or not at all: a dependency
            # that does not exist raises, and no job is left behind).
            with transaction.atomic(using=queue_alias):
                _insert(queue_alias, jobs, delay_seconds, unique_for)
                created = [job for job in jobs if job.created]
                if created:
                    workflows.attach(queue_alias, created, dependencies)
    except DatabaseError as exc:
        if is_missing_table(exc):
            raise ConfigurationError(
                f"The jobs table does not exist in database {queue_alias!r}: run "
                f"`{migrate_command(queue_alias)}` first."
            ) from exc
        raise


def _insert(
    queue_alias: str, jobs: list[Job], delay_seconds: float | None, unique_for: float | None
) -> None:
    ops = ops_for(queue_alias)
    first = jobs[0]
    fields = {
        "queue": first.queue,
        "type": first.type,
        "priority": first.priority,
        "max_attempts": first.max_attempts,
        "timeout": first.timeout,
        "scheduled_at": first.scheduled_at if isinstance(first.scheduled_at, datetime) else None,
        "unique_key": None,
        "trace": first.trace,
    }
    if len(jobs) == 1 and first.unique_key is None:
        row = ops.insert_one(payload=_json_of(first), fields=fields, delay_seconds=delay_seconds)
        _saved(first, row, queue_alias)
        return
    # The jobs without a key many per statement, in the payloads' order; then those with a
    # key, one INSERT ... ON CONFLICT each, in the keys' order: two calls over the same keys
    # then take them in one order, so that on PostgreSQL neither can wait for a key the
    # other holds while holding one it waits for (a deadlock).
    plain = [job for job in jobs if job.unique_key is None]
    if plain:
        _insert_plain(ops, queue_alias, plain, fields, delay_seconds)
    written: dict[str, Job] = {}
    for job in sorted((job for job in jobs if job.unique_key is not None), key=_key_of):
        key = _key_of(job)
        if key in written:  # the same key earlier in this bulk_enqueue(): that job
            _take(job, written[key], queue_alias)
        else:
            _insert_unique(ops, queue_alias, job, key, fields, delay_seconds, unique_for)
            written[key] = job


def _key_of(job: Job) -> str:
    return cast("str", job.unique_key)


def _insert_unique(
    ops: QueueOps,
    queue_alias: str,
    job: Job,
    key: str,
    fields: dict[str, Any],
    delay_seconds: float | None,
    unique_for: float | None,
) -> None:
    """Write ``job`` unless its ``key`` is taken; if it is, make ``job`` the job that holds
    it."""
    for _ in range(UNIQUE_TRIES):
        row = ops.insert_unique(
            payload=_json_of(job),
            fields={**fields, "unique_key": key},
            delay_seconds=delay_seconds,
            unique_for=unique_for,
        )
        if row is not None:
            _saved(job, row, queue_alias)
            return
        holder = _holder(queue_alias, key)
        if holder is not None:
            _take(job, holder, queue_alias)
            return
    raise DatabaseError(  # pragma: no cover - the key's jobs deleted between every try
        f"unique_key {key!r}: the INSERT found the key taken and then no job holding it, "
        f"{UNIQUE_TRIES} times."
    )


def _holder(queue_alias: str, key: str) -> Job | None:
    """The job that holds ``key``: the live one, else the one that finished last (the job
    unique_for found, or one that finished since the INSERT met it)."""
    sql, params = ops_for(queue_alias).holder_sql(key)
    found: list[Job] = list(Job.objects.using(queue_alias).raw(sql, params))
    return found[0] if found else None


def _take(job: Job, holder: Job, queue_alias: str) -> None:
    """Turn the unsaved ``job`` into a copy of ``holder``, the job its key returned."""
    state = job._state
    job.__dict__.update({k: v for k, v in holder.__dict__.items() if k != "_state"})
    job.__dict__.pop("_sqlq_json", None)
    state.adding = False
    state.db = queue_alias
    job.created = False


def _insert_plain(
    ops: QueueOps,
    queue_alias: str,
    jobs: list[Job],
    fields: dict[str, Any],
    delay_seconds: float | None,
) -> None:
    if len(jobs) == 1:
        row = ops.insert_one(payload=_json_of(jobs[0]), fields=fields, delay_seconds=delay_seconds)
        _saved(jobs[0], row, queue_alias)
        return
    for start in range(0, len(jobs), BULK_CHUNK):
        chunk = jobs[start : start + BULK_CHUNK]
        rows = ops.insert_many(
            payloads=[_json_of(job) for job in chunk],
            fields=fields,
            delay_seconds=delay_seconds,
        )
        for job, row in zip(chunk, rows, strict=True):
            _saved(job, row, queue_alias)


def _json_of(job: Job) -> str:
    """The payload as JSON text: encoded once, when enqueue() validated it."""
    encoded: str | None = getattr(job, "_sqlq_json", None)
    return encoded if encoded is not None else encode_json(job.payload)


_JOB_DEFAULTS: dict[str, Any] | None = None


def _new_job(fields: dict[str, Any], payload: Any, encoded: str) -> Job:
    """``Job(payload=payload, **fields)`` without Model.__init__, which costs more than the
    INSERT on SQLite (and than the whole statement when bulk_enqueue builds 100,000 jobs):
    a copy of the fields' defaults, with fresh mutable ones."""
    global _JOB_DEFAULTS
    if _JOB_DEFAULTS is None:
        _JOB_DEFAULTS = dict(Job().__dict__)
        del _JOB_DEFAULTS["_state"]
    job = unsaved_instance(Job)
    values = job.__dict__
    values.update(_JOB_DEFAULTS)
    values["errors"] = []
    values["uuid"] = None  # chosen by the database, with the id
    values.update(fields)
    values["payload"] = payload
    values["_sqlq_json"] = encoded
    return job


def _saved(job: Job, row: tuple[int, Any, Any, Any], alias: str) -> None:
    """Fill in what the database chose, as if the ORM had saved the instance."""
    job.pk, job.scheduled_at, job.created_at, job.uuid = row
    if job.scheduled_at > job.created_at:  # as the INSERT decided, by the same clock
        job.status = JobStatus.SCHEDULED
    job.updated_at = job.created_at
    job._state.adding = False
    job._state.db = alias
    job.created = True
    if logger.isEnabledFor(logging.DEBUG):
        logger.debug(
            "Job id=%s type=%s enqueued on queue %s",
            job.pk,
            job.type,
            job.queue,
            extra=job_extra(job.pk, job.type, job.queue, job.attempts),
        )


def _submit(
    queue_alias: str,
    jobs: list[Job],
    using: str | None,
    delay_seconds: float | None = None,
    unique_for: float | None = None,
) -> None:
    tracer = tracing.tracer() if tracing.ENABLED else None
    if tracer is None:
        _submit_untraced(queue_alias, jobs, using, delay_seconds, unique_for)
    else:
        with tracing.sending(tracer, jobs, jobs[0].queue, jobs[0].type):
            _submit_untraced(queue_alias, jobs, using, delay_seconds, unique_for)


def _submit_untraced(
    queue_alias: str,
    jobs: list[Job],
    using: str | None,
    delay_seconds: float | None,
    unique_for: float | None,
) -> None:
    caller = _caller_alias(queue_alias, using)
    if caller is None or caller == queue_alias:
        # Same database (or no transaction): the rows are part of the caller's transaction.
        if len(jobs) > 1 and caller is None:
            with transaction.atomic(using=queue_alias):
                _write(queue_alias, jobs, delay_seconds, unique_for)
        else:
            _write(queue_alias, jobs, delay_seconds, unique_for)
    else:
        # Another database: the jobs exist if and only if the caller's transaction commits.
        transaction.on_commit(
            partial(_write, queue_alias, jobs, delay_seconds, unique_for), using=caller
        )


def _run_inline(queue_alias: str, jobs: list[Job], using: str | None) -> None:
    """``SQLQ["TESTING"] = "inline"``: run the jobs just submitted, at once (or, when their
    rows are written on the caller's commit, right after them)."""
    if not jobs or jobs[0].pk is not None:
        _run_created(jobs)
    else:
        caller = _caller_alias(queue_alias, using)
        transaction.on_commit(partial(_run_created, jobs), using=caller)


def _run_created(jobs: list[Job]) -> None:
    """Run the jobs this call wrote; not those a ``unique_key`` returned instead."""
    created = [job for job in jobs if job.created]
    run_inline(created)
    # A key given twice in one bulk_enqueue(): the later place holds the job, as it is now.
    ran = {job.pk: job for job in created}
    for job in jobs:
        if not job.created and job.pk in ran:
            _take(job, ran[job.pk], cast("str", job._state.db))


def submit_job(
    job: Job,
    *,
    using: str | None = None,
    on_written: Callable[[Job], None] | None = None,
    unique_for: float | None = None,
) -> None:
    """Write one Job whose fields the caller has validated, under enqueue()'s transaction
    rules, then call ``on_written(job)`` once the row exists: at once, or (when the jobs
    table is in another database than the caller's open transaction) after that
    transaction commits. For other front ends onto the queue, such as the tasks backend.
    With a ``job.unique_key`` that a job already holds, ``job`` becomes that job
    (``job.created`` is False); ``unique_for``: seconds, as enqueue() takes it.
    """
    queue_alias = get_settings().DATABASE
    _submit(queue_alias, [job], using, unique_for=unique_for)
    if on_written is None:
        return
    if job.pk is not None:
        on_written(job)
    else:
        # _submit deferred the write to the caller's commit; this callback runs after it.
        caller = _caller_alias(queue_alias, using)
        transaction.on_commit(partial(on_written, job), using=caller)


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
    job = _new_job(fields, payload, encoded)
    if dependencies is not None:
        job._sqlq_deps = dependencies  # type: ignore[attr-defined]
    _submit(conf.DATABASE, [job], using, delay_seconds, window)
    if conf.TESTING == "inline":
        _run_inline(conf.DATABASE, [job], using)
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
    jobs = JobGroup(_new_job(fields, p, text) for p, text in zip(items, encoded, strict=True))
    if dependencies is not None:
        for job in jobs:
            job._sqlq_deps = dependencies  # type: ignore[attr-defined]
    if keys is not None:
        for job, key in zip(jobs, keys, strict=True):
            job.unique_key = key
    if jobs:
        _submit(conf.DATABASE, jobs, using, delay_seconds, window)
        if conf.TESTING == "inline":
            _run_inline(conf.DATABASE, jobs, using)
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


async def aenqueue(
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
    """``enqueue()`` for async code (an ``async def`` view), as ``Task.aenqueue`` is.

    It runs ``enqueue()`` through ``sync_to_async(thread_sensitive=True)``: in the thread
    where the request's other synchronous database work runs, on the same connections. Django
    has no transactions in async code, so outside ``sync_to_async`` there is no open
    transaction and the job is committed before this returns. For "the job exists if and only
    if my writes commit", put the writes and ``enqueue()`` in one synchronous function under
    ``transaction.atomic()`` and await it through ``sync_to_async``.
    """
    return await sync_to_async(enqueue, thread_sensitive=True)(
        target,
        payload,
        queue=queue,
        priority=priority,
        run_at=run_at,
        delay=delay,
        max_attempts=max_attempts,
        timeout=timeout,
        using=using,
        unique_key=unique_key,
        unique_for=unique_for,
        depends_on=depends_on,
        on_dependency_failure=on_dependency_failure,
    )


async def abulk_enqueue(
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
    """``bulk_enqueue()`` for async code; the same guarantees as :func:`aenqueue`. The jobs
    are written in one transaction: all of them, or (on any error) none."""
    return await sync_to_async(bulk_enqueue, thread_sensitive=True)(
        target,
        list(payloads),
        queue=queue,
        priority=priority,
        run_at=run_at,
        delay=delay,
        max_attempts=max_attempts,
        timeout=timeout,
        using=using,
        unique_key=unique_key,
        unique_for=unique_for,
        depends_on=depends_on,
        on_dependency_failure=on_dependency_failure,
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


async def acancel(job_or_id: Job | int, *, using: str | None = None) -> CancelResult:
    """``cancel()`` for async code, through ``sync_to_async(thread_sensitive=True)``."""
    return await sync_to_async(cancel, thread_sensitive=True)(job_or_id, using=using)
