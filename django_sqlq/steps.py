"""Durable steps: a handler that survives crashes step by step, sleeps without holding a
worker, and waits for an event (``JobContext.step()``, ``sleep()``, ``wait_for_event()``,
and :func:`emit_event`).

Each step is recorded in ``sqlq_job_step`` under (job, name). An attempt reads the job's
recorded steps once, at its first step, and every step it finds there returns what was
recorded instead of running again: a job that crashed, failed or slept runs its handler from
the top, and the steps it already took cost one read. What is exactly once and what is at
least once:

- ``step(name, fn)``: ``fn`` runs in a transaction on the queue's database, and its record
  is written in the same transaction: what ``fn`` writes to that database commits with the
  record, once, whatever crashes (a worker killed inside the step rolls both back; two
  attempts of one job racing for it, after a lost lease, cannot both commit: the unique
  (job, name) makes the second roll back). Anything else ``fn`` does (an HTTP call, an
  e-mail) may happen again if the worker dies after it and before the commit.
- ``sleep()`` and ``wait_for_event()`` end the attempt without counting it (the
  :class:`~django_sqlq.exceptions.Suspended` control-flow exception); the worker records the
  job ``scheduled`` until it is due, holding no thread, connection or lease meanwhile.
"""

from __future__ import annotations

import json
import math
import numbers
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.db import IntegrityError, connections, transaction
from django.utils import timezone

from django_sqlq import validation
from django_sqlq.conf import get_settings
from django_sqlq.db import ops_for
from django_sqlq.exceptions import (
    EventTimeout,
    InvalidJobError,
    LeaseLostError,
    PayloadError,
    StepError,
    Suspended,
)
from django_sqlq.jsoncodec import encode_json

if TYPE_CHECKING:
    from django_sqlq.models import JobStep

#: A wait for an event with ``timeout=None`` is woken only by the event (or an operator):
#: it sleeps this long (about a century) otherwise.
FOREVER = timedelta(days=36500)


