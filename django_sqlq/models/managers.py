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
