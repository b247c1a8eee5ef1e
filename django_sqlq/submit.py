"""Writing enqueued jobs: in the caller's transaction when the jobs table is in its database
(or at once, outside a transaction), else when that transaction commits; one INSERT per
chunk of jobs, one per job with a ``unique_key``; each Job filled in as if the ORM had
saved it. :mod:`django_sqlq.api` validates first, then calls :func:`submit`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Any, cast

from django.db import DatabaseError, connections, transaction

from django_sqlq import tracing, workflows
from django_sqlq._django import unsaved_instance
from django_sqlq.conf import get_settings
from django_sqlq.db import is_missing_table, ops_for, retrying_deadlocks
from django_sqlq.db.base import QueueOps
from django_sqlq.exceptions import ConfigurationError
from django_sqlq.inline import run_inline
from django_sqlq.jsoncodec import encode_json
from django_sqlq.logs import job_extra
from django_sqlq.models import Job, JobStatus
from django_sqlq.schema import migrate_command

# A DEBUG line per job written, with the job in ``extra`` (see django_sqlq.logs).
logger = logging.getLogger("django_sqlq.enqueue")

# Jobs per INSERT in bulk_enqueue: large enough to amortise the round trip, small enough to
# keep one statement's memory and lock time modest.
BULK_CHUNK = 10_000

# Times a unique enqueue tries again when the job that held its key was gone (deleted,
# pruned) by the time it looked for it: each try either writes the job or finds one.
UNIQUE_TRIES = 3


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


@dataclass(frozen=True, slots=True)
class Submission:
    """What one enqueue() or bulk_enqueue() writes, checked: the unsaved Jobs of one type
    and options (the caller's own instances, filled in once written), each one's payload as
    JSON text (encoded once, when it was checked; in the jobs' order), what they all wait
    for, the delay to add to the database's clock, and the unique_for window in seconds."""

    jobs: Sequence[Job]
    payloads: Sequence[str]
    dependencies: workflows.Dependencies | None = None
    delay_seconds: float | None = None
    unique_for: float | None = None


def _write(queue_alias: str, submission: Submission) -> None:
    """Insert the jobs with one statement per chunk (one per job with a ``unique_key``). On
    PostgreSQL the same statement sends the NOTIFY that wakes idle workers when the
    transaction commits."""
    dependencies = submission.dependencies
    try:
        if dependencies is None:
            _insert(queue_alias, submission)
        else:
            # The jobs and what they wait for commit together (or not at all: a dependency
            # that does not exist raises, and no job is left behind).
            with transaction.atomic(using=queue_alias):
                _insert(queue_alias, submission)
                created = [job for job in submission.jobs if job.created]
                if created:
                    workflows.attach(queue_alias, created, dependencies)
    except DatabaseError as exc:
        if is_missing_table(exc):
            raise ConfigurationError(
                f"The jobs table does not exist in database {queue_alias!r}: run "
                f"`{migrate_command(queue_alias)}` first."
            ) from exc
        raise


def _insert(queue_alias: str, submission: Submission) -> None:
    ops = ops_for(queue_alias)
    jobs, payloads = submission.jobs, submission.payloads
    delay_seconds = submission.delay_seconds
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
        row = ops.insert_one(payload=payloads[0], fields=fields, delay_seconds=delay_seconds)
        _saved(first, row, queue_alias)
        return
    # The jobs without a key many per statement, in the payloads' order; then those with a
    # key, one INSERT ... ON CONFLICT each, in the keys' order: two calls over the same keys
    # then take them in one order, so that on PostgreSQL neither can wait for a key the
    # other holds while holding one it waits for (a deadlock).
    pairs = zip(jobs, payloads, strict=True)
    plain = [pair for pair in pairs if pair[0].unique_key is None]
    if plain:
        _insert_plain(ops, queue_alias, plain, fields, delay_seconds)
    written: dict[str, Job] = {}
    keyed = (pair for pair in zip(jobs, payloads, strict=True) if pair[0].unique_key is not None)
    for job, payload in sorted(keyed, key=_key_of):
        key = cast("str", job.unique_key)
        if key in written:  # the same key earlier in this bulk_enqueue(): that job
            _become(job, written[key], queue_alias)
        else:
            _insert_unique(
                ops, queue_alias, job, payload, key, fields, delay_seconds, submission.unique_for
            )
            written[key] = job


def _key_of(pair: tuple[Job, str]) -> str:
    return cast("str", pair[0].unique_key)


def _insert_unique(
    ops: QueueOps,
    queue_alias: str,
    job: Job,
    payload: str,
    key: str,
    fields: dict[str, Any],
    delay_seconds: float | None,
    unique_for: float | None,
) -> None:
    """Write ``job`` unless its ``key`` is taken; if it is, make ``job`` the job that holds
    it."""
    for _ in range(UNIQUE_TRIES):
        row = ops.insert_unique(
            payload=payload,
            fields={**fields, "unique_key": key},
            delay_seconds=delay_seconds,
            unique_for=unique_for,
        )
        if row is not None:
            _saved(job, row, queue_alias)
            return
        holder = _holder(queue_alias, key)
        if holder is not None:
            _become(job, holder, queue_alias)
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


def _become(job: Job, holder: Job, queue_alias: str) -> None:
    """Make the caller's ``job`` the job its key returned: ``holder``'s value of every
    column (``holder`` is a saved Job with all of them loaded: no query), saved in
    ``queue_alias``, and not created by this call."""
    for field in Job._meta.concrete_fields:
        setattr(job, field.attname, getattr(holder, field.attname))
    job._state.adding = False
    job._state.db = queue_alias
    job.created = False


def _insert_plain(
    ops: QueueOps,
    queue_alias: str,
    pairs: list[tuple[Job, str]],
    fields: dict[str, Any],
    delay_seconds: float | None,
) -> None:
    """Insert the jobs without a key, each with its payload's JSON text (``pairs``)."""
    if len(pairs) == 1:
        job, payload = pairs[0]
        row = ops.insert_one(payload=payload, fields=fields, delay_seconds=delay_seconds)
        _saved(job, row, queue_alias)
        return
    for start in range(0, len(pairs), BULK_CHUNK):
        chunk = pairs[start : start + BULK_CHUNK]
        rows = ops.insert_many(
            payloads=[payload for _, payload in chunk],
            fields=fields,
            delay_seconds=delay_seconds,
        )
        for (job, _), row in zip(chunk, rows, strict=True):
            _saved(job, row, queue_alias)


_JOB_DEFAULTS: dict[str, Any] | None = None


def new_job(fields: dict[str, Any], payload: Any) -> Job:
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


def submit(queue_alias: str, submission: Submission, using: str | None) -> None:
    """Write ``submission`` (its jobs are filled in as they are written), under the rules
    of the module's docstring; ``using`` as enqueue() takes it."""
    tracer = tracing.tracer() if tracing.ENABLED else None
    if tracer is None:
        _submit_untraced(queue_alias, submission, using)
    else:
        jobs = submission.jobs
        with tracing.sending(tracer, jobs, jobs[0].queue, jobs[0].type):
            _submit_untraced(queue_alias, submission, using)


def _submit_untraced(queue_alias: str, submission: Submission, using: str | None) -> None:
    caller = _caller_alias(queue_alias, using)
    if caller is None and submission.dependencies is not None:
        # A transaction of the enqueue's own that locks the jobs it waits for: tried again
        # whole if the database ends it to break a deadlock with a worker completing them
        # (MariaDB ends the whole transaction, not the statement).
        retrying_deadlocks(queue_alias, partial(_write_own, queue_alias, submission))
    elif caller is None or caller == queue_alias:
        # Same database (or no transaction): the rows are part of the caller's transaction.
        if len(submission.jobs) > 1 and caller is None:
            _write_own(queue_alias, submission)
        else:
            _write(queue_alias, submission)
    else:
        # Another database: the jobs exist if and only if the caller's transaction commits.
        transaction.on_commit(partial(_write, queue_alias, submission), using=caller)


def _write_own(queue_alias: str, submission: Submission) -> None:
    """:func:`_write` in a transaction of its own."""
    with transaction.atomic(using=queue_alias):
        _write(queue_alias, submission)


def run_inline_after(queue_alias: str, jobs: list[Job], using: str | None) -> None:
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
            _become(job, ran[job.pk], cast("str", job._state.db))


def submit_job(
    job: Job,
    *,
    using: str | None = None,
    on_written: Callable[[Job], None] | None = None,
    unique_for: float | None = None,
    payload_json: str | None = None,
) -> None:
    """Write one Job whose fields the caller has validated, under enqueue()'s transaction
    rules, then call ``on_written(job)`` once the row exists: at once, or (when the jobs
    table is in another database than the caller's open transaction) after that
    transaction commits. For other front ends onto the queue, such as the tasks backend.
    With a ``job.unique_key`` that a job already holds, ``job`` becomes that job
    (``job.created`` is False); ``unique_for``: seconds, as enqueue() takes it;
    ``payload_json``: ``job.payload`` as the caller's check already encoded it.
    """
    queue_alias = get_settings().DATABASE
    if payload_json is None:
        payload_json = encode_json(job.payload)
    submission = Submission([job], [payload_json], unique_for=unique_for)
    submit(queue_alias, submission, using)
    if on_written is None:
        return
    if job.pk is not None:
        on_written(job)
    else:
        # submit() deferred the write to the caller's commit; this callback runs after it.
        caller = _caller_alias(queue_alias, using)
        transaction.on_commit(partial(on_written, job), using=caller)
