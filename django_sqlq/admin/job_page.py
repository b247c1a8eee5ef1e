"""One job's page: read-only, every field of the job (payload, result, the error of every
attempt, the worker that holds it, its chain and what it depends on, the jobs that wait for
it), with a live box at the top (status, attempts, what the job waits for, and the buttons
of the actions that apply) that refreshes itself while the job is not finished."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.contrib.admin.utils import quote, unquote
from django.core.exceptions import PermissionDenied
from django.db.models import Q
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import NoReverseMatch, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from django_sqlq import dashboard, tracing
from django_sqlq.admin import chains, job_steps
from django_sqlq.admin.actions import PAGE_ACTIONS, RUN_NOW
from django_sqlq.admin.display import (
    admin_links,
    local_datetime,
    pretty_json,
    progress_bar,
    queue_alias,
    status_badge,
)
from django_sqlq.admin.job_notes import status_note
from django_sqlq.models import Job, JobStatus, StepKind, WorkerProcess

if TYPE_CHECKING:
    JobModelAdmin = admin.ModelAdmin[Job]
else:
    JobModelAdmin = admin.ModelAdmin

# Seconds between refreshes of the job page's live box.
JOB_PAGE_SECONDS = 2


class JobPageAdmin(JobModelAdmin):
    """The job page, and the URLs of this admin's pages. The lists (``JobAdmin``) build on it."""

    change_form_template = "admin/django_sqlq/job/change_form.html"
    readonly_fields = (
        "id", "uuid", "type", "queue", "status_display", "priority", "attempts_display",
        "timeout", "unique_key", "progress_page_display", "trace_display", "payload_display",
        "result_display",
        "last_error_display", "errors_display",
        "scheduled_at", "created_at", "updated_at", "started_at", "completed_at",
        "failed_at_display", "cancelled_at_display",
        "worker_display", "locked_at", "lease_expires_at",
        "chain_display", "depends_on_display", "blockers_left", "dependency_policy",
        "waiters_display",
    )  # fmt: skip

    # -- shown on the page and in the lists -----------------------------------------

    @admin.display(description=_("status"), ordering=None)
    def status_display(self, obj: Job) -> SafeString:
        return status_badge(obj.status)

    @admin.display(description=_("attempts"))
    def attempts_display(self, obj: Job) -> str:
        return f"{obj.attempts}/{obj.max_attempts}"

    @admin.display(description=_("progress"))
    def progress_display(self, obj: Job) -> SafeString:
        """On the lists, only for running jobs; on the job page, the last report kept."""
        return progress_bar(obj) if obj.status == JobStatus.PROCESSING else SafeString("")

    # -- the job page ---------------------------------------------------------------

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> list[tuple[Any, Any]]:  # noqa: ARG002 (Django's signature)
        job = (None, {"fields": (
            "id", "uuid", "type", "queue", "status_display", "priority", "attempts_display",
            "timeout", "unique_key",
            *(("progress_page_display",) if obj is not None and obj.progress is not None else ()),
            *(("trace_display",) if obj is not None and obj.trace else ()),
        )})  # fmt: skip
        data = (_("Payload and result"), {"fields": ("payload_display", "result_display")})
        error = (_("Error"), {"fields": ("last_error_display", "errors_display")})
        # completed_at is when the job reached its final status: named for that status.
        finished_fields: dict[str, str] = {
            JobStatus.FAILED: "failed_at_display",
            JobStatus.CANCELLED: "cancelled_at_display",
        }
        finished = finished_fields.get(obj.status if obj is not None else "", "completed_at")
        timing = (_("Timing"), {"fields": (
            "scheduled_at", "created_at", "updated_at", "started_at", finished,
        )})  # fmt: skip
        worker = (_("Worker"), {"fields": ("worker_display", "locked_at", "lease_expires_at")})
        workflow = self._workflow_fieldset(obj)
        if obj is not None and (obj.last_error or obj.errors):
            if obj.status == JobStatus.FAILED:
                return [job, error, *workflow, data, timing, worker]
            return [job, *workflow, data, error, timing, worker]
        return [job, *workflow, data, timing, worker]

    # -- workflows: its chain, what it waits for, what waits for it ---------------------

    def _waiters(self, obj: Job) -> tuple[list[chains.Waiter], bool]:
        """The blocked jobs that wait for this job or its chain (read once per page)."""
        cached: tuple[list[chains.Waiter], bool] | None = getattr(obj, "_sqlq_waiters", None)
        if cached is None:
            root = obj.chain_id if obj.chain_id is not None else obj.pk
            condition = Q(blocker_id=obj.pk, chain=False) | Q(blocker_id=root, chain=True)
            cached = chains.waiters(self.admin_site.name, condition)
            obj._sqlq_waiters = cached  # type: ignore[attr-defined]
        return cached

    def _workflow_fieldset(self, obj: Job | None) -> list[tuple[Any, Any]]:
        """The "Workflow" section, for a job in a chain, with dependencies or with waiters."""
        if obj is None:
            return []
        fields: list[str] = []
        if obj.chain_id is not None:
            fields.append("chain_display")
        if obj.depends_on:
            fields.append("depends_on_display")
            if obj.status == JobStatus.BLOCKED:
                fields.append("blockers_left")
            fields.append("dependency_policy")
        if self._waiters(obj)[0]:
            fields.append("waiters_display")
        return [(_("Workflow"), {"fields": fields})] if fields else []

    @admin.display(description=_("chain"))
    def chain_display(self, obj: Job) -> SafeString:
        if obj.chain_id is None:
            return format_html('<span class="sqlq-quiet">{}</span>', gettext("none"))
        label = gettext("chain #%(chain)s, step %(index)s") % {
            "chain": obj.chain_id,
            "index": obj.chain_index if obj.chain_index is not None else 0,
        }
        url = chains.chain_url(self.admin_site.name, obj.chain_id)
        if url is None:
            return format_html("{}", label)
        return format_html('<a href="{}" id="sqlq-chain-link">{}</a>', url, label)

    @admin.display(description=_("depends on"))
    def depends_on_display(self, obj: Job) -> SafeString:
        return chains.depends_on_html(self.admin_site.name, obj)

    @admin.display(description=_("waiting for it"))
    def waiters_display(self, obj: Job) -> SafeString:
        return chains.waiters_list(*self._waiters(obj))

    @admin.display(description=_("progress"))
    def progress_page_display(self, obj: Job) -> SafeString:
        when = local_datetime(obj.progress_at)
        return format_html('{} <span class="sqlq-quiet">({})</span>', progress_bar(obj), when)

    @admin.display(description=_("trace id"))
    def trace_display(self, obj: Job) -> str:
        """The OpenTelemetry trace of the code that enqueued the job, to look it up."""
        return tracing.trace_id(obj.trace) or "-"

    @admin.display(description=_("failed at"))
    def failed_at_display(self, obj: Job) -> str:
        return local_datetime(obj.completed_at)

    @admin.display(description=_("cancelled at"))
    def cancelled_at_display(self, obj: Job) -> str:
        return local_datetime(obj.completed_at)

    @admin.display(description=_("payload"))
    def payload_display(self, obj: Job) -> SafeString:
        return pretty_json(obj.payload)

    @admin.display(description=_("result"))
    def result_display(self, obj: Job) -> SafeString:
        return pretty_json(obj.result)

    @admin.display(description=_("last error"))
    def last_error_display(self, obj: Job) -> SafeString:
        if not obj.last_error:
            return format_html('<span class="sqlq-quiet">{}</span>', gettext("none"))
        return format_html('<pre class="sqlq-traceback">{}</pre>', obj.last_error)

    @admin.display(description=_("errors per attempt"))
    def errors_display(self, obj: Job) -> SafeString:
        entries = obj.errors
        if not entries:
            return format_html('<span class="sqlq-quiet">{}</span>', gettext("none"))
        if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
            return pretty_json(entries)
        items = format_html_join(
            "\n",
            '<li><details><summary>{}</summary><pre class="sqlq-traceback">{}</pre>'
            "</details></li>",
            (
                (
                    gettext("Attempt %(attempt)s on %(worker)s: %(exc)s: %(message)s")
                    % {
                        "attempt": entry.get("attempt", "?"),
                        "worker": entry.get("worker_id") or "?",
                        "exc": entry.get("exception_class", "?"),
                        "message": str(entry.get("message", ""))[:300],
                    },
                    entry.get("traceback", ""),
                )
                for entry in reversed(entries)
            ),
        )
        return format_html('<ul class="sqlq-errors">{}</ul>', items)

    @admin.display(description=_("worker"))
    def worker_display(self, obj: Job) -> SafeString:
        if not obj.locked_by:
            return format_html('<span class="sqlq-quiet">{}</span>', gettext("none yet"))
        process = (
            WorkerProcess.objects.using(queue_alias()).filter(worker_id=obj.locked_by).first()
        )
        holds = obj.status == JobStatus.PROCESSING
        prefix = gettext("held by") if holds else gettext("last held by")
        if process is None:
            return format_html("{} <code>{}</code>", prefix, obj.locked_by)
        if process.stopped_at is not None:
            state = gettext("stopped %s ago") % dashboard.format_age(
                (timezone.now() - process.stopped_at).total_seconds()
            )
        else:
            state = gettext("last heartbeat %s ago") % dashboard.format_age(
                (timezone.now() - process.last_seen_at).total_seconds()
            )
        return format_html(
            "{} <code>{}</code> ({} {}, pid {}; {})",
            prefix,
            obj.locked_by,
            gettext("host"),
            process.hostname,
            process.pid,
            state,
        )

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        obj = self.get_object(request, unquote(object_id))
        context = dict(extra_context or {})
        if obj is not None and self.has_view_permission(request, obj):
            # The job's durable steps: one query, for the live box and the steps section.
            steps, more = job_steps.read_steps(queue_alias(), obj.pk)
            asleep = job_steps.asleep_in(obj, steps)
            context.update(self._summary_context(request, obj, asleep=asleep))
            context.update(
                job_steps.steps_context(self, request, obj, steps, more=more, asleep=asleep)
            )
            context["title"] = gettext("Job #%(id)s: %(type)s") % {"id": obj.pk, "type": obj.type}
            context["subtitle"] = None
            context["show_delete"] = obj.status != JobStatus.PROCESSING
        return super().change_view(request, object_id, form_url, context)

    def _summary_context(
        self, request: HttpRequest, job: Job, *, asleep: Any = job_steps.UNREAD
    ) -> dict[str, Any]:
        """The live box. ``asleep``: the durable step the job sleeps or waits in (None:
        none), if the caller read the job's steps; else read here, for a scheduled job."""
        now = timezone.now()
        if asleep is job_steps.UNREAD:
            asleep = job_steps.read_asleep(queue_alias(), job)
        # Asleep in a durable sleep or wait: Wake now (a sleep) or the steps section's Emit
        # event (a wait) say what the operator can do, rather than Run now.
        actions = [a for a in PAGE_ACTIONS if asleep is None or a is not RUN_NOW]
        if asleep is not None and asleep.kind == StepKind.SLEEP:
            actions.append(job_steps.WAKE)
        buttons = [
            {
                "label": action.label,
                "css": action.css,
                "url": self._url(f"{action.name.replace('-', '_')}", job.pk),
            }
            for action in actions
            if action.applies(job.status, job.scheduled_at, now) and action.allowed(self, request)
        ]
        delete_url = None
        if job.status != JobStatus.PROCESSING and self.has_delete_permission(request, job):
            delete_url = self._url("delete", job.pk)
        return {
            "sqlq_job": job,
            "sqlq_status": status_badge(job.status),
            "sqlq_buttons": buttons,
            "sqlq_delete_url": delete_url,
            "sqlq_note": job_steps.asleep_note(asleep, now)
            if asleep is not None
            else status_note(job, now),
            "sqlq_live": not job.is_finished,
            "sqlq_summary_url": self._url("summary", job.pk),
            "sqlq_interval": JOB_PAGE_SECONDS,
            "sqlq_progress": progress_bar(job) if job.status == JobStatus.PROCESSING else "",
            "sqlq_started": local_datetime(job.started_at),
            "sqlq_completed": local_datetime(job.completed_at),
            "sqlq_chain_url": chains.chain_url(self.admin_site.name, job.chain_id)
            if job.chain_id is not None
            else None,
            **self._links(),
        }

    def summary_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """The job page's live box (status, attempts, buttons), for the page to refresh."""
        obj = self.get_object(request, unquote(object_id))
        if obj is None or not self.has_view_permission(request, obj):
            raise PermissionDenied
        request.current_app = self.admin_site.name
        return TemplateResponse(
            request,
            "admin/django_sqlq/job/summary.html",
            self._summary_context(request, obj),
        )

    # -- URLs -----------------------------------------------------------------------

    def _url(self, name: str, *args: Any, model: str | None = None) -> str:
        return reverse(
            f"{self.admin_site.name}:django_sqlq_{model or self.opts.model_name}_{name}",
            args=[quote(a) for a in args],
            current_app=self.admin_site.name,
        )

    def _job_url(self, pk: Any) -> str:
        try:
            return self._url("change", pk, model="job")
        except NoReverseMatch:
            return self._url("change", pk)

    def _links(self) -> dict[str, Any]:
        return admin_links(self.admin_site.name)
