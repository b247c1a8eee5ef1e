"""The schedules' page: each recurring job (``SQLQ["SCHEDULE"]``, ``@handler(cron=...)``,
``@recurring``, and the rows of ``DatabaseSchedule``) with its cron, time zone, last and next
run and the status of its last job, and a "run now" button; and ``DatabaseScheduleAdmin``,
where the stored ones are added, edited, disabled and deleted.

The page lists the *declared* schedules (the settings and the decorators of this process;
read-only) and every stored one (enabled or not, linked to its change page), read with the
tick table (``ScheduleTick``): one query for the stored rows, one for the newest tick of
each schedule, one for their jobs. Whoever may view jobs may see it; "run now" enqueues one
job of the schedule at once (not counted as a tick: the next tick still runs) and needs the
permission the job list's run-now action needs (change on jobs). It is a POST with Django's
CSRF check.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db import DatabaseError, models
from django.forms.fields import InvalidJSONInput
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.utils.translation import gettext, gettext_lazy

from django_sqlq import registry, schedules
from django_sqlq.admin.display import admin_links, queue_alias
from django_sqlq.exceptions import ConfigurationError, PayloadError, SQLQError
from django_sqlq.jsoncodec import encode_json, parse_json, too_deep
from django_sqlq.models import DatabaseSchedule, Job, ScheduleTick

if TYPE_CHECKING:
    TickModelAdmin = admin.ModelAdmin[ScheduleTick]
    StoredModelAdmin = admin.ModelAdmin[DatabaseSchedule]
else:
    TickModelAdmin = StoredModelAdmin = admin.ModelAdmin


@dataclass(frozen=True)
class ScheduleRow:
    schedule: schedules.Schedule
    last_tick: datetime | None
    next_tick: datetime | None
    job: Job | None  # the last tick's job; None when it had none or it was pruned
    job_id: int | None
    job_url: str | None
    enabled: bool = True
    error: str = ""  # a stored schedule that cannot run: why
    edit_url: str | None = None  # a stored schedule's change page (None: code, read-only)

    @property
    def next_local(self) -> str:
        """The next run in the schedule's own time zone (the page shows the site's too)."""
        if self.next_tick is None:
            return ""
        return self.next_tick.astimezone(self.schedule.tz).strftime("%Y-%m-%d %H:%M %Z")


@dataclass(frozen=True)
class StoredRow:
    """A ``DatabaseSchedule`` row as the page shows it."""

    schedule: schedules.Schedule  # as written (not validated when ``error``)
    enabled: bool
    error: str
    pk: int


def stored_rows(declared: dict[str, schedules.Schedule], alias: str) -> dict[str, StoredRow]:
    """Every stored schedule, enabled or not, by name (one query)."""
    found = {}
    for row in DatabaseSchedule.objects.using(alias).order_by("name"):
        error = ""
        if row.name in declared:
            error = gettext("Not run: its name is taken by a schedule declared in code.")
        try:
            schedule = schedules.from_row(row)
        except ConfigurationError as exc:
            error = str(exc)
            schedule = schedules.Schedule(
                name=row.name, cron=row.cron, timezone=row.timezone, type=row.type or None,
                task=row.task or None, missed=row.missed, source=schedules.STORED,
            )  # fmt: skip
        found[row.name] = StoredRow(schedule, row.enabled, error, row.pk)
    return found


def rows(site_name: str, now: datetime, *, can_edit: bool = False) -> list[ScheduleRow]:
    """Every declared schedule, then every stored one, with its last tick's job (three
    queries). ``can_edit``: link the stored ones to their change page."""
    registry.autodiscover()  # the apps' jobs.py: their @handler(cron=...) schedules
    declared = schedules.load()
    alias = queue_alias()
    stored = stored_rows(declared, alias)
    every: list[tuple[schedules.Schedule, StoredRow | None]] = [
        *((schedule, None) for schedule in declared.values()),
        *((row.schedule, row) for row in stored.values()),
    ]
    latest: dict[str, ScheduleTick] = {}
    ticks = ScheduleTick.objects.using(alias).filter(name__in=[*declared, *stored])
    # At most KEEP_TICKS rows per schedule (the scheduler trims the rest).
    for tick in ticks.order_by("-tick_at"):
        latest.setdefault(tick.name, tick)
    ids = [tick.job_id for tick in latest.values() if tick.job_id is not None]
    jobs = Job.objects.using(alias).only("id", "status", "type").in_bulk(ids)
    found = []
    for schedule, row in every:
        # A stored row whose name a code schedule took has no ticks of its own.
        clash = row is not None and schedule.name in declared
        tick = None if clash else latest.get(schedule.name)
        job_id = tick.job_id if tick is not None else None
        job = jobs.get(job_id) if job_id is not None else None
        url = (
            reverse(f"{site_name}:django_sqlq_job_change", args=[job_id], current_app=site_name)
            if job is not None
            else None
        )
        runs = row is None or (row.enabled and not row.error)
        found.append(
            ScheduleRow(
                schedule=schedule,
                last_tick=schedules.from_db(tick.tick_at) if tick is not None else None,
                next_tick=schedule.next_tick(now) if runs else None,
                job=job,
                job_id=job_id,
                job_url=url,
                enabled=row is None or row.enabled,
                error=row.error if row is not None else "",
                edit_url=reverse(
                    f"{site_name}:django_sqlq_databaseschedule_change",
                    args=[row.pk],
                    current_app=site_name,
                )
                if row is not None and can_edit
                else None,
            )
        )
    return found


class ScheduleAdmin(TickModelAdmin):
    """The schedules' page, in place of a change list of the tick table."""

    class Media:
        css = {"all": ["django_sqlq/admin.css"]}

    def _has_job_perm(self, request: HttpRequest, *codenames: str) -> bool:
        return any(request.user.has_perm(f"django_sqlq.{c}_job") for c in codenames)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:  # noqa: ARG002 (Django's signature)
        return self._has_job_perm(request, "view", "change")

    def has_module_permission(self, request: HttpRequest) -> bool:
        return self.has_view_permission(request)

    def has_add_permission(self, request: HttpRequest) -> bool:  # noqa: ARG002 (Django's signature)
        return False  # schedules are declared in code and settings

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:  # noqa: ARG002 (Django's signature)
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:  # noqa: ARG002 (Django's signature)
        return False

    def has_run_now_permission(self, request: HttpRequest) -> bool:
        """As the job list's "run now": change on jobs."""
        return self._has_job_perm(request, "change")

    def get_urls(self) -> list[URLPattern]:
        info = self.opts.app_label, self.opts.model_name
        return [
            path(
                "run-now/",
                self.admin_site.admin_view(self.run_now_view),
                name="{}_{}_run_now".format(*info),
            ),
            *super().get_urls(),
        ]

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        request.current_app = self.admin_site.name
        error = None
        stored_admin = self.admin_site._registry.get(DatabaseSchedule)
        can_edit = stored_admin is not None and stored_admin.has_view_or_change_permission(request)
        try:
            found = rows(self.admin_site.name, datetime.now(UTC), can_edit=can_edit)
        except ConfigurationError as exc:
            found, error = [], str(exc)
        context = {
            **self.admin_site.each_context(request),
            **admin_links(self.admin_site.name),
            "title": gettext("Schedules"),
            "opts": self.opts,
            "app_label": self.opts.app_label,
            "media": self.media,
            "rows": found,
            "error": error,
            "can_run_now": self.has_run_now_permission(request),
            "add_url": reverse(
                f"{self.admin_site.name}:django_sqlq_databaseschedule_add",
                current_app=self.admin_site.name,
            )
            if stored_admin is not None and stored_admin.has_add_permission(request)
            else None,
            "run_now_url": reverse(
                f"{self.admin_site.name}:django_sqlq_scheduletick_run_now",
                current_app=self.admin_site.name,
            ),
            **(extra_context or {}),
        }
        return TemplateResponse(request, "admin/django_sqlq/schedules.html", context)

    def run_now_view(self, request: HttpRequest) -> HttpResponse:
        """POST ``name``: enqueue one job of that schedule now."""
        if request.method != "POST":
            return HttpResponse(status=405, headers={"Allow": "POST"})
        if not self.has_run_now_permission(request):
            raise PermissionDenied
        back = reverse(
            f"{self.admin_site.name}:django_sqlq_scheduletick_changelist",
            current_app=self.admin_site.name,
        )
        name = request.POST.get("name", "")
        try:
            schedule = schedules.load().get(name)
            if schedule is None:
                row = DatabaseSchedule.objects.using(queue_alias()).filter(name=name).first()
                schedule = schedules.from_row(row) if row is not None else None
        except ConfigurationError as exc:
            self.message_user(request, str(exc), messages.ERROR)
            return HttpResponseRedirect(back)
        if schedule is None:
            self.message_user(
                request, gettext("No schedule is named %(name)r.") % {"name": name}, messages.ERROR
            )
            return HttpResponseRedirect(back)
        try:
            job_id = schedules.enqueue_job(schedule, run_at=None, database=queue_alias())
        except (SQLQError, ValueError, TypeError, DatabaseError) as exc:
            self.message_user(
                request,
                gettext("Could not enqueue %(name)s: %(error)s") % {"name": name, "error": exc},
                messages.ERROR,
            )
            return HttpResponseRedirect(back)
        job_url = reverse(
            f"{self.admin_site.name}:django_sqlq_job_change",
            args=[job_id],
            current_app=self.admin_site.name,
        )
        link = format_html('<a href="{}" class="sqlq-run-now-job">job {}</a>', job_url, job_id)
        self.message_user(
            request,
            format_html(gettext("Enqueued {job} for {name}, to run now."), job=link, name=name),
            messages.SUCCESS,
        )
        return HttpResponseRedirect(back)


