"""django_sqlq: a background job queue in the database your Django project already has.

Only public names live here. Importing this module never touches models, so it is safe to
import from settings-time code such as ``jobs.py`` modules and ``@handler`` decorators.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

from django_sqlq.decorators import handler

if TYPE_CHECKING:
    from django_sqlq.api import (
        CancelResult,
        Chain,
        JobGroup,
        abulk_enqueue,
        acancel,
        aenqueue,
        bulk_enqueue,
        cancel,
        enqueue,
    )
    from django_sqlq.exceptions import JobCancelled
    from django_sqlq.queues import pause_queue, resume_queue

try:
    __version__ = version("django-sqlq")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0+unknown"

__all__ = [
    "CancelResult",
    "Chain",
    "JobCancelled",
    "JobGroup",
    "__version__",
    "abulk_enqueue",
    "acancel",
    "aenqueue",
    "bulk_enqueue",
    "cancel",
    "enqueue",
    "handler",
    "pause_queue",
    "resume_queue",
]

_API = (
    "enqueue",
    "bulk_enqueue",
    "aenqueue",
    "abulk_enqueue",
    "cancel",
    "acancel",
    "CancelResult",
    "Chain",
    "JobGroup",
)


def __getattr__(name: str) -> Any:
    # The modules below import the models: imported on first use, so that importing
    # django_sqlq (for @handler) never raises AppRegistryNotReady.
    if name in _API:
        from django_sqlq import api

        return getattr(api, name)
    if name in ("pause_queue", "resume_queue"):
        from django_sqlq import queues

        return getattr(queues, name)
    if name == "JobCancelled":
        from django_sqlq.exceptions import JobCancelled

        return JobCancelled
    raise AttributeError(f"module 'django_sqlq' has no attribute {name!r}")
