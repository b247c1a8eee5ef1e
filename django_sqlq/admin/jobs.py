"""The job lists: every job (with the queue's dashboard), and the failed jobs on their own.

Both share :class:`JobAdmin`: the columns, filters and search; the permissions (view, change
for run-now, delete, and the ``retry_job``/``cancel_job`` permissions the model adds); the
actions of :mod:`django_sqlq.admin.actions`, on the lists and as the job page's buttons; and
a delete that never removes a job a worker holds.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import (
    HttpRequest,
    HttpResponse,
    HttpResponseBase,
    HttpResponseNotAllowed,
    HttpResponseRedirect,
)
from django.urls import URLPattern, path
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from django_sqlq import dashboard
from django_sqlq.admin.actions import (
    DELETE,
    PAGE_ACTIONS,
    JobAction,
    act,
    cancel_jobs,
    delete_jobs,
    retry_jobs,
    run_jobs_now,
)
from django_sqlq.admin.chains import ChainViews
from django_sqlq.admin.dashboard_views import QueueDashboardViews
from django_sqlq.admin.display import (
    ERROR_LINE_CHARS,
    breakable_name,
    local_datetime,
    queue_alias,
    status_badge,
)
from django_sqlq.admin.filters import QueueFilter, TypeFilter, WhenFilter
from django_sqlq.admin.job_page import JobPageAdmin
from django_sqlq.admin.job_steps import JobStepsViews
from django_sqlq.admin.pagination import BoundedCountPaginator, JobChangeList
from django_sqlq.lifecycle import WAITING
from django_sqlq.models import Job, JobStatus

# The largest id a BigAutoField holds: a longer number searched for matches no job.
BIGINT_MAX = 2**63 - 1


class JobAdmin(ChainViews, JobStepsViews, JobPageAdmin):
    """What the all-jobs and the failed-jobs lists share: columns, job page, chain page,
    actions (and the job page's actions on durable steps: wake, emit an event)."""

    list_display = (
        "id", "type_display", "queue", "status_and_progress", "priority",
        "attempts_display", "scheduled_display", "created_display", "error_line",
    )  # fmt: skip
    list_filter = ("status", QueueFilter, TypeFilter, WhenFilter)
    search_fields = ("=id", "type")
    search_help_text = _(
        "A job id (42 or #42), a task's result id (a UUID), or part of a job type."
    )
    ordering = ("-id",)
    sortable_by = ("id",)
    list_per_page = 50
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    paginator = BoundedCountPaginator
    actions = (retry_jobs, cancel_jobs, run_jobs_now, delete_jobs)

    class Media:
        css = {"all": ["django_sqlq/admin.css"]}
        js = ["django_sqlq/refresh.js"]

    # -- permissions ----------------------------------------------------------------

    def _has(self, request: HttpRequest, codename: str) -> bool:
        """The jobs' permission; the failed-jobs list also accepts its proxy's own."""
        user = request.user
        if user.has_perm(f"django_sqlq.{codename}_job"):
            return True
        return self.model is not Job and user.has_perm(
            f"django_sqlq.{codename}_{self.opts.model_name}"
        )

    def has_add_permission(self, request: HttpRequest) -> bool:  # noqa: ARG002 (Django's signature)
        return False  # jobs are enqueued by code, not typed in

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:  # noqa: ARG002 (Django's signature)
        return self._has(request, "view") or self._has(request, "change")

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # The job page is read-only for everyone; "change" allows the run-now action.
        return obj is None and self._has(request, "change")

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:  # noqa: ARG002 (Django's signature)
        return self._has(request, "delete")

    def has_retry_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("django_sqlq.retry_job")

    def has_cancel_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("django_sqlq.cancel_job")

    # -- queryset, list -------------------------------------------------------------

    def get_queryset(self, request: HttpRequest) -> QuerySet[Job]:
        return super().get_queryset(request).using(queue_alias())

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:  # noqa: ARG002 (Django's signature)
        return JobChangeList

    def get_search_results(
        self,
        request: HttpRequest,  # noqa: ARG002 (Django's signature)
        queryset: QuerySet[Any],
        search_term: str,
    ) -> tuple[QuerySet[Any], bool]:
        term = search_term.strip()
        if not term:
            return queryset, False
        number = term.lstrip("#")
        # ASCII digits only: "²" and other Unicode digits are isdigit() but not int().
        if number.isascii() and number.isdigit():
            if int(number) > BIGINT_MAX:  # no such id; the database would refuse the number
                return queryset.none(), False
            return queryset.filter(pk=int(number)), False
        if len(term) in (32, 36):  # a UUID: a task's result id
            try:
                return queryset.filter(uuid=uuid.UUID(term)), False
            except ValueError:
                pass
        return queryset.filter(type__icontains=term), False

    def get_actions(self, request: HttpRequest, action_location: Any = None) -> dict[str, Any]:
        # Django 6.1 passes action_location (actions can also live on the change form).
        if action_location is None:
            actions = super().get_actions(request)
        else:
            actions = super().get_actions(request, action_location=action_location)  # type: ignore[call-arg]
        # Ours (delete_jobs) skips running jobs and does not list every row it deletes.
        actions.pop("delete_selected", None)
        return actions

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        context = {
            "title": str(self.opts.verbose_name_plural).capitalize(),
            **self._links(),
            **(extra_context or {}),
        }
        return super().changelist_view(request, context)

    @admin.display(description=_("scheduled"))
    def scheduled_display(self, obj: Job) -> SafeString:
        when = local_datetime(obj.scheduled_at)
        if obj.status in WAITING and obj.scheduled_at > timezone.now():
            wait = (obj.scheduled_at - timezone.now()).total_seconds()
            return format_html(
                '{} <span class="sqlq-quiet">({})</span>',
                when,
                gettext("in %s") % dashboard.format_age(wait),
            )
        return format_html("{}", when)

    @admin.display(description=_("created"))
    def created_display(self, obj: Job) -> str:
        return local_datetime(obj.created_at)

    @admin.display(description=_("type"))
    def type_display(self, obj: Job) -> SafeString:
        return breakable_name(obj.type)

    @admin.display(description=_("status"))
    def status_and_progress(self, obj: Job) -> SafeString:
        """The status, and under it a running job's progress: a column of its own was empty
        for every other job, and cost the list its last column at 1400 px."""
        progress = self.progress_display(obj)
        if not progress:
            return status_badge(obj.status)
        return format_html(
            '{}<div class="sqlq-list-progress">{}</div>', status_badge(obj.status), progress
        )

    @admin.display(description=_("error"))
    def error_line(self, obj: Job) -> str:
        text = getattr(obj, "error_head", None)
        if text is None:
            text = obj.last_error[:ERROR_LINE_CHARS]
        return text.split("\n", 1)[0]

    # -- URLs -----------------------------------------------------------------------

    def get_urls(self) -> list[URLPattern]:
        info = self.opts.app_label, self.opts.model_name

        def wrap(view: Callable[..., HttpResponseBase]) -> Callable[..., HttpResponseBase]:
            return self.admin_site.admin_view(view)  # staff only, CSRF-protected, never cached

        urls = [
            path(
                f"<path:object_id>/{action.name}/",
                wrap(functools.partial(self.job_action_view, action=action)),
                name="{}_{}_{}".format(*info, action.name.replace("-", "_")),
            )
            for action in PAGE_ACTIONS
        ]
        urls.append(
            path(
                "<path:object_id>/summary/",
                wrap(self.summary_view),
                name="{}_{}_summary".format(*info),
            )
        )
        return urls + super().get_urls()

    # -- acting ---------------------------------------------------------------------

    def job_action_view(
        self, request: HttpRequest, object_id: str, *, action: JobAction
    ) -> HttpResponse:
        """POST: run one action on one job, then go back to its page."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not action.allowed(self, request):
            raise PermissionDenied
        obj = self.get_object(request, unquote(object_id))
        if obj is None:
            self.message_user(
                request,
                gettext("Job #%(id)s does not exist (deleted meanwhile?).") % {"id": object_id},
                messages.WARNING,
            )
            return HttpResponseRedirect(self._url("changelist"))
        jobs = Job.objects.using(queue_alias()).filter(pk=obj.pk)
        act(self, request, action, jobs, requested=1)
        return HttpResponseRedirect(self._job_url(obj.pk))

    # The single-job delete page is Django's; the write is DELETE's (lifecycle.delete), so a
    # job that a worker started meanwhile is skipped.

    def delete_view(
        self, request: HttpRequest, object_id: str, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        obj = self.get_object(request, unquote(object_id))
        # Permission first, as Django's own delete view: a user who may not delete jobs
        # learns nothing about this one (not even whether it is running).
        if not self.has_delete_permission(request, obj):
            raise PermissionDenied
        if obj is not None and obj.status == JobStatus.PROCESSING:
            self.message_user(
                request,
                gettext("Job #%(id)s is running: %(rule)s.") % {"id": obj.pk, "rule": DELETE.rule},
                messages.ERROR,
            )
            return HttpResponseRedirect(self._job_url(obj.pk))
        return super().delete_view(request, object_id, extra_context)

    def delete_model(self, request: HttpRequest, obj: Job) -> None:
        outcome = DELETE.run([obj.pk], alias=queue_alias())
        request._sqlq_not_deleted = bool(outcome.skipped)  # type: ignore[attr-defined]

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        act(self, request, DELETE, queryset)

    def response_delete(self, request: HttpRequest, obj_display: str, obj_id: Any) -> HttpResponse:
        if getattr(request, "_sqlq_not_deleted", False):
            self.message_user(
                request,
                gettext("Job #%(id)s was not deleted: a worker started it meanwhile.")
                % {"id": obj_id},
                messages.WARNING,
            )
            return HttpResponseRedirect(self._job_url(obj_id))
        return super().response_delete(request, obj_display, obj_id)


class AllJobsAdmin(QueueDashboardViews, JobAdmin):
    """Every job, and the queue's dashboard."""


class FailedJobAdmin(JobAdmin):
    """Failed jobs only, the error first, the retry action at hand."""

    list_display = (  # type: ignore[assignment]
        "id", "error_line", "type_display", "queue", "attempts_display", "failed_at",
    )  # fmt: skip
    list_display_links = ("id", "error_line")
    list_filter = (QueueFilter, TypeFilter)  # type: ignore[assignment]
    actions = (retry_jobs, delete_jobs)  # type: ignore[assignment]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Job]:
        return super().get_queryset(request).filter(status=JobStatus.FAILED)

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        return super().changelist_view(request, {"sqlq_here": "failed", **(extra_context or {})})

    @admin.display(description=_("failed at"))
    def failed_at(self, obj: Job) -> str:
        return local_datetime(obj.completed_at)
