"""The private Django APIs django_sqlq uses, each behind one function that says why.

Checked against Django 5.2 and 6.1 (the versions the test matrix runs: ``py311-dj52`` and
``py313-dj61``); both are exercised by every run of the suite (``enqueue()`` builds every job
with :func:`unsaved_instance`). The admin's delete action needs no private API: it is one
``DELETE ... RETURNING`` of its own (``QueueOps.delete_jobs``).
When a Django release changes one of them, this is the file to change.
"""

from __future__ import annotations

from typing import TypeVar

from django.db import models
from django.db.models.base import ModelState

M = TypeVar("M", bound=models.Model)


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
