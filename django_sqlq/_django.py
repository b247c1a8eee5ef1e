"""The private Django APIs django_sqlq uses, each behind one function that says why.

Checked against Django 5.2 and 6.1 (the versions the test matrix runs: ``py311-dj52`` and
``py313-dj61``); both are exercised by every run of the suite (``enqueue()`` builds every job
with :func:`unsaved_instance`; the admin's delete action goes through :func:`raw_delete`).
When a Django release changes one of them, this is the file to change.
"""

from __future__ import annotations

from typing import Any, TypeVar

from django.db import models
from django.db.models.base import ModelState

M = TypeVar("M", bound=models.Model)


def raw_delete(queryset: models.QuerySet[Any], alias: str) -> int:
    """Delete the rows ``queryset`` matches in one ``DELETE ... WHERE`` with its conditions;
    returns how many. ``QuerySet._raw_delete`` (private; the same in 5.2 and 6.1): no related
    objects collected, no ``pre_delete``/``post_delete`` signals.

    Why not ``QuerySet.delete()``: it is one statement only while nothing listens to the
    delete signals for the model. Once any receiver does, it first reads the matching rows and
    then deletes them by primary key, so a job that a worker claims in between (no longer
    matching "not processing") would be deleted under its worker. The jobs table has no
    relations to cascade to."""
    return int(queryset._raw_delete(alias))  # type: ignore[attr-defined]


def unsaved_instance(model: type[M]) -> M:
    """An unsaved ``model`` instance with a fresh ``ModelState`` and nothing else, without
    running ``Model.__init__``: the caller fills its ``__dict__`` with every field's attname.

    Why: ``Model.__init__`` walks every field and sends ``post_init``; for the jobs table it
    cost more than the INSERT on SQLite, and more than the whole statement when
    ``bulk_enqueue()`` builds 100,000 jobs. ``ModelState`` (``django.db.models.base``, not
    documented) is what ``__init__`` sets as ``_state``; its class attributes give the
    defaults (5.2: ``db``, ``adding``, ``fields_cache``; 6.1 adds ``fetch_mode`` and
    ``peers``, also class-level), so a bare instance works on both. No ``post_init`` signal is
    sent: the jobs model has no field that needs one."""
    instance = model.__new__(model)
    instance.__dict__["_state"] = ModelState()
    return instance
