"""A backend for Django's tasks framework: ``@task`` functions run on django_sqlq.

```python
TASKS = {"default": {"BACKEND": "django_sqlq.backend.SQLQBackend"}}
```

A thin adapter: ``enqueue()`` writes an ordinary :class:`~django_sqlq.models.Job` through
:mod:`django_sqlq.api` (so the caller's transaction decides whether it exists), the same
``sqlq_worker`` runs it through a registry resolver, and ``get_result()`` reads the row back
as a ``TaskResult``. How the two map:

=================  ==================================================================
TaskResult         Job
=================  ==================================================================
``id``             ``str(uuid)``: random, so one result id tells nothing of others
``task``           ``type`` (the task's module path) imported, with ``priority``,
                   ``queue`` and, from the payload, ``run_after`` and the backend alias
``args/kwargs``    ``payload["args"]`` / ``payload["kwargs"]``, as ``normalize_json`` made them
``status``         pending: READY, processing: RUNNING, completed: SUCCESSFUL,
                   failed or cancelled: FAILED
``enqueued_at``    ``created_at``: the database's clock, as the INSERT returned it
``started_at``     ``started_at`` (the latest attempt's start); so is ``last_attempted_at``
``finished_at``    ``completed_at``
``errors``         ``errors``: one entry per failed or lost attempt
``worker_ids``     one per attempt: the holders of the failed attempts, then the current one
``return_value``   ``result``
=================  ==================================================================
"""

from __future__ import annotations

import dataclasses
import json
import threading
import uuid
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Final, cast

from django.apps import apps
from django.conf import settings
from django.core import checks
from django.utils.module_loading import import_string

from django_sqlq import registry, statuses, validation

# Without django.tasks or the backport, this import raises an ImportError saying what to
# install.
from django_sqlq.compat import (
    DEFAULT_TASK_QUEUE_NAME,
    BaseTaskBackend,
    InvalidTask,
    InvalidTaskBackend,
    Task,
    TaskError,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
    normalize_json,
    task_backends,
    task_enqueued,
    task_finished,
    task_started,
)
from django_sqlq.conf import get_settings
from django_sqlq.exceptions import (
    InvalidJobError,
    PayloadError,
    UniqueKeyHeldError,
    not_retried,
)
from django_sqlq.jsoncodec import encode_json
from django_sqlq.recurrence.definition import find_task
from django_sqlq.taskcontext import SQLQTaskContext

# Nothing here imports the models at import time (nor api, inline and jobcontext, which
# do): the framework instantiates backends when the first @task is defined, which may be
# while apps are still loading. The functions that need them import them.
if TYPE_CHECKING:
    from django_sqlq.jobcontext import JobContext
    from django_sqlq.models import Job

__all__ = ["SQLQBackend"]

# Job statuses -> the framework's.
STATUSES: Final[Mapping[str, TaskResultStatus]] = {
    statuses.BLOCKED: TaskResultStatus.READY,
    statuses.SCHEDULED: TaskResultStatus.READY,
    statuses.PENDING: TaskResultStatus.READY,
    statuses.PROCESSING: TaskResultStatus.RUNNING,
    statuses.COMPLETED: TaskResultStatus.SUCCESSFUL,
    statuses.FAILED: TaskResultStatus.FAILED,
    statuses.CANCELLED: TaskResultStatus.FAILED,
}

# Job.queue's max_length.
MAX_QUEUE_LENGTH: Final = 100

OPTION_DEFAULTS: Final[Mapping[str, Any]] = {
    # The framework has no retries: a task that raises is FAILED at once. More than 1 opts
    # in to django_sqlq's retries, with SQLQ["RETRY_BACKOFF"] between attempts.
    "MAX_ATTEMPTS": 1,
    # A function (or its dotted path) of (task, args, kwargs) returning the enqueue's
    # unique_key, or None for none: a task whose key a live job holds is not enqueued again;
    # enqueue() returns that job's result.
    "UNIQUE_KEY": None,
    # How long after its job finished a key stays taken: a timedelta (or seconds); needs
    # UNIQUE_KEY.
    "UNIQUE_FOR": None,
}


