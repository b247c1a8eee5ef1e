"""Handlers: job type names -> callables, and discovery of apps' ``jobs.py``
(``@handler``, in :mod:`django_sqlq.decorators`, registers them here).

Only registered handlers ever run. A job type that is a dotted path makes the worker import
that path's module (which registers its ``@handler`` functions), never call an arbitrary
importable object, so a row written by hand cannot make the worker call ``os.system``.
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
import inspect
import logging
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.apps import apps
from django.utils.module_loading import autodiscover_modules, import_string, module_has_submodule

from django_sqlq import compat, validation
from django_sqlq.exceptions import InvalidJobError, UnknownHandlerError, UnknownJobTypeError

MAX_TYPE_LENGTH = 255


@dataclass(frozen=True)
class Handler:
    """A registered job handler. ``func(payload)``, or ``func(payload, context)`` when
    ``takes_context``."""

    name: str
    func: Callable[..., Any]
    timeout: float | None = None
    takes_context: bool = False
    # Called by the worker, in the runner thread, with the job's JobContext
    # (django_sqlq.jobcontext): before the handler runs, and after its outcome is written
    # ("completed", "pending" for a retry, or "failed"; the result or the ErrorInfo).
    # Exceptions from hooks are logged, never fatal. The tasks backend's signals use them.
    on_start: Callable[[Any], None] | None = None
    on_finish: Callable[[Any, str, Any], None] | None = None
    # Run inside a transaction on the queue database that also writes the job's completion
    # (fenced by worker and attempt): the handler's writes there and its completion commit
    # together or not at all. Synchronous handlers only.
    atomic: bool = False
    # Whether ``func`` is a coroutine function: decided once, not for every job.
    is_async: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "is_async", inspect.iscoroutinefunction(self.func))


# A resolver turns a job type that no @handler claims into a Handler (the tasks backend
# uses one for @task functions), or returns None.
Resolver = Callable[[str], Handler | None]

_handlers: dict[str, Handler] = {}
_resolvers: list[Resolver] = []
_lock = threading.Lock()
_unimportable: set[str] = set()  # module names _load() could not import
_discovered = False  # autodiscover() has imported every installed app's jobs.py
_tasks: set[str] = set()  # type names check_known() found to be @task paths
_broken: set[str] = set()  # apps' modules the type check could not import (warned once)

logger = logging.getLogger("django_sqlq")


def dotted_path(func: Callable[..., Any]) -> str:
    return f"{func.__module__}.{func.__qualname__}"


def validate_type_name(name: object) -> str:
    return validation.check_name("job type", name, max_length=MAX_TYPE_LENGTH)


def register(
    func: Callable[..., Any],
    name: str | None = None,
    *,
    timeout: float | None = None,
    takes_context: bool = False,
    atomic: bool = False,
) -> Handler:
    """Register ``func`` under ``name`` (default: its dotted path) and return the Handler."""
    if not callable(func):
        raise TypeError(f"@handler needs a callable, got {func!r}.")
    timeout = validation.check_timeout(timeout, what="A handler timeout")
    name = validate_type_name(name if name is not None else dotted_path(func))
    if not isinstance(atomic, bool):
        raise TypeError(f"@handler(atomic=...) takes True or False, got {atomic!r}.")
    spec = Handler(
        name=name, func=func, timeout=timeout, takes_context=takes_context, atomic=atomic
    )
    if atomic and spec.is_async:
        raise TypeError(
            f"@handler(atomic=True) cannot register {dotted_path(func)}: it is a coroutine "
            "function. An async handler's database calls run in other threads (through "
            "sync_to_async), outside the transaction the worker would open; write a "
            "synchronous handler for atomic=True."
        )
    with _lock:
        existing = _handlers.get(name)
        if existing is not None and dotted_path(existing.func) != dotted_path(func):
            raise ValueError(
                f"Job type {name!r} is already registered to {dotted_path(existing.func)}; "
                f"cannot register {dotted_path(func)} under the same name."
            )
        _handlers[name] = spec
        path = dotted_path(func)
        if path != name:
            # The function can also be enqueued by passing it or its dotted path.
            _handlers.setdefault(path, spec)
    return spec


def type_name_for(target: str | Callable[..., Any]) -> str:
    """The job type to store for what the caller passed to enqueue()."""
    if isinstance(target, str):
        name = validate_type_name(target)
        # The dotted path of a handler registered under a name (``@handler("emails.send")``
        # on ``app.jobs.send``): its jobs carry the name, like those enqueued by function.
        spec = _handlers.get(name) or _load(name)
        return spec.name if spec is not None else name
    if callable(target):
        for spec in list(_handlers.values()):
            if spec.func is target:
                return spec.name
        raise UnknownHandlerError(
            f"{dotted_path(target)} is not a registered handler: decorate it with @handler."
        )
    raise InvalidJobError(
        f"enqueue() takes a handler name, dotted path or function, got {target!r}."
    )


def _load(path: str) -> Handler | None:
    """Import the module of dotted ``path`` unless it already is (once: a module that
    cannot be imported is not tried again), which registers its handlers; the handler at
    ``path`` then, or None."""
    module_name = _module_of(path)
    if not module_name or module_name in sys.modules or module_name in _unimportable:
        return None
    try:
        importlib.import_module(module_name)
    except ImportError:
        if len(_unimportable) < 10_000:
            _unimportable.add(module_name)
        return None
    return _handlers.get(path)


def _module_of(name: str) -> str:
    """The module part of dotted path ``name``; "" for none, or for a relative one
    (``.tests.noop``: importlib would want a package to resolve it against)."""
    module_name = name.rpartition(".")[0]
    return "" if module_name.startswith(".") else module_name


def add_resolver(resolver: Resolver) -> None:
    with _lock:
        if resolver not in _resolvers:
            _resolvers.append(resolver)


def get(name: str) -> Handler:
    """The handler for job type ``name``. Raises UnknownHandlerError naming the type."""
    spec = _handlers.get(name)
    if spec is not None:
        return spec
    module_name = _module_of(name)
    if module_name:
        # A dotted path: importing its module registers the module's @handler functions.
        with contextlib.suppress(ImportError):
            importlib.import_module(module_name)
        spec = _handlers.get(name)
        if spec is not None:
            return spec
    for resolver in list(_resolvers):
        spec = resolver(name)
        if spec is not None:
            return spec
    raise UnknownHandlerError(f"No handler is registered for job type {name!r}.{_advice(name)}")


def _advice(name: str) -> str:
    """What to do about job type ``name`` that nothing answers to: the close names, and
    whether it looks like a handler or ``@task`` that was renamed or moved."""
    close = suggestions(name)
    hint = f" Did you mean {' or '.join(map(repr, close))}?" if close else ""
    module_name, _, attribute = name.rpartition(".")
    if module_name and module_name in sys.modules:
        return (
            f"{hint} Module {module_name} has no @handler or @task named {attribute!r}: if "
            "it was renamed or moved, jobs enqueued before carry the old name; keep the old "
            "name importable until they are done, or delete them and enqueue them again "
            "under the new name (manage.py sqlq_jobs)."
        )
    return (
        f"{hint} Register one with @handler({name!r}) in an installed app's jobs.py, or "
        "give the dotted path of a @task function."
    )


def suggestions(name: str) -> list[str]:
    """Registered job types (and ``@task`` functions of the module a dotted ``name`` names)
    close to ``name``, best first: at most three."""
    candidates = set(_handlers)
    module_name = name.rpartition(".")[0]
    module = sys.modules.get(module_name) if module_name else None
    if module is not None:
        candidates.update(f"{module_name}.{attr}" for attr in _task_names(module))
    candidates.discard(name)
    scored = []
    for candidate in candidates:
        # Compared after the dotted prefix they share: every function of one module would
        # look close to any name in it.
        cut = os.path.commonprefix([name, candidate]).rfind(".") + 1  # noqa: RUF071 (strings)
        score = difflib.SequenceMatcher(None, name[cut:], candidate[cut:]).ratio()
        if score >= 0.75:
            scored.append((-score, candidate))
    return [candidate for _, candidate in sorted(scored)[:3]]


def _task_names(module: Any) -> list[str]:
    """The names of the ``@task`` objects in ``module`` (none without a tasks framework)."""
    if not compat.AVAILABLE:
        return []
    return [attr for attr, value in vars(module).items() if isinstance(value, compat.Task)]


def _is_task(name: str) -> bool:
    """Whether ``name`` is the dotted path of a ``@task`` (as the tasks backend stores its
    jobs' type): imported, never called."""
    if not compat.AVAILABLE or not _module_of(name):
        return False
    try:
        found = import_string(name)
    except ImportError:
        return False
    return isinstance(found, compat.Task)


def check_known(name: str) -> None:
    """Raise UnknownJobTypeError unless a job of type ``name`` could run: a registered
    handler (after every installed app's ``jobs.py`` was imported once), the dotted path
    of one (its module is imported) or of a ``@task``, or a type a resolver answers to.
    enqueue() calls it when ``SQLQ["CHECK_TYPES"]`` is on."""
    if name in _handlers or name in _tasks:
        return
    if not _discovered:
        _discover_for_check()
        if name in _handlers:
            return
    if _load(name) is not None or name in _handlers:
        return
    # A resolver imports dotted paths too: a relative one (".tests.noop") is no path.
    if not name.startswith(".") and (
        _is_task(name) or any(resolver(name) is not None for resolver in list(_resolvers))
    ):
        with _lock:
            if len(_tasks) < 10_000:
                _tasks.add(name)
        return
    close = suggestions(name)
    hint = f" Did you mean {' or '.join(map(repr, close))}?" if close else ""
    raise UnknownJobTypeError(
        f"Unknown job type {name!r}: no @handler or @task answers to it, so no worker "
        f"could run it.{hint} Handlers register in an installed app's jobs.py; a process "
        "that enqueues jobs without the handlers' code can set SQLQ['CHECK_TYPES'] = False."
    )


def registered() -> dict[str, Handler]:
    return dict(_handlers)


def find(name: str) -> Handler | None:
    """The handler registered under ``name``, or None (no import, no resolver)."""
    return _handlers.get(name)


def unregister(name: str) -> None:
    """Remove a handler (for tests)."""
    with _lock:
        spec = _handlers.pop(name, None)
        if spec is not None:
            for key, value in list(_handlers.items()):
                if value is spec:
                    del _handlers[key]


def autodiscover() -> None:
    """Import each installed app's ``jobs`` module, so its @handler functions register, and,
    when Django's tasks framework is installed, its ``tasks`` module (where the framework's
    docs put @task functions), so that the ``@recurring`` schedules above them are declared.
    The framework itself imports a task's module only to run it: without this, a
    ``@recurring`` in ``tasks.py`` would never reach the scheduler."""
    global _discovered
    autodiscover_modules("jobs")
    if compat.AVAILABLE:
        autodiscover_modules("tasks")
    _discovered = True


def _discover_for_check() -> None:
    """autodiscover() for enqueue()'s type check: one app's module that cannot be imported
    (a ``jobs.py`` that imports a package only the workers have) is a warning, once, and the
    other apps' modules are still imported; it never escapes from enqueue(). The worker's
    start still imports them all and fails on such a module."""
    global _discovered
    with contextlib.suppress(Exception):  # anything a module raises: each app alone below
        autodiscover()
        return
    names = ["jobs", "tasks"] if compat.AVAILABLE else ["jobs"]
    for app_config in apps.get_app_configs():
        for name in names:
            module_name = f"{app_config.name}.{name}"
            try:
                importlib.import_module(module_name)
            except Exception:
                if not module_has_submodule(app_config.module, name):
                    continue  # the app has no such module
                if module_name not in _broken:
                    _broken.add(module_name)
                    logger.warning(
                        "enqueue() checks job types (SQLQ['CHECK_TYPES']) and imported every "
                        "installed app's %s module to find its handlers, but %s could not be "
                        "imported; its handlers are unknown to this process. A process that "
                        "enqueues jobs without the workers' code can set "
                        "SQLQ['CHECK_TYPES'] = False.",
                        name,
                        module_name,
                        exc_info=True,
                    )
    _discovered = True
