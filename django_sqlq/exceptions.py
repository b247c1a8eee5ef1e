"""Errors raised by django_sqlq. Each also subclasses the builtin it refines."""

from __future__ import annotations

from datetime import datetime


class SQLQError(Exception):
    """Base class of every error django_sqlq raises."""


class InvalidJobError(SQLQError, ValueError):
    """enqueue() was given something it cannot store: the job is not written."""


class PayloadError(InvalidJobError, TypeError):
    """The payload (or a result) cannot be stored as JSON."""


class UnknownQueueError(InvalidJobError):
    """The queue is not one of ``SQLQ["QUEUES"]``."""


class UnknownHandlerError(SQLQError, LookupError):
    """No handler is registered under that name and it is not an importable dotted path."""


class UnknownJobTypeError(UnknownHandlerError, InvalidJobError):
    """enqueue() was given a job type that no handler or ``@task`` answers to, while the
    project's handlers are known (``SQLQ["CHECK_TYPES"]``): nothing is written. Both a
    ``LookupError`` and a ``ValueError``."""


class ConfigurationError(SQLQError, ValueError):
    """``settings.SQLQ`` holds a value django_sqlq cannot use."""


class JobTimeoutError(SQLQError, TimeoutError):
    """A job ran longer than its ``timeout``."""


class JobInterruptedError(SQLQError, RuntimeError):
    """The worker running the job was forced to stop (a second SIGTERM/SIGINT) mid-attempt."""


class LeaseLostError(SQLQError, RuntimeError):
    """This worker no longer holds the job: another worker or an operator took it over."""


class TransactionLeftOpenError(SQLQError, RuntimeError):
    """A handler returned with a transaction open (an atomic block not exited, autocommit
    left off) holding writes: the worker rolled them back and failed the attempt."""


class UniqueKeyHeldError(InvalidJobError):
    """A task's ``unique_key`` is held by a job that is no task (a plain ``enqueue()`` job):
    nothing was written, and there is no ``TaskResult`` to return for the holder.
    ``holder`` is that job."""

    def __init__(self, message: str, *, holder: object = None) -> None:
        super().__init__(message)
        self.holder = holder


class DependencyFailed(SQLQError):
    """Why a blocked job was failed (or cancelled) without running: a job or chain it waited
    for (``enqueue(..., depends_on=...)``) failed for good or was cancelled, and its
    ``on_dependency_failure`` policy is ``"fail"`` (or ``"cancel"``). Never raised: its name
    starts the job's ``last_error``, as a raised exception's would."""


class JobCancelled(SQLQError):
    """Raised by ``JobContext.check_cancelled()`` in a handler whose job was cancelled while it
    ran (``django_sqlq.cancel()`` or the admin's Cancel). Let it propagate: the worker
    records the job ``cancelled``, not failed, and does not retry it. A handler may also
    raise it itself to cancel its own job."""


class EventTimeout(SQLQError, TimeoutError):
    """``context.wait_for_event()`` waited its whole ``timeout`` and no event with its key
    was emitted. Recorded with the step: every later attempt of the job raises it again at
    that step (an event emitted after the timeout is not taken by it). Catch it in the
    handler to take another path (cancel the order...)."""

    def __init__(self, name: str, key: str) -> None:
        super().__init__(f"Step {name!r}: no event {key!r} was emitted before the timeout.")
        self.name = name
        self.key = key


class StepError(SQLQError, ValueError):
    """A durable step used wrongly: a name used twice in one job, or used first for
    another kind of step, a result JSON cannot hold, a step outside a worker."""


class Suspended(BaseException):
    """Raised by ``context.sleep()`` and ``context.wait_for_event()`` to end the attempt
    without counting it: the worker records the job asleep until ``until`` (waiting for
    ``wait_key``) and frees its thread. A BaseException, so that a handler's ``except
    Exception`` does not swallow it; let it propagate."""

    def __init__(self, until: datetime, wait_key: str | None = None) -> None:
        super().__init__(f"suspended until {until.isoformat()}")
        self.until = until
        self.wait_key = wait_key


def not_retried(exc: BaseException) -> BaseException:
    """Mark ``exc``, raised by a handler or a task, as an attempt's end that no retry can
    change: the work is done and only its record is impossible (a return value JSON cannot
    hold). The worker fails the job at once, and ``exc`` keeps its class (a task's
    ``TypeError`` stays ``builtins.TypeError`` in its ``TaskResult``)."""
    exc.sqlq_not_retried = True  # type: ignore[attr-defined]
    return exc


def is_not_retried(exc: BaseException) -> bool:
    return getattr(exc, "sqlq_not_retried", False) is True