class SQLQBackend(BaseTaskBackend):
    """Runs tasks on django_sqlq: one ``Job`` row per enqueued task, run by ``sqlq_worker``.

    ``QUEUES`` has Django's meaning: the queue names valid for this backend's tasks (default
    ``["default"]``; an empty list allows any name), checked by the framework at ``using()``
    and again at ``enqueue()``. It is independent of ``SQLQ["QUEUES"]``, which lists the
    queues of plain ``enqueue()`` jobs; ``sqlq_worker --backend ALIAS`` serves these.
    ``OPTIONS``: ``MAX_ATTEMPTS`` (default 1); ``UNIQUE_KEY``, a function or its dotted path,
    ``(task, args, kwargs) -> str | None``, the ``unique_key`` of each enqueue; ``UNIQUE_FOR``,
    a timedelta or seconds, the ``unique_for`` of those with a key. When a key is taken,
    ``enqueue()`` writes nothing and returns the result of the job that holds it (its id,
    status...), and ``task_enqueued`` is not sent.
    """

    supports_defer = True
    """``run_after`` is stored as the job's ``scheduled_at``."""

    supports_async_task = True
    """Coroutine functions run on the worker, each in its own event loop."""

    supports_get_result = True
    """Results live in the jobs table, so any process can read them."""

    supports_priority = True
    """Priorities -100..100 are django_sqlq's own, highest first."""

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        # As BaseTaskBackend sets self.queues (a set), in the settings' order: what
        # `sqlq_worker --backend` serves. Empty: any queue name is valid.
        self.queue_names: tuple[str, ...] = tuple(
            dict.fromkeys(params.get("QUEUES", [DEFAULT_TASK_QUEUE_NAME]))
        )
        for name in self.queue_names:
            if not isinstance(name, str) or not name or len(name) > MAX_QUEUE_LENGTH:
                raise InvalidTaskBackend(
                    f"TASKS[{alias!r}]['QUEUES'] holds {name!r}: queue names are strings of "
                    f"1 to {MAX_QUEUE_LENGTH} characters."
                )
        unknown = set(self.options) - set(OPTION_DEFAULTS)
        if unknown:
            raise InvalidTaskBackend(
                f"Unknown OPTIONS for the tasks backend {alias!r}: {', '.join(sorted(unknown))}."
                f" Known: {', '.join(OPTION_DEFAULTS)}."
            )
        max_attempts = self.options.get("MAX_ATTEMPTS", OPTION_DEFAULTS["MAX_ATTEMPTS"])
        if (
            isinstance(max_attempts, bool)
            or not isinstance(max_attempts, int)
            or not (1 <= max_attempts <= 2**31 - 1)
        ):
            raise InvalidTaskBackend(
                f"TASKS[{alias!r}]['OPTIONS']['MAX_ATTEMPTS'] must be a whole number >= 1, "
                f"got {max_attempts!r}."
            )
        self.max_attempts: int = max_attempts
        # A dotted path is imported at the first enqueue: apps may still be loading here.
        unique_key = self.options.get("UNIQUE_KEY")
        unique_for = self.options.get("UNIQUE_FOR")
        try:
            if not (
                unique_key is None
                or (isinstance(unique_key, str) and "." in unique_key.strip(". "))
                or callable(unique_key)
            ):
                raise InvalidJobError(
                    f"it must be a function or its dotted path, got {unique_key!r}."
                )
            if isinstance(unique_for, (int, float)) and not isinstance(unique_for, bool):
                try:
                    unique_for = timedelta(seconds=unique_for)
                except (OverflowError, ValueError):
                    raise InvalidJobError(
                        f"UNIQUE_FOR must be a number of seconds up to 100 years, got "
                        f"{unique_for!r}."
                    ) from None
            self.unique_for = validation.check_unique(unique_key, unique_for)
        except InvalidJobError as exc:
            raise InvalidTaskBackend(
                f"TASKS[{alias!r}]['OPTIONS']['UNIQUE_KEY'/'UNIQUE_FOR']: {exc}"
            ) from None
        self._unique_key: str | Callable[..., Any] | None = unique_key
        # The worker asks the registry for each job type no @handler claims; this turns
        # the module path of a @task into a handler. Registering twice is a no-op.
        registry.add_resolver(resolve_task)

    def _key_for(self, task: Task[Any, Any], args: Any, kwargs: Any) -> str | None:
        """OPTIONS["UNIQUE_KEY"]'s answer for this enqueue, checked."""
        if isinstance(self._unique_key, str):
            self._unique_key = self._import_unique_key(self._unique_key)
        assert self._unique_key is not None
        key = self._unique_key(task, args, kwargs)
        if key is None:
            return None
        try:
            return validation.check_unique_key(key)
        except InvalidJobError as exc:
            raise InvalidTask(f"UNIQUE_KEY of {task.module_path}: {exc}") from None

    def _import_unique_key(self, path: str) -> Callable[..., Any]:
        """OPTIONS["UNIQUE_KEY"]'s function, imported at the first enqueue (apps may still be
        loading when the backend is made); InvalidTaskBackend if there is none at ``path``."""
        where = f"TASKS[{self.alias!r}]['OPTIONS']['UNIQUE_KEY']"
        try:
            function = import_string(path)
        except ImportError as exc:
            raise InvalidTaskBackend(f"{where}: cannot import {path!r} ({exc}).") from None
        if not callable(function):
            raise InvalidTaskBackend(
                f"{where}: {path!r} is {type(function).__name__}, not a function."
            )
        return cast(Callable[..., Any], function)

    def served_queues(self) -> tuple[str, ...] | None:
        """The queues this backend's tasks may use: its ``QUEUES``; None when any is valid."""
        return self.queue_names or None

    def validate_task(self, task: Task[..., Any]) -> None:
        super().validate_task(task)
        if len(task.module_path) > registry.MAX_TYPE_LENGTH:
            raise InvalidTask(
                f"The task's module path is {len(task.module_path)} characters; django_sqlq "
                f"stores at most {registry.MAX_TYPE_LENGTH}."
            )
        # The same bounds as enqueue(): names every engine can store, a run_after that
        # Python and every engine can hold (django_sqlq.validation).
        try:
            validation.check_name("task's module path", task.module_path,
                                  max_length=registry.MAX_TYPE_LENGTH)  # fmt: skip
            validation.check_name("queue name", task.queue_name, max_length=100)
            if task.run_after is not None:
                validation.check_run_at(task.run_after, what="run_after")
        except InvalidJobError as exc:
            raise InvalidTask(str(exc)) from None
        if not task.queue_name or len(task.queue_name) > MAX_QUEUE_LENGTH:
            raise InvalidTask(
                f"Queue {task.queue_name!r}: django_sqlq's queue names are 1 to "
                f"{MAX_QUEUE_LENGTH} characters."
            )

    def enqueue(self, task: Task[Any, Any], args: Any, kwargs: Any) -> TaskResult[Any, Any]:
        # Validated again: settings (and so the queues) may have changed since @task ran.
        self.validate_task(task)
        from django_sqlq.models import Job
        from django_sqlq.submit import submit_job

        # As TaskResult will normalise them: tuples become lists, bytes str...
        arguments = cast(dict[str, Any], normalize_json({"args": args, "kwargs": kwargs}))
        args_list: list[Any] = arguments["args"]
        kwargs_dict: dict[str, Any] = arguments["kwargs"]
        run_after = task.run_after
        payload = {
            "args": args_list,
            "kwargs": kwargs_dict,
            "backend": self.alias,
            "run_after": None if run_after is None else run_after.isoformat(),
        }
        payload_json = encode_json(
            payload, what="task's arguments", limit=get_settings().MAX_PAYLOAD_BYTES
        )
        job = Job(
            type=task.module_path,
            queue=task.queue_name,
            priority=int(task.priority),
            max_attempts=self.max_attempts,
            timeout=None,
            payload=payload,
        )
        if run_after is not None:
            job.scheduled_at = validation.check_run_at(run_after, what="run_after")
        if self._unique_key is not None:
            job.unique_key = self._key_for(task, args, kwargs)
        result: TaskResult[Any, Any] = TaskResult(
            task=task,
            id="",
            status=TaskResultStatus.READY,
            enqueued_at=None,  # filled in with the id, once the row exists
            started_at=None,
            finished_at=None,
            last_attempted_at=None,
            args=args_list,
            kwargs=kwargs_dict,
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )

        def written(job: Job) -> None:
            # At once, or (jobs table in another database) when the caller's transaction
            # commits: only then do the id and the enqueue time exist. enqueued_at is the
            # created_at the INSERT returned, exactly what get_result() will read (the
            # database's clock, like every time in the jobs table; a time taken in Python
            # would disagree with the row, and SQLite's clock keeps only milliseconds).
            if job.created is False:
                # Its key was taken: the result of the job that holds it, and no signal.
                try:
                    holder = task_result_for(job)
                except TaskResultDoesNotExist:
                    raise UniqueKeyHeldError(
                        f"unique_key {job.unique_key!r} of {task.module_path} is held by job "
                        f"{job.pk} ({job.type}), which is no task: nothing was written.",
                        holder=job,
                    ) from None
                for field in dataclasses.fields(result):
                    object.__setattr__(result, field.name, getattr(holder, field.name))
                return
            object.__setattr__(result, "id", str(job.uuid))
            object.__setattr__(result, "enqueued_at", job.created_at)
            task_enqueued.send(type(self), task_result=result)
            if get_settings().TESTING == "inline":
                # As enqueue() does in inline mode: run it now; the result shows the outcome.
                from django_sqlq.inline import run_inline

                run_inline([job])
                result.refresh()

        submit_job(job, on_written=written, unique_for=self.unique_for, payload_json=payload_json)
        return result

    def get_result(self, result_id: str | uuid.UUID) -> TaskResult[Any, Any]:
        from django_sqlq.models import Job

        public_id = _parse_id(result_id)
        try:
            job = Job.objects.using(get_settings().DATABASE).get(uuid=public_id)
        except Job.DoesNotExist:
            raise TaskResultDoesNotExist(result_id) from None
        return task_result_for(job)

    def check(self, **kwargs: Any) -> list[checks.CheckMessage]:
        messages: list[checks.CheckMessage] = list(super().check(**kwargs))
        where = f"TASKS[{self.alias!r}]"
        if not apps.is_installed("django_sqlq"):
            messages.append(
                checks.Error(
                    f"{where} uses {type(self).__name__}, but django_sqlq is not installed.",
                    hint="Add 'django_sqlq' to INSTALLED_APPS and run `manage.py migrate`.",
                    obj=where,
                    id="django_sqlq.E101",
                )
            )
        return messages


