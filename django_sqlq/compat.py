"""Django's tasks framework, wherever it comes from.

Django 6.0+ ships it as ``django.tasks``; on Django 5.2 the ``django-tasks`` backport provides
the same API as ``django_tasks`` (``pip install django-sqlq[tasks]``, on any Python version).
This module picks one, and gives the rest of django_sqlq one set of names for both, so no
other module branches on the Django version. ``django.tasks`` wins whenever Django has it:
the ``tasks`` extra installs the backport whatever the Django version (package markers cannot
name it), and on Django 6+ the backport is then present but unused.

Importing this module never fails: when neither framework is installed, ``AVAILABLE`` is
False and asking for any framework name raises an ImportError that says what to install.
"""

from __future__ import annotations

from importlib.util import find_spec
from typing import TYPE_CHECKING, Any

INSTALL_HINT = (
    "django_sqlq's tasks backend needs Django's tasks framework: Django 6.0+ "
    "(django.tasks), or on Django 5.2 the backport: pip install 'django-sqlq[tasks]'."
)


def _framework() -> str | None:
    for name in ("django.tasks", "django_tasks"):
        try:
            if find_spec(name) is not None:
                return name
        except (ImportError, ValueError):  # a parent package is missing or half-imported
            continue
    return None


#: "django.tasks", "django_tasks" (the backport), or None.
FRAMEWORK: str | None = _framework()
AVAILABLE = FRAMEWORK is not None

#: The logger of the framework's lifecycle lines ("Task id=... path=... state=RUNNING"):
#: "django.tasks", or "django_tasks" for the backport.
LOGGER_NAME: str = FRAMEWORK or "django.tasks"

__all__ = [
    "AVAILABLE",
    "DEFAULT_TASK_QUEUE_NAME",
    "FRAMEWORK",
    "INSTALL_HINT",
    "LOGGER_NAME",
    "BaseTaskBackend",
    "InvalidTask",
    "InvalidTaskBackend",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultMismatch",
    "TaskResultStatus",
    "normalize_json",
    "require",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_started",
]


def require() -> None:
    """Raise ImportError (with what to install) unless a tasks framework is importable."""
    if not AVAILABLE:
        raise ImportError(INSTALL_HINT)


if TYPE_CHECKING or FRAMEWORK == "django.tasks":
    from django.tasks import DEFAULT_TASK_QUEUE_NAME, task_backends
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import Task, TaskContext, TaskError, TaskResult, TaskResultStatus
    from django.tasks.exceptions import (
        InvalidTask,
        InvalidTaskBackend,
        TaskResultDoesNotExist,
        TaskResultMismatch,
    )
    from django.tasks.signals import task_enqueued, task_finished, task_started
    from django.utils.json import normalize_json
elif FRAMEWORK == "django_tasks":
    from django_tasks import DEFAULT_TASK_QUEUE_NAME, task_backends
    from django_tasks.backends.base import BaseTaskBackend
    from django_tasks.base import Task, TaskContext, TaskError, TaskResult, TaskResultStatus
    from django_tasks.exceptions import InvalidTaskBackendError as InvalidTaskBackend
    from django_tasks.exceptions import InvalidTaskError as InvalidTask
    from django_tasks.exceptions import TaskResultDoesNotExist, TaskResultMismatch
    from django_tasks.signals import task_enqueued, task_finished, task_started
    from django_tasks.utils import normalize_json
else:

    def __getattr__(name: str) -> Any:
        if name in __all__:
            raise ImportError(f"Cannot import {name!r} from django_sqlq.compat: {INSTALL_HINT}")
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
