"""The Django admin for the queue: jobs, failed jobs, actions that call lifecycle."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _

from django_sqlq import lifecycle
from django_sqlq.models import FailedJob, Job, WorkerProcess


if TYPE_CHECKING:
    JobModelAdmin = admin.ModelAdmin[Job]
    WorkerModelAdmin = admin.ModelAdmin[WorkerProcess]
else:
    JobModelAdmin = WorkerModelAdmin = admin.ModelAdmin


def _pretty(value: Any) -> str:
    return format_html("<pre>{}</pre>", json.dumps(value, indent=2, sort_keys=True))


class JobAdmin(JobModelAdmin):
    list_display = (
        "id", "type", "queue", "status", "priority", "attempts_display",
        "scheduled_at", "created_at", "error_line",
    )  # fmt: skip
    list_filter = ("status", "queue", "type")
    search_fields = ("=id", "type")
    ordering = ("-id",)
    show_full_result_count = False
    actions = ("retry_jobs", "cancel_jobs", "run_jobs_now")
    readonly_fields = (
        "id", "type", "queue", "status", "priority", "attempts", "max_attempts", "timeout",
        "payload_display", "result_display", "last_error_display", "scheduled_at",
        "created_at", "updated_at", "started_at", "completed_at", "locked_by", "locked_at",
        "lease_expires_at",
    )  # fmt: skip
    fields = readonly_fields

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_retry_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("django_sqlq.retry_job")

    def has_cancel_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("django_sqlq.cancel_job")

    @admin.display(description=_("attempts"))
    def attempts_display(self, obj: Job) -> str:
        return f"{obj.attempts}/{obj.max_attempts}"

    @admin.display(description=_("error"))
    def error_line(self, obj: Job) -> str:
        return obj.last_error.split("\n", 1)[0][:120]

    @admin.display(description=_("payload"))
    def payload_display(self, obj: Job) -> str:
        return _pretty(obj.payload)

    @admin.display(description=_("result"))
    def result_display(self, obj: Job) -> str:
        return _pretty(obj.result)

    @admin.display(description=_("last error"))
    def last_error_display(self, obj: Job) -> str:
        return format_html("<pre>{}</pre>", obj.last_error)

    def _report(self, request: HttpRequest, verb: str, outcome: lifecycle.Outcome) -> None:
        self.message_user(
            request,
            _("%(verb)s %(changed)d job(s); skipped %(skipped)d whose status did not allow it.")
            % {"verb": verb, "changed": outcome.changed, "skipped": outcome.skipped},
            messages.SUCCESS if outcome.changed else messages.WARNING,
        )

    @admin.action(description=_("Retry selected jobs now"), permissions=["retry"])
    def retry_jobs(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        ids = list(queryset.values_list("pk", flat=True))
        self._report(request, "Retried", lifecycle.retry_now(ids, alias=queryset.db))

    @admin.action(description=_("Cancel selected pending jobs"), permissions=["cancel"])
    def cancel_jobs(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        ids = list(queryset.values_list("pk", flat=True))
        self._report(request, "Cancelled", lifecycle.cancel(ids, alias=queryset.db))

    @admin.action(description=_("Run selected pending jobs now"), permissions=["change"])
    def run_jobs_now(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        ids = list(queryset.values_list("pk", flat=True))
        self._report(request, "Scheduled now", lifecycle.run_now(ids, alias=queryset.db))


@admin.register(Job)
class AllJobsAdmin(JobAdmin):
    pass


@admin.register(FailedJob)
class FailedJobAdmin(JobAdmin):
    list_display = ("id", "error_line", "type", "queue", "attempts_display", "completed_at")
    list_filter = ("queue", "type")
    actions = ("retry_jobs",)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Job]:
        return super().get_queryset(request).failed()  # type: ignore[attr-defined, no-any-return]


@admin.register(WorkerProcess)
class WorkerProcessAdmin(WorkerModelAdmin):
    list_display = (
        "worker_id", "hostname", "pid", "queues", "concurrency", "last_seen_at",
        "jobs_done", "jobs_failed", "stopped_at",
    )  # fmt: skip
    readonly_fields = list_display

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