def sqlq_backends() -> dict[str, SQLQBackend]:
    """Every ``settings.TASKS`` alias whose backend is an SQLQBackend, by alias."""
    found: dict[str, SQLQBackend] = {}
    for alias in getattr(settings, "TASKS", None) or {}:
        try:
            backend = task_backends[alias]
        except Exception:  # noqa: S112 - another backend's broken settings are not ours
            continue
        if isinstance(backend, SQLQBackend):
            found[alias] = backend
    return found


# -- reading jobs back as results ----------------------------------------------------------


def _parse_id(result_id: object) -> uuid.UUID:
    """The job's UUID in a result id; TaskResultDoesNotExist for anything we never handed
    out (ids are ``str(uuid)``: 36 characters, lower-case hex and dashes). A ``uuid.UUID``
    is taken as it is: a ``UUIDField`` that stored a result id hands it back as one."""
    if isinstance(result_id, uuid.UUID):
        return result_id
    if isinstance(result_id, str) and len(result_id) == 36:
        try:
            parsed = uuid.UUID(result_id)
        except ValueError:
            pass
        else:
            if str(parsed) == result_id.lower():
                return parsed
    raise TaskResultDoesNotExist(result_id)


def _task_with(task: Task[Any, Any], **changes: Any) -> Task[Any, Any]:
    """``task`` with some fields changed, without validating it again.

    ``Task.using()`` would re-validate: a stored job must read back (and run) even after the
    settings changed, as it was validated when it was enqueued.
    """
    clone = object.__new__(type(task))
    for field in dataclasses.fields(task):
        object.__setattr__(clone, field.name, changes.get(field.name, getattr(task, field.name)))
    return clone


