"""A database router for a jobs table in its own database (``SQLQ["DATABASE"]``).

::

    DATABASES = {"default": {...}, "queue": {...}}
    SQLQ = {"DATABASE": "queue"}
    DATABASE_ROUTERS = ["django_sqlq.routers.QueueRouter"]

django_sqlq's models are read and written on the queue database and migrated only there; no
other app is migrated there, so ``migrate --database queue`` creates django_sqlq's tables and
nothing else. Put it first in ``DATABASE_ROUTERS``: it answers only for what it owns and
leaves everything else to the routers after it.
"""

from __future__ import annotations

from typing import Any

from django.db import DEFAULT_DB_ALIAS
from django.db.models import Model

APP_LABEL = "django_sqlq"


def _queue_alias() -> str:
    from django_sqlq.conf import get_settings

    return get_settings().DATABASE


class QueueRouter:
    """Routes django_sqlq to ``SQLQ["DATABASE"]`` (read at each call, so
    ``override_settings`` works)."""

    app_label = APP_LABEL

    def db_for_read(self, model: type[Model], **hints: Any) -> str | None:
        return self._db_for(model, hints)

    def db_for_write(self, model: type[Model], **hints: Any) -> str | None:
        return self._db_for(model, hints)

    def _db_for(self, model: type[Model], hints: dict[str, Any]) -> str | None:
        if model._meta.app_label != self.app_label:
            return None
        # A job read from a given database (Job.objects.using("default"), the old table of
        # a move) is saved, deleted and refreshed there, as Django's default routing does:
        # on the queue database it would overwrite or delete another job with its id.
        instance = hints.get("instance")
        if isinstance(instance, model) and instance._state.db:
            return str(instance._state.db)
        return _queue_alias()

    def allow_relation(self, obj1: Model, obj2: Model, **hints: Any) -> bool | None:
        ours = (obj1._meta.app_label == self.app_label, obj2._meta.app_label == self.app_label)
        if all(ours):
            return True
        return None

    def allow_migrate(
        self,
        db: str,
        app_label: str,
        model_name: str | None = None,  # noqa: ARG002 (Django's signature)
        **hints: Any,
    ) -> bool | None:
        queue = _queue_alias()
        if app_label == self.app_label:
            return db == queue
        if db == queue and queue != DEFAULT_DB_ALIAS:
            # A database of its own holds the jobs and nothing else.
            return False
        return None
