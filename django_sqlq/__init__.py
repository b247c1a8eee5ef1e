"""django_sqlq: a background job queue in the database your Django project already has.

Only public names live here. Importing this module never touches models, so it is safe to
import from settings-time code such as ``jobs.py`` modules and ``@handler`` decorators.
"""

from __future__ import annotations

from importlib import import_module
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

from django_sqlq.decorators import handler

if TYPE_CHECKING:
    from django_sqlq.api import (
        CancelResult,
        JobGroup,
        abulk_enqueue,
        acancel,
        aenqueue,
        bulk_enqueue,
        cancel,
        enqueue,
    )
    from django_sqlq.exceptions import EventTimeout, JobCancelled
    from django_sqlq.models import Chain
    from django_sqlq.queues import pause_queue, resume_queue
    from django_sqlq.steps import emit_event

try:
    __version__ = version("django-sqlq")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0+unknown"

__all__ = [
    "CancelResult",
    "Chain",
    "EventTimeout",
    "JobCancelled",
    "JobGroup",
    "__version__",
    "abulk_enqueue",
    "acancel",
    "aenqueue",
    "bulk_enqueue",
    "cancel",
    "emit_event",
    "enqueue",
    "handler",
    "pause_queue",
    "resume_queue",
]

# Where each public name lives. Those modules import the models: they are imported on first
# use of the name, so that importing django_sqlq (for @handler) never raises
# AppRegistryNotReady.
_HOMES = {
    "enqueue": "django_sqlq.api",
    "bulk_enqueue": "django_sqlq.api",
    "aenqueue": "django_sqlq.api",
    "abulk_enqueue": "django_sqlq.api",
    "cancel": "django_sqlq.api",
    "acancel": "django_sqlq.api",
    "CancelResult": "django_sqlq.api",
    "JobGroup": "django_sqlq.api",
    "Chain": "django_sqlq.models",
    "pause_queue": "django_sqlq.queues",
    "resume_queue": "django_sqlq.queues",
    "JobCancelled": "django_sqlq.exceptions",
    "EventTimeout": "django_sqlq.exceptions",
    "emit_event": "django_sqlq.steps",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'django_sqlq' has no attribute {name!r}")
    return getattr(import_module(home), name)