def _exception_class_path(name: str) -> str:
    # Errors record builtins by their bare name; the framework wants an importable path.
    return name if "." in name else f"builtins.{name}"


def _worker_ids(job: Job) -> list[str]:
    """One worker id per attempt (the framework counts attempts as ``len(worker_ids)``)."""
    holder = job.status in (statuses.PROCESSING, statuses.COMPLETED) and job.locked_by
    past = job.attempts - (1 if holder else 0)
    entries = job.errors if isinstance(job.errors, list) else []
    ids = [str(entry.get("worker_id", "")) for entry in entries if isinstance(entry, dict)]
    ids = ids[-past:] if past > 0 else []
    return [*ids, job.locked_by] if holder else ids


def _errors(job: Job) -> list[TaskError]:
    errors = []
    for entry in job.errors if isinstance(job.errors, list) else []:
        if not isinstance(entry, dict):
            continue
        errors.append(
            TaskError(
                exception_class_path=_exception_class_path(
                    str(entry.get("exception_class") or "Exception")
                ),
                traceback=str(entry.get("traceback") or entry.get("message") or ""),
            )
        )
    return errors


def task_result_for(job: Job) -> TaskResult[Any, Any]:
    """The TaskResult a Job stands for. TaskResultDoesNotExist if it is no task's job."""
    payload = job.payload
    if (
        not isinstance(payload, dict)
        or not isinstance(payload.get("args"), list)
        or not isinstance(payload.get("kwargs"), dict)
    ):
        raise TaskResultDoesNotExist(
            f"Job {job.pk} is not a task: its payload has no args and kwargs."
        )
    task = find_task(job.type)
    if task is None:
        raise TaskResultDoesNotExist(
            f"Job {job.pk} is not a task: its type {job.type!r} is no @task (or no longer "
            "imports)."
        )
    alias = payload.get("backend")
    run_after = payload.get("run_after")
    task = _task_with(
        task,
        priority=job.priority,
        queue_name=job.queue,
        run_after=datetime.fromisoformat(run_after) if isinstance(run_after, str) else None,
        backend=alias if isinstance(alias, str) else task.backend,
    )
    result: TaskResult[Any, Any] = TaskResult(
        task=task,
        id=str(job.uuid),
        status=STATUSES[job.status],
        enqueued_at=job.created_at,
        started_at=job.started_at,
        finished_at=job.completed_at,
        last_attempted_at=job.started_at,
        args=payload["args"],
        kwargs=payload["kwargs"],
        backend=task.backend,
        errors=_errors(job),
        worker_ids=_worker_ids(job),
    )
    if job.status == statuses.COMPLETED:
        object.__setattr__(result, "_return_value", job.result)
    return result


