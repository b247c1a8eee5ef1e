"""The queue dashboard's pages: the queue at a glance (per-queue counts, alerts, workers,
throughput, retention), and the parts of it that refresh themselves. The numbers come from
:mod:`django_sqlq.dashboard`; these views put them in the templates.

The pages are served under the all-jobs admin's URLs (``job/dashboard/``...; the all-jobs
admin mixes in :class:`QueueDashboardViews`). :class:`QueueDashboardAdmin` only gives the
dashboard its entry in the admin index.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db import DatabaseError
from django.http import (
    HttpRequest,
    HttpResponse,
    HttpResponseBadRequest,
    HttpResponseNotAllowed,
    HttpResponseRedirect,
)
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import formats, timezone
from django.utils.translation import gettext

from django_sqlq.admin.display import admin_links, progress_bar, queue_alias
from django_sqlq.dashboard.charts import chart
from django_sqlq.dashboard.queries import retention, running_jobs, snapshot, throughput
from django_sqlq.exceptions import InvalidJobError
from django_sqlq.models import Job
from django_sqlq.queues import configured_queues, pause_queue, paused_names, resume_queue

if TYPE_CHECKING:
    JobModelAdmin = admin.ModelAdmin[Job]
else:
    JobModelAdmin = admin.ModelAdmin

# Seconds between refreshes of the live parts of the dashboard.
LIVE_SECONDS = 5
CHARTS_SECONDS = 30


def can_pause(request: HttpRequest) -> bool:
    """Whether the user may pause and resume queues: the change permission on queues."""
    return bool(request.user.has_perm("django_sqlq.change_queue"))


class QueueDashboardViews(JobModelAdmin):
    """The dashboard's views and URLs, for the admin of all jobs to mix in. Whoever may view
    jobs may see it."""

    def get_urls(self) -> list[URLPattern]:
        info = self.opts.app_label, self.opts.model_name
        views = (
            ("dashboard/", self.dashboard_view, "dashboard"),
            ("dashboard/live/", self.dashboard_live_view, "dashboard_live"),
            ("dashboard/charts/", self.dashboard_charts_view, "dashboard_charts"),
            ("dashboard/alerts/", self.dashboard_alerts_view, "dashboard_alerts"),
            ("dashboard/queue-state/", self.queue_state_view, "queue_state"),
        )
        urls = [
            path(route, self.admin_site.admin_view(view), name="{}_{}_{}".format(*info, name))
            for route, view, name in views
        ]
        return urls + super().get_urls()

    def _dashboard_url(self, name: str) -> str:
        site = self.admin_site.name
        return reverse(f"{site}:django_sqlq_{self.opts.model_name}_{name}", current_app=site)

    def _check_dashboard(self, request: HttpRequest) -> None:
        if not self.has_view_permission(request):
            raise PermissionDenied
        request.current_app = self.admin_site.name

    def _live_context(self, request: HttpRequest) -> dict[str, Any]:
        alias = queue_alias()
        try:
            paused = paused_names(database=alias)
        except DatabaseError:
            paused = set()  # sqlq_queue not migrated yet: nothing can be paused
        # A paused queue is listed even when it holds no job, with its Resume button.
        # A limited queue is listed with its limit, jobs or not.
        configured = configured_queues(limited=True, also=sorted(paused))
        snap = snapshot(alias, configured=configured)
        running = [(job, progress_bar(job)) for job in running_jobs(alias)]
        return {
            "snap": snap,
            "running": running,
            "totals": snap.totals,
            "updated": formats.time_format(timezone.localtime(snap.now), "H:i:s"),
            "sqlq_paused": paused,
            "sqlq_can_pause": can_pause(request),
            "sqlq_queue_state_url": self._dashboard_url("queue_state"),
            **admin_links(self.admin_site.name),
        }

    def queue_state_view(self, request: HttpRequest) -> HttpResponse:
        """POST ``queue`` and ``action`` (pause or resume): the dashboard's buttons. Needs
        the change permission on queues (``django_sqlq.change_queue``)."""
        self._check_dashboard(request)
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not can_pause(request):
            raise PermissionDenied
        name, action = request.POST.get("queue", ""), request.POST.get("action", "")
        if action not in ("pause", "resume"):
            return HttpResponseBadRequest("action must be pause or resume")
        change = pause_queue if action == "pause" else resume_queue
        try:
            changed = change(name, database=queue_alias())
        except InvalidJobError as exc:
            self.message_user(request, str(exc), messages.ERROR)
        else:
            if action == "pause":
                text = (
                    gettext(
                        "Queue %(q)s paused: workers claim none of its jobs until it is "
                        "resumed; running jobs finish."
                    )
                    if changed
                    else gettext("Queue %(q)s was already paused.")
                )
            else:
                text = (
                    gettext("Queue %(q)s resumed.")
                    if changed
                    else gettext("Queue %(q)s was not paused.")
                )
            self.message_user(request, text % {"q": name}, messages.SUCCESS)
        return HttpResponseRedirect(self._dashboard_url("dashboard"))

    def _charts_context(self) -> dict[str, Any]:
        flow = throughput(queue_alias(), cache=True)
        return {
            "flow": flow,
            "minute_chart": chart(
                flow.minutes, label_every=10, label_format="H:i", unit=gettext("minute")
            ),
            "hour_chart": chart(
                flow.hours, label_every=4, label_format="H:i", unit=gettext("hour")
            ),
        }

    def dashboard_view(self, request: HttpRequest) -> HttpResponse:
        """The queue at a glance: per-queue counts, alerts, workers and throughput."""
        self._check_dashboard(request)
        context = {
            **self.admin_site.each_context(request),
            "title": gettext("Queue dashboard"),
            "opts": self.opts,
            "app_label": self.opts.app_label,
            "media": self.media,
            "live_seconds": LIVE_SECONDS,
            "charts_seconds": CHARTS_SECONDS,
            "sqlq_live_url": self._dashboard_url("dashboard_live"),
            "sqlq_charts_url": self._dashboard_url("dashboard_charts"),
            **self._live_context(request),
            **self._charts_context(),
            "retention": retention(queue_alias()),
        }
        return TemplateResponse(request, "admin/django_sqlq/dashboard.html", context)

    def dashboard_live_view(self, request: HttpRequest) -> HttpResponse:
        self._check_dashboard(request)
        return TemplateResponse(
            request, "admin/django_sqlq/dashboard_live.html", self._live_context(request)
        )

    def dashboard_charts_view(self, request: HttpRequest) -> HttpResponse:
        self._check_dashboard(request)
        return TemplateResponse(
            request, "admin/django_sqlq/dashboard_charts.html", self._charts_context()
        )

    def dashboard_alerts_view(self, request: HttpRequest) -> HttpResponse:
        """Just the alerts, for the top of the lists and the app's index page."""
        self._check_dashboard(request)
        context = {
            **self._live_context(request),
            "compact": bool(request.GET.get("compact")),
            # The list the alerts are shown on: no alert links to the page it is on.
            "here": request.GET.get("here", ""),
        }
        return TemplateResponse(request, "admin/django_sqlq/dashboard_alerts.html", context)


class QueueDashboardAdmin(JobModelAdmin):
    """Lists "Queue dashboard" in the admin index for whoever may see the dashboard (the view
    or change permission on jobs); following it opens the dashboard."""

    def get_urls(self) -> list[URLPattern]:
        name = f"{self.opts.app_label}_{self.opts.model_name}_changelist"
        return [path("", self.admin_site.admin_view(self.changelist_view), name=name)]

    def changelist_view(
        self,
        request: HttpRequest,
        extra_context: dict[str, Any] | None = None,  # noqa: ARG002 (Django's signature)
    ) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        site = self.admin_site.name
        return HttpResponseRedirect(reverse(f"{site}:django_sqlq_job_dashboard", current_app=site))

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:  # noqa: ARG002 (Django's signature)
        user = request.user
        return user.has_perm("django_sqlq.view_job") or user.has_perm("django_sqlq.change_job")

    def has_add_permission(self, request: HttpRequest) -> bool:  # noqa: ARG002 (Django's signature)
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:  # noqa: ARG002 (Django's signature)
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:  # noqa: ARG002 (Django's signature)
        return False