class StorableJSONField(forms.JSONField):
    """The form field of a schedule's payload, args and kwargs: what enqueue() refuses
    (``jsoncodec``: JSON nested too deeply for Python, a lone surrogate or NUL) is an error
    on the field, and the form shown again holds the text as it was typed, not a value that
    cannot be written out."""

    def to_python(self, value: Any) -> Any:
        try:
            converted = super().to_python(value)
        except RecursionError as exc:
            raise forms.ValidationError(str(too_deep("value")), code="invalid") from exc
        if isinstance(value, str) and not self.disabled:
            try:
                encode_json(converted, what="value")
            except PayloadError as exc:
                raise forms.ValidationError(str(exc), code="invalid") from exc
        return converted

    def bound_data(self, data: Any, initial: Any) -> Any:
        if self.disabled or data is None:
            return super().bound_data(data, initial)
        try:
            encode_json(parse_json(data))
        except PayloadError:
            return InvalidJSONInput(data)
        return super().bound_data(data, initial)


class DatabaseScheduleAdmin(StoredModelAdmin):
    """The schedules stored in the database: add, edit, disable (``enabled``), delete.
    Validated by the model's ``clean()`` (``schedules.stored_errors``); running workers pick
    a change up within ``STORED_POLL_SECONDS``. Deleting one keeps its past ticks' jobs.
    Django's model permissions on ``DatabaseSchedule`` decide who may do what."""

    list_display = ("name", "enabled", "target", "cron", "timezone", "queue", "updated_at")
    list_display_links = ("name",)
    list_editable = ("enabled",)
    list_filter = ("enabled",)
    search_fields = ("name", "type", "task")
    readonly_fields = ("created_at", "updated_at")
    formfield_overrides = {models.JSONField: {"form_class": StorableJSONField}}
    fieldsets = (
        (None, {"fields": ("name", "enabled", "cron", "timezone", "missed")}),
        (gettext_lazy("What it runs"), {"fields": ("type", "payload", "task", "args", "kwargs")}),
        (gettext_lazy("How"), {"fields": ("queue", "priority")}),
        (None, {"fields": ("created_at", "updated_at")}),
    )

    @admin.display(description=gettext_lazy("runs"))
    def target(self, obj: DatabaseSchedule) -> str:
        return obj.type or obj.task

    def get_queryset(self, request: HttpRequest) -> Any:
        return super().get_queryset(request).using(queue_alias())

    def save_model(
        self,
        request: HttpRequest,  # noqa: ARG002 (Django's signature)
        obj: DatabaseSchedule,
        form: Any,  # noqa: ARG002
        change: bool,  # noqa: ARG002
    ) -> None:
        obj.save(using=queue_alias())

    def delete_model(self, request: HttpRequest, obj: DatabaseSchedule) -> None:  # noqa: ARG002 (Django's signature)
        obj.delete(using=queue_alias())

    def delete_queryset(self, request: HttpRequest, queryset: Any) -> None:  # noqa: ARG002 (Django's signature)
        queryset.using(queue_alias()).delete()