def _load(job_id: int, database: str | None = None) -> TaskResult[Any, Any]:
    from django_sqlq.models import Job

    alias = database or get_settings().DATABASE
    return task_result_for(Job.objects.using(alias).get(pk=job_id))


# -- running tasks on the worker ----------------------------------------------------------

# The result read when the current attempt started, per runner thread, so the task's
# context and the task_started signal see the same RUNNING result (and one query serves
# both). Set by on_start, taken by the handler, in the same thread.
_running = threading.local()


def resolve_task(type_name: str) -> registry.Handler | None:
    """The registry resolver: a Handler for a job whose type is a ``@task``'s module path."""
    if find_task(type_name) is None:
        return None
    return registry.Handler(
        name=type_name,
        func=run_task,
        takes_context=True,
        on_start=_task_started,
        on_finish=_task_finished,
    )


def _sender(alias: str) -> type[SQLQBackend]:
    """What the framework's backends send signals as: the backend's class."""
    try:
        backend = task_backends[alias]
    except Exception:  # the alias was removed from TASKS since the task was enqueued
        return SQLQBackend
    return type(backend) if isinstance(backend, SQLQBackend) else SQLQBackend


def _task_started(context: JobContext) -> None:
    result = _load(context.job_id, context.database)
    _running.current = ((context.job_id, context.attempt), result)
    task_started.send(_sender(result.backend), task_result=result)


def _task_finished(context: JobContext, status: str, value: Any) -> None:
    if status not in statuses.FINISHED:
        return  # a retry: the task is READY again, not finished
    result = _load(context.job_id, context.database)
    exception = getattr(value, "exception", None)
    if status == statuses.FAILED and exception is not None:
        # Inside an except block, as the framework's own backends send it: its receiver logs
        # with logger.exception(), so the log (and Sentry) gets the task's real exception.
        try:
            raise exception
        except BaseException:
            task_finished.send(_sender(result.backend), task_result=result)
        return
    task_finished.send(_sender(result.backend), task_result=result)


def run_task(payload: Any, context: JobContext) -> Any:  # noqa: ARG001 (a handler)
    """Call the task as the framework would, and return what JSON can store."""
    current = getattr(_running, "current", None)
    _running.current = None
    if current is not None and current[0] == (context.job_id, context.attempt):
        result: TaskResult[Any, Any] = current[1]
    else:
        result = _load(context.job_id, context.database)
    task = result.task
    if task.takes_context:
        task_context = SQLQTaskContext(task_result=result, job_context=context)
        value = task.call(task_context, *result.args, **result.kwargs)
    else:
        value = task.call(*result.args, **result.kwargs)
    return _storable(value)


def _storable(value: Any) -> Any:
    """The return value as the framework normalises it. Anything JSON cannot hold raises a
    plain TypeError, as with the framework's own backends, so the TaskResult's error reads
    ``builtins.TypeError`` rather than a django_sqlq class the task's author never met. Not
    retried, as a handler's unstorable result is not: the task ran to its end, and running
    it again would repeat its work and end the same way."""
    try:
        normalized = normalize_json(value)
    except (TypeError, ValueError) as exc:
        raise not_retried(
            TypeError(f"The task's return value cannot be stored as JSON: {_not_json(value, exc)}")
        ) from exc
    try:
        encode_json(normalized, what="task's return value")
    except PayloadError as exc:
        raise not_retried(TypeError(str(exc))) from exc
    return normalized


def _not_json(value: Any, exc: Exception) -> str:
    """Why ``value`` is not JSON, in the json module's words ("Object of type set is not JSON
    serializable"), as django-tasks-db's results say it (and code written for it matches
    them); normalize_json's own words ("Unsupported type: ...") when json takes the value."""
    try:
        json.dumps(value)
    except (TypeError, ValueError, RecursionError) as json_exc:
        return str(json_exc)
    return str(exc)
