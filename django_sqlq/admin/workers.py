"""The workers' list: each worker process as it last reported itself, read-only."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.contrib.admin.views.main import ChangeList
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from django_sqlq import dashboard
from django_sqlq.admin.display import admin_links, queue_alias
from django_sqlq.admin.pagination import BoundedCountPaginator, NulSafeChangeList
from django_sqlq.models import WorkerProcess

if TYPE_CHECKING:
    WorkerModelAdmin = admin.ModelAdmin[WorkerProcess]
else:
    WorkerModelAdmin = admin.ModelAdmin


class WorkerProcessAdmin(WorkerModelAdmin):
    """Worker processes as they last reported themselves. Read-only; old rows may be
    deleted."""

    list_display = (
        "worker_id", "state", "hostname", "pid", "queues_display", "concurrency",
        "last_seen_at", "jobs_done", "jobs_failed", "started_at", "stopped_at",
    )  # fmt: skip
    list_filter = ("hostname",)
    search_fields = ("worker_id", "hostname")
    readonly_fields = (
        "worker_id", "hostname", "pid", "queues", "concurrency", "started_at",
        "last_seen_at", "stopped_at", "jobs_done", "jobs_failed",
    )  # fmt: skip
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    paginator = BoundedCountPaginator

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:  # noqa: ARG002 (Django's signature)
        return NulSafeChangeList

    class Media:
        css = {"all": ["django_sqlq/admin.css"]}
        js = ["django_sqlq/refresh.js"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[WorkerProcess]:
        return super().get_queryset(request).using(queue_alias())

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        context = {**admin_links(self.admin_site.name), **(extra_context or {})}
        return super().changelist_view(request, context)

    def has_add_permission(self, request: HttpRequest) -> bool:  # noqa: ARG002 (Django's signature)
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:  # noqa: ARG002 (Django's signature)
        return False

    @admin.display(description=_("state"))
    def state(self, obj: WorkerProcess) -> SafeString:
        if obj.stopped_at is not None:
            return format_html(
                '<span class="sqlq-badge sqlq-cancelled">{}</span>', gettext("stopped")
            )
        if obj.last_seen_at >= timezone.now() - timedelta(seconds=dashboard.ALIVE_SECONDS):
            return format_html(
                '<span class="sqlq-badge sqlq-completed">{}</span>', gettext("running")
            )
        return format_html(
            '<span class="sqlq-badge sqlq-failed">{}</span>', gettext("not responding")
        )

    @admin.display(description=_("queues"))
    def queues_display(self, obj: WorkerProcess) -> str:
        return (
            ", ".join(str(q) for q in obj.queues)
            if isinstance(obj.queues, list)
            else str(obj.queues)
        )
