"""The manager every django_sqlq model uses: it reads and writes the queue database."""

from __future__ import annotations

from typing import Any

from django.db import models

from django_sqlq.conf import get_settings
from django_sqlq.exceptions import ConfigurationError


def _queue_alias() -> str | None:
    """``SQLQ["DATABASE"]``, or None while the setting is invalid (the checks report it)."""
    try:
        return get_settings().DATABASE
    except ConfigurationError:
        return None


class QueueDatabaseManager(models.Manager[Any]):
    """A manager whose querysets use the queue database (``SQLQ["DATABASE"]``) unless told
    otherwise with ``using()`` or ``db_manager()``: ``Job.objects`` reads the table the
    workers and the admin use, with or without a database router."""

    def get_queryset(self) -> models.QuerySet[Any]:
        queryset = super().get_queryset()
        if self._db is None:
            alias = _queue_alias()
            if alias is not None:
                queryset = queryset.using(alias)
        return queryset


#: Django's warnings that an engine without partial indexes (MariaDB) creates an index with
#: a condition without it (W037) and skips a unique constraint with one (W036). django_sqlq's
#: migration 0015 gives MariaDB other shapes for them, so they do not concern its users.
PARTIAL_INDEX_WARNINGS = frozenset({"models.W036", "models.W037"})


def without_partial_index_warnings(messages: list[Any]) -> list[Any]:
    """A model's system check ``messages`` without :data:`PARTIAL_INDEX_WARNINGS`."""
    return [message for message in messages if message.id not in PARTIAL_INDEX_WARNINGS]