class Steps:
    """One attempt's durable steps: what the job recorded, read once, and the names this
    attempt used. Made by the attempt's ``JobContext`` at its first step."""

    def __init__(
        self,
        alias: str,
        job_id: int,
        *,
        worker_id: str | None = None,
        attempt: int | None = None,
        depth: int = 0,
        atomic: bool = False,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.alias = alias
        self.job_id = job_id
        # The attempt these steps are taken in (the job's fence: who holds it, which try).
        self.worker_id = worker_id
        self.attempt = attempt
        # What "now" is to the sleeps and timeouts (testing's run_jobs(now=...) sets it).
        self.now = clock or timezone.now
        # How many atomic blocks were open on the queue's connection when the handler
        # started (0 in a worker; the test's own in django_sqlq.testing): a sleep or wait
        # inside more (an atomic handler's, the handler's own) is refused.
        self.depth = depth
        self.atomic = atomic  # an atomic handler's: no sleep or wait either
        self.suspended = False  # a sleep or wait ended this attempt
        self._recorded: dict[str, JobStep] | None = None
        self._used: set[str] = set()

    # -- the three kinds ------------------------------------------------------------------

    def step(self, name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """The recorded result of step ``name``, or ``fn(*args, **kwargs)``'s, recorded."""
        # (models.steps, not the models package: importing from a package calls into
        # importlib each time, a microsecond of every step.)
        from django_sqlq.models.steps import StepKind, StepState

        if not callable(fn):
            raise StepError(f"step({name!r}, fn): fn must be callable, got {fn!r}.")
        recorded = self._take(name, StepKind.STEP)
        if recorded is not None:
            return recorded.result
        limit = get_settings().MAX_PAYLOAD_BYTES
        ops = ops_for(self.alias)
        try:
            # Only fn, its result's encoding and the record's INSERT inside: on SQLite the
            # transaction holds the database's one write lock from fn's first write to the
            # commit, and every other writer of the worker waits meanwhile.
            with ops.step_transaction():
                result = fn(*args, **kwargs)
                try:
                    text = encode_json(result, what=f"result of step {name!r}", limit=limit)
                except PayloadError as exc:
                    raise StepError(str(exc)) from exc
                ops.record_step(
                    job_id=self.job_id,
                    name=name,
                    kind=StepKind.STEP,
                    state=StepState.DONE,
                    result=text,
                    returning=False,
                )
        except IntegrityError as exc:
            other = self._recorded_elsewhere(name)
            if other is None:
                raise
            if self._holds_the_job():
                # A stale attempt of this job (its worker frozen past its lease, running
                # on) recorded the step first: its writes are the step's, committed once
                # with its record; this attempt's rolled back. Go on with its result.
                if other.kind != StepKind.STEP:
                    raise StepError(
                        f"Step name {name!r} of job id={self.job_id} was recorded as a "
                        f"{other.kind}, not a step: did the handler's code change under a "
                        "running job?"
                    ) from exc
                return other.result
            raise LeaseLostError(
                f"Step {name!r} of job id={self.job_id} was recorded by another attempt "
                "of the job (this worker's lease ran out): this attempt's writes in the "
                "step were rolled back."
            ) from exc
        # What a replay returns (JSON's reading of it: a tuple comes back a list), the first
        # time too: the handler goes on the same way whichever attempt it is. (Not kept in
        # the attempt's recorded steps: its name cannot be taken again in this attempt.)
        return json.loads(text)

    def sleep(self, name: str, when: float | timedelta | datetime) -> None:
        """Sleep until ``when`` (seconds, a timedelta, or an aware datetime): the first time,
        record the wake-up time and end the attempt; after it, return at once."""
        from django_sqlq.models import StepKind, StepState

        self._check_no_transaction("sleep")
        recorded = self._take(name, StepKind.SLEEP)
        now = self.now()
        if recorded is None:
            until = _until(when, now, what="sleep()")
            recorded = self._record(name, StepKind.SLEEP, StepState.SLEEPING, wake_at=until)
        if recorded.wake_at is not None and recorded.wake_at > now:
            raise self._suspend(recorded.wake_at)
        if recorded.state != StepState.DONE:
            self._update(recorded, state=StepState.DONE)

    def wait_for_event(
        self, name: str, key: str, timeout: float | timedelta | datetime | None
    ) -> Any:
        """The payload of event ``key``: at once if it was emitted (and kept), else after
        it is, the attempt ended meanwhile. :class:`EventTimeout` once ``timeout`` passed
        without it."""
        from django_sqlq.models import Event, StepKind, StepState

        self._check_no_transaction("wait_for_event")
        check_key(key, what="wait_for_event()")
        recorded = self._take(name, StepKind.EVENT)
        if recorded is not None:
            if recorded.state == StepState.DONE:
                return recorded.result
            if recorded.state == StepState.TIMED_OUT:
                raise EventTimeout(name, recorded.wait_key or key)
            key = recorded.wait_key or key
        now = self.now()
        until = recorded.wake_at if recorded is not None else None
        if until is None:
            until = now + FOREVER if timeout is None else _until(timeout, now, what="timeout")
        event = Event.objects.using(self.alias).filter(key=key).values_list("payload").first()
        if event is not None:
            payload = event[0]
            if recorded is None:
                self._record(name, StepKind.EVENT, StepState.DONE, wait_key=key, result=payload)
            else:
                self._update(recorded, state=StepState.DONE, result=payload)
            return payload
        if recorded is None:
            self._record(name, StepKind.EVENT, StepState.WAITING, wait_key=key, wake_at=until)
        elif until <= now:
            self._update(recorded, state=StepState.TIMED_OUT)
            raise EventTimeout(name, key)
        raise self._suspend(until, key)

    def _suspend(self, until: datetime, key: str | None = None) -> Suspended:
        self.suspended = True
        return Suspended(until, key)

    def check_returned(self) -> None:
        """The handler returned: refuse it if a sleep or wait had ended its attempt (the
        handler caught :class:`Suspended`, and ran on as if it had slept)."""
        if self.suspended:
            raise StepError(
                f"Job id={self.job_id}'s handler returned after a sleep or a wait for an "
                "event ended its attempt: it caught django_sqlq.exceptions.Suspended (an "
                "`except BaseException:` or a bare `except:`). Let it propagate: the job "
                "runs on once the sleep or wait is over."
            )

    def _check_no_transaction(self, what: str) -> None:
        if self.atomic or len(connections[self.alias].atomic_blocks) > self.depth:
            raise StepError(
                f"{what}() cannot run inside a transaction (an atomic handler's, or the "
                f"handler's own `with transaction.atomic()`): the attempt ends there, and the "
                f"transaction would roll back what the {what} recorded. Call it outside."
            )

    # -- the record -----------------------------------------------------------------------

    def _recorded_steps(self) -> dict[str, JobStep]:
        if self._recorded is None:
            from django_sqlq.models import JobStep

            ops = ops_for(self.alias)
            self._recorded = {}
            if ops.has_recorded_steps(self.job_id):
                rows = JobStep.objects.using(self.alias).raw(ops.RECORDED_STEPS, [self.job_id])
                self._recorded = {row.name: row for row in rows}
        return self._recorded

    def _take(self, name: str, kind: str) -> JobStep | None:
        """Check ``name`` (once per attempt), and its recorded row if it has one."""
        from django_sqlq.models.steps import MAX_STEP_NAME

        _checked("step name", name, MAX_STEP_NAME)
        if name in self._used:
            raise StepError(
                f"Step name {name!r} is used twice in job id={self.job_id}: each step, sleep "
                "and wait of a job needs a name of its own (add a counter for a loop: "
                'f"charge-{i}").'
            )
        self._used.add(name)
        recorded = self._recorded_steps().get(name)
        if recorded is not None and recorded.kind != kind:
            raise StepError(
                f"Step name {name!r} of job id={self.job_id} was recorded as a {recorded.kind}, "
                f"not a {kind}: did the handler's code change under a running job?"
            )
        return recorded

    def _record(
        self,
        name: str,
        kind: str,
        state: str,
        *,
        result: Any = None,
        wait_key: str | None = None,
        wake_at: datetime | None = None,
    ) -> JobStep:
        """Record a sleep or wait (in a transaction of its own) and return its row."""
        from django_sqlq.models import JobStep

        row = JobStep(
            job_id=self.job_id,
            name=name,
            kind=kind,
            state=state,
            result=result,
            wait_key=wait_key,
            wake_at=wake_at,
        )
        try:
            with transaction.atomic(using=self.alias):
                row.pk = ops_for(self.alias).record_step(
                    job_id=self.job_id,
                    name=name,
                    kind=kind,
                    state=state,
                    result=encode_json(result),
                    wait_key=wait_key,
                    wake_at=wake_at,
                )
        except IntegrityError as exc:
            other = self._recorded_elsewhere(name)
            if other is None or other.kind != kind or not self._holds_the_job():
                raise LeaseLostError(
                    f"Step {name!r} of job id={self.job_id} was recorded by another attempt "
                    "of the job (this worker's lease ran out)."
                ) from exc
            row = other  # a stale attempt's, recorded first (see step()): go on with it
        self._recorded_steps()[name] = row
        return row

    def _update(self, row: JobStep, **fields: Any) -> None:
        from django.db.models.functions import Now

        from django_sqlq.models import JobStep

        # By job and name, not by id alone: the job may have been deleted and its steps
        # pruned while this attempt ran, and on SQLite another job's step may have its id.
        JobStep.objects.using(self.alias).filter(job_id=self.job_id, name=row.name).update(
            **fields, updated_at=Now()
        )
        for field, value in fields.items():
            setattr(row, field, value)

    def _recorded_elsewhere(self, name: str) -> JobStep | None:
        """The record of step ``name`` another attempt of the job wrote, if any."""
        from django_sqlq.models import JobStep

        return JobStep.objects.using(self.alias).filter(job_id=self.job_id, name=name).first()

    def _holds_the_job(self) -> bool:
        """Whether this attempt still holds its job (its worker, its try, running)."""
        if self.worker_id is None or self.attempt is None:
            return False
        return ops_for(self.alias).holds(
            self.job_id, worker_id=self.worker_id, attempt=self.attempt
        )


def check_key(key: object, *, what: str) -> str:
    """``key`` if it can name an event, else StepError."""
    from django_sqlq.models.steps import MAX_EVENT_KEY

    return _checked(f"{what}'s event key", key, MAX_EVENT_KEY)


def _checked(what: str, value: object, max_length: int) -> str:
    """A step name or event key every engine stores (no NUL, no lone surrogate), else
    StepError."""
    try:
        return validation.check_name(what, value, max_length=max_length)
    except InvalidJobError as exc:
        raise StepError(str(exc)) from None


def _until(when: object, now: datetime, *, what: str) -> datetime:
    """The moment ``when`` names: seconds or a timedelta from ``now``, or a datetime."""
    if isinstance(when, datetime):
        if timezone.is_naive(when) != timezone.is_naive(now):
            kinds = ("naive", "aware") if timezone.is_naive(when) else ("aware", "naive")
            raise StepError(
                f"{what}: {when!r} is {kinds[0]}, and this project's datetimes are "
                f"{kinds[1]} (USE_TZ)."
            )
        if abs(when - now) > FOREVER:
            raise StepError(f"{what}: {when!r} is more than 100 years away.")
        return when
    if isinstance(when, timedelta):
        seconds = when.total_seconds()
    elif isinstance(when, numbers.Real) and not isinstance(when, bool):
        seconds = float(when)
    else:
        raise StepError(f"{what} takes seconds, a timedelta or a datetime, got {when!r}.")
    if math.isnan(seconds) or seconds < 0 or seconds > FOREVER.total_seconds():
        raise StepError(f"{what}: {when!r} is not a duration from 0 to 100 years.")
    return now + timedelta(seconds=seconds)


def emit_event(key: str, payload: Any = None) -> bool:
    """Emit event ``key`` with ``payload`` (what JSON holds) for the jobs that wait for it
    (``context.wait_for_event(name, key, ...)``), and keep it for a waiter that comes later
    (until ``SQLQ["EVENT_RETENTION"]`` removes it). Inside the caller's transaction on the
    queue's database (``SQLQ["DATABASE"]``), if one is open: written, and the waiters woken,
    only if it commits. The first emit of
    a key wins: returns True for it, False when the key was emitted before (its payload is
    the first's)."""
    from django_sqlq.models import Event

    check_key(key, what="emit_event()")
    settings = get_settings()
    text = encode_json(payload, what="event's payload", limit=settings.MAX_PAYLOAD_BYTES)
    alias = settings.DATABASE
    with transaction.atomic(using=alias):
        try:
            with transaction.atomic(using=alias):
                Event(key=key, payload=json.loads(text)).save(using=alias, force_insert=True)
        except IntegrityError:
            if not Event.objects.using(alias).filter(key=key).exists():
                raise
            return False
        ops = ops_for(alias)
        queues = ops.wake_waiters(key, text)
        if queues:
            ops.notify(sorted(set(queues)))
    return True
