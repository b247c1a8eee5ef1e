"""Running one handler in a runner thread, and what it leaves behind.

``run_handler`` runs a claimed job's handler and says how the attempt ended. Owns: the
runner thread's event loop (made once, reused by every async handler, leftover
tasks cancelled after each job); a handler's timeout (a helper thread abandoned at the
deadline, its database statement interrupted); and the checks after each handler: no
transaction left open (Django does the same after each request), whether it changed a
context variable (a language or time zone activated).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import threading
from collections.abc import Callable
from typing import Any, cast

import asgiref
from django.db import DatabaseError, connections
from django.utils import timezone, translation

from django_sqlq import lifecycle, registry
from django_sqlq.control import JobControl
from django_sqlq.db import (
    has_uncommitted_writes,
    in_raw_transaction,
    stop_abandoned,
)
from django_sqlq.db.columns import ClaimedJob
from django_sqlq.exceptions import (
    JobTimeoutError,
    LeaseLostError,
    PayloadError,
    Suspended,
    TransactionLeftOpenError,
    is_not_retried,
)
from django_sqlq.jobcontext import job_context
from django_sqlq.jsoncodec import decode_json, encode_json
from django_sqlq.steps import Steps
from django_sqlq.worker.atomic import ResultRefused, run_atomic
from django_sqlq.worker.context import WorkerContext

logger = logging.getLogger("django_sqlq.worker")


thread_state = threading.local()


def context_changed(before: contextvars.Context) -> bool:
    """Whether this thread's context variables differ from ``before`` (a copy_context()
    taken earlier): whether the handler that ran in between activated a language or a time
    zone (asgiref's Local keeps them in a context variable) or set any other. The comparison
    is the C one of two contexts: values the same objects compare equal at once. asgiref
    before 3.9 changes its Local's dict in place, which no comparison sees: there, always."""
    if not _LOCALS_COPY_ON_WRITE:
        return True
    try:
        return contextvars.copy_context() != before
    except Exception:  # a changed value whose __eq__ raised
        return True


def _asgiref_copies_on_write() -> bool:
    try:
        major, minor = (int(part) for part in asgiref.__version__.split(".")[:2])
    except ValueError:
        return False
    return (major, minor) >= (3, 9)


_LOCALS_COPY_ON_WRITE = _asgiref_copies_on_write()


def _event_loop() -> asyncio.AbstractEventLoop:
    """This runner thread's event loop, made once and reused for every async handler."""
    loop: asyncio.AbstractEventLoop | None = getattr(thread_state, "loop", None)
    if loop is None or loop.is_closed():
        loop = asyncio.new_event_loop()
        thread_state.loop = loop
    return loop


def close_event_loop() -> None:
    loop: asyncio.AbstractEventLoop | None = getattr(thread_state, "loop", None)
    if loop is not None and not loop.is_closed():
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


def invoke(
    func: Callable[..., Any],
    args: tuple[Any, ...],
    timeout: float | None,
    *,
    is_async: bool,
    control: JobControl | None = None,
    atomic_alias: str | None = None,
) -> Any:
    """Run the handler ``func(*args)``. An async one's task is cancelled when ``control``'s
    cancel is requested (the coroutine sees CancelledError at its next ``await``).
    ``atomic_alias``: ``func`` runs a transaction on that database (an atomic handler's),
    ended if the call is abandoned at its timeout."""
    if is_async:
        if timeout is None:
            loop = _event_loop()
            task = loop.create_task(func(*args))
            remove = _cancel_on_request(control, loop, task)
            try:
                return loop.run_until_complete(task)
            finally:
                remove()
                _cancel_leftover_tasks(loop)
        # asyncio.wait_for alone cannot stop a coroutine that blocks its loop (time.sleep,
        # a synchronous client): it never yields. So a timed coroutine runs on a loop of its
        # own in a helper thread, abandoned at the timeout like a timed sync handler.
        return _call_with_timeout(_run_timed_coroutine, (func, args, timeout, control), timeout)
    if timeout is None:
        return func(*args)
    return _call_with_timeout(func, args, timeout, atomic_alias=atomic_alias)


LEFTOVER_TASKS_GRACE = 1.0


def _cancel_leftover_tasks(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel the tasks a job left on its thread's loop, as ``asyncio.run`` does when its
    coroutine returns: without it, a task a handler started and never awaited (a periodic
    flusher, a fire-and-forget call) ran on during every later async job of the thread,
    one more per job. A task that ignores its cancellation is given
    ``LEFTOVER_TASKS_GRACE`` seconds, then left to the loop."""
    tasks = asyncio.all_tasks(loop)
    if not tasks:
        return
    for task in tasks:
        task.cancel()
    with contextlib.suppress(Exception):
        done, _ = loop.run_until_complete(asyncio.wait(tasks, timeout=LEFTOVER_TASKS_GRACE))
        for task in done:  # retrieved: no "exception was never retrieved" at collection
            if not task.cancelled():
                task.exception()


def _cancel_on_request(
    control: JobControl | None, loop: asyncio.AbstractEventLoop, task: asyncio.Future[Any]
) -> Callable[[], None]:
    """Cancel ``task`` (from another thread) when ``control``'s cancel is requested. Returns
    the function that stops watching."""
    if control is None:
        return _nothing
    return control.on_cancel(lambda: loop.call_soon_threadsafe(task.cancel))


def _nothing() -> None:
    pass


def _run_timed_coroutine(
    func: Callable[..., Any],
    args: tuple[Any, ...],
    timeout: float,
    control: JobControl | None = None,
) -> Any:
    """Run the async handler ``func`` on a new event loop, cancelled at ``timeout`` if it
    yields to the loop by then (its ``finally`` blocks run), or when its cancel is
    requested."""

    async def timed() -> Any:
        task = asyncio.current_task()
        if task is None:  # pragma: no cover - a coroutine run by asyncio.run has its task
            raise RuntimeError("no current task")
        remove = _cancel_on_request(control, asyncio.get_running_loop(), task)
        try:
            return await asyncio.wait_for(func(*args), timeout)
        finally:
            remove()

    try:
        return asyncio.run(timed())
    except TimeoutError as exc:
        raise JobTimeoutError(f"Job ran longer than its timeout of {timeout}s") from exc


def _call_with_timeout(
    func: Callable[..., Any],
    args: tuple[Any, ...],
    timeout: float,
    *,
    atomic_alias: str | None = None,
) -> Any:
    """Run ``func`` in a helper thread and give up waiting after ``timeout`` seconds.

    A thread cannot be killed: the abandoned call runs on, but its job is already failed
    (or retried), and nothing it returns is recorded. An atomic handler's transaction (on
    ``atomic_alias``) is ended under it (stop_abandoned): it cannot commit.
    """
    box: dict[str, Any] = {}
    done = threading.Event()

    def target() -> None:
        box["connections"] = [connections[alias] for alias in connections]  # this thread's
        try:
            box["result"] = func(*args)
            check_connections()  # in this thread: the handler's connections are its own
        except BaseException as exc:
            tidy_connections()
            box["error"] = exc
        finally:
            connections.close_all()
            done.set()

    thread = threading.Thread(target=target, name="sqlq-timed-job", daemon=True)
    thread.start()
    if not done.wait(timeout):
        # Stop the statement it waits on, if it waits in a database (the usual way a job
        # hangs: a lock wait, a slow query): without it the call kept its connection, its
        # transaction and its locks for as long as the statement ran. And end an atomic
        # handler's transaction, so that it cannot commit.
        for wrapper in box.get("connections", ()):
            stop_abandoned(wrapper, end_transaction=wrapper.alias == atomic_alias)
        raise JobTimeoutError(f"Job ran longer than its timeout of {timeout}s and was abandoned")
    if "error" in box:
        raise box["error"]
    return box.get("result")


def tidy_connections() -> list[str]:
    """After a handler returned or raised, in the thread that ran it, do what Django does
    after each request: leave no transaction open. A connection the handler left inside an
    atomic block, or with autocommit off, is closed (the database rolls back what it had
    not committed, and on SQLite releases the write lock); a broken one is dropped.

    Returns a description of each connection whose uncommitted writes were lost that way:
    the attempt cannot count as a success (see TransactionLeftOpenError).
    """
    lost: list[str] = []
    # The runner threads list their connection wrappers once, in thread_state: reading
    # them back from Django's per-thread storage costs more than the rest of this check.
    known: list[Any] | None = getattr(thread_state, "connections", None)
    for connection in known if known is not None else connections.all(initialized_only=True):
        if connection.connection is None:
            continue  # never opened, or closed by the handler: the next use reconnects
        try:
            raw_begin = in_raw_transaction(connection)
            if connection.in_atomic_block or not connection.autocommit or raw_begin:
                what = (
                    "an atomic block it did not exit"
                    if connection.in_atomic_block
                    else "a transaction begun with a raw BEGIN"
                    if raw_begin
                    else "autocommit turned off"
                )
                if has_uncommitted_writes(connection):
                    lost.append(f"{connection.alias!r} ({what})")
                else:
                    logger.warning(
                        "A handler left a transaction open on database %r (%s) without "
                        "writes; it was rolled back",
                        connection.alias,
                        what,
                    )
                _discard(connection)
            elif connection.errors_occurred and not connection.is_usable():
                connection.close()
        except Exception:
            _discard(connection)
    return lost


def _discard(connection: Any) -> None:
    """Close ``connection`` whatever state the handler left it in; the next use opens a
    fresh one (connect() resets autocommit and the atomic state)."""
    connection.in_atomic_block = False
    connection.savepoint_ids = []
    connection.atomic_blocks = []
    connection.needs_rollback = False
    connection.closed_in_transaction = False
    with contextlib.suppress(Exception):
        connection.close()
    connection.connection = None


def after_database_error(error: BaseException | None) -> None:
    """After an attempt that failed with a database error (or an error raised from one), in
    the thread that ran it: close the thread's connections, so that the next job gets new
    ones. The error may come from the session itself, changed by this handler or an earlier
    one (``SET search_path``, ``SET default_transaction_read_only``, ``PRAGMA
    query_only``...): on that connection every later job of the thread would fail the
    same way. One attempt is lost to such a session, not every later job's."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, DatabaseError):
            known: list[Any] | None = getattr(thread_state, "connections", None)
            for connection in known if known is not None else connections.all():
                if connection.connection is not None and not connection.in_atomic_block:
                    with contextlib.suppress(Exception):
                        connection.close()
            return
        seen.add(id(error))
        error = error.__cause__ or error.__context__


def check_connections() -> None:
    """tidy_connections, raising TransactionLeftOpenError if uncommitted writes were lost."""
    lost = tidy_connections()
    if lost:
        raise TransactionLeftOpenError(
            f"The handler returned with a transaction open on database {', '.join(lost)}; "
            "its uncommitted writes were rolled back, so this attempt failed. Commit them "
            "(use `with transaction.atomic():`, and turn autocommit back on after "
            "set_autocommit(False))."
        )


def run_handler(
    job: ClaimedJob, handler: registry.Handler, control: JobControl, context: WorkerContext
) -> tuple[str, Any]:
    """Run the handler. Returns ("completed", result), or ("failed", ErrorInfo) for an
    attempt that may be retried, or ("failed_for_good", ErrorInfo) for one that may not.
    An atomic handler's: ("committed", (result, status)) once its completion committed
    with its writes, or ("lost", ErrorInfo) when the fence refused it (rolled back).
    ("suspended", Suspended): the handler slept or waits for an event (durable steps)."""
    context_before = contextvars.copy_context()
    try:
        payload = decode_json(job.payload)
        args: tuple[Any, ...] = (payload,)
        if handler.takes_context:
            args += (job_context(job, context.worker_id, context.database, control),)
        # The job's own timeout, else its handler's, read here in the worker (which
        # imported the handler) rather than at enqueue (where it may not be).
        timeout = job.timeout if job.timeout is not None else handler.timeout
        if handler.atomic:
            committed = invoke(
                _atomic_call(job, handler, control, context),
                args,
                timeout,
                is_async=False,
                control=control,
                atomic_alias=context.database,
            )
            check_connections()
            return "committed", committed
        result = invoke(handler.func, args, timeout, is_async=handler.is_async, control=control)
        check_connections()
        _check_steps(control)
    except Suspended as exc:  # context.sleep(), wait_for_event(): the attempt ends uncounted
        tidy_connections()
        return "suspended", exc
    except LeaseLostError as exc:
        tidy_connections()
        return "lost", lifecycle.ErrorInfo.from_exception(exc)
    except ResultRefused as exc:
        tidy_connections()
        error = _refused(exc.error, atomic=True)
        return "failed_for_good", lifecycle.ErrorInfo.from_exception(error)
    except BaseException as exc:
        tidy_connections()
        kind = "failed_for_good" if is_not_retried(exc) else "failed"
        return kind, lifecycle.ErrorInfo.from_exception(exc)
    finally:
        # A language or time zone a handler activated (translation.activate(user's
        # language), as an e-mail job does) stays with the thread, so the next job of
        # this thread ran with it: its e-mail went out in the previous user's language.
        # Both live in context variables (asgiref's Local): reset them when the handler
        # changed any. (Resetting unconditionally cost ~10 us a job, a fifth of a no-op
        # job's time.)
        if context_changed(context_before):
            translation.deactivate()
            timezone.deactivate()
    # The same checks as a payload's, size limit included: a result the database would
    # refuse fails the job instead of the write of a batch of completions. For good: the
    # work is done and only its record is impossible; running it again would repeat its
    # side effects and end the same way.
    if result is not None:
        try:
            encode_json(
                result, what="handler's return value", limit=context.conf.MAX_PAYLOAD_BYTES
            )
        except PayloadError as exc:
            return "failed_for_good", lifecycle.ErrorInfo.from_exception(_refused(exc))
    return "completed", result


def _check_steps(control: JobControl) -> None:
    """The handler returned: refuse it if it swallowed the end of its attempt (a durable
    sleep or wait's Suspended)."""
    if control.steps is not None:
        cast("Steps", control.steps).check_returned()


def _atomic_call(
    job: ClaimedJob, handler: registry.Handler, control: JobControl, context: WorkerContext
) -> Any:
    """The function invoke() runs for an atomic handler, in the handler's thread."""

    def call(*args: Any) -> tuple[Any, str]:
        return run_atomic(
            handler.func,
            *args,
            alias=context.database,
            job=job,
            worker_id=context.worker_id,
            now=context.now,
            max_result_bytes=context.conf.MAX_PAYLOAD_BYTES,
            control=control,
        )

    return call


def _refused(exc: PayloadError, *, atomic: bool = False) -> PayloadError:
    """The error of a handler whose return value cannot be stored."""
    why = (
        "its writes were rolled back, and running it again would return the same"
        if atomic
        else "running it again would repeat its work"
    )
    return PayloadError(
        f"{exc} The handler ran to the end; the job is failed without retry, as {why} "
        "(return only what JSON can hold: convert datetimes, sets... or store large data "
        "elsewhere)."
    )
