"""The job lists' filters. Choices never come from scanning the table: queues from the
settings, types from the handler registry, and both from a bounded read of the newest rows."""

from __future__ import annotations

import contextlib
from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from django_sqlq import dashboard, lifecycle, registry
from django_sqlq.admin.display import breakable_name, queue_alias
from django_sqlq.queues import configured_queues


class _ChoicesFilter(admin.SimpleListFilter):
    """A filter on one column whose choices never come from scanning the table."""

    field_name = ""

    def candidates(self) -> list[str]:
        raise NotImplementedError

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:  # noqa: ARG002 (Django's signature)
        names = list(dict.fromkeys(self.candidates()))
        selected = self.value()
        if selected and selected not in names:
            names.append(selected)
        return [(name, name) for name in names]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:  # noqa: ARG002 (Django's signature)
        value = self.value()
        return queryset.filter(**{self.field_name: value}) if value else queryset


class QueueFilter(_ChoicesFilter):
    """Queues from the settings (``SQLQ["QUEUES"]``, the tasks backends' ``QUEUES``), then any
    other queue among the newest jobs."""

    title = _("queue")
    parameter_name = field_name = "queue"

    def candidates(self) -> list[str]:
        return list(configured_queues(also=dashboard.recent_values(queue_alias(), "queue")))


class TypeFilter(_ChoicesFilter):
    """Job types from the handler registry and among the newest jobs."""

    title = _("type")
    parameter_name = field_name = "type"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        # Long dotted names wrap at their dots in the filter's narrow column.
        return [
            (name, breakable_name(label)) for name, label in super().lookups(request, model_admin)
        ]

    def candidates(self) -> list[str]:
        # The web process may not have imported the apps' jobs.py yet. A broken jobs.py is
        # the worker's to report; the admin still lists the jobs.
        with contextlib.suppress(Exception):
            registry.autodiscover()
        names = {spec.name for spec in registry.registered().values()}
        names.update(dashboard.recent_values(queue_alias(), "type"))
        return sorted(names)


class WhenFilter(admin.SimpleListFilter):
    """Jobs not started yet (scheduled or pending) that are due now, or due in the future."""

    title = _("scheduled")
    parameter_name = "when"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:  # noqa: ARG002 (Django's signature)
        return [
            ("due", _("due now (waiting for a worker)")),
            ("future", _("scheduled in the future")),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:  # noqa: ARG002 (Django's signature)
        now = timezone.now()
        if self.value() == "due":
            return queryset.filter(status__in=lifecycle.WAITING, scheduled_at__lte=now)
        if self.value() == "future":
            return queryset.filter(status__in=lifecycle.WAITING, scheduled_at__gt=now)
        return queryset
