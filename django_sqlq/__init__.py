"""django_sqlq: a background job queue in the database your Django project already has.

Only public names live here. Importing this module never touches models, so it is safe to
import from settings-time code such as ``jobs.py`` modules and ``@handler`` decorators.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

from django_sqlq.registry import handler

if TYPE_CHECKING:
    from django_sqlq.api import (
        abulk_enqueue,
        aenqueue,
        bulk_enqueue,
        enqueue,
        pause_queue,
        resume_queue,
    )

try:
    __version__ = version("django-sqlq")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0+unknown"

__all__ = [
    "__version__",
    "abulk_enqueue",
    "aenqueue",
    "bulk_enqueue",
    "enqueue",
    "handler",
    "pause_queue",
    "resume_queue",
]


def __getattr__(name: str) -> Any:
    # enqueue/bulk_enqueue import the models lazily, on first use, so that importing
    # django_sqlq (for @handler) never raises AppRegistryNotReady.
    if name in (
        "enqueue",
        "bulk_enqueue",
        "aenqueue",
        "abulk_enqueue",
        "pause_queue",
        "resume_queue",
    ):
        from django_sqlq import api

        return getattr(api, name)
    raise AttributeError(f"module 'django_sqlq' has no attribute {name!r}")
