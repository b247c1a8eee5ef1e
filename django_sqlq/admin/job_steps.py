"""A job's durable steps on its page (``context.step()``, ``sleep()``, ``wait_for_event()``):
what it recorded, what it sleeps until or waits for, and an operator's two actions on a job
asleep: wake a sleep now (:data:`WAKE`), and emit the event a wait waits for.

A job asleep is ``scheduled``, its ``scheduled_at`` when it wakes (or its wait times out),
and its last recorded step (``sqlq_job_step``) is in state sleeping or waiting: that row
says what it sleeps until or waits for."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.http import (
    HttpRequest,
    HttpResponse,
    HttpResponseNotAllowed,
    HttpResponseRedirect,
)
from django.template.response import TemplateResponse
from django.urls import URLPattern, path
from django.utils import timezone
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from django_sqlq import dashboard, lifecycle
from django_sqlq.admin.actions import JobAction, act
from django_sqlq.admin.display import local_datetime, queue_alias
from django_sqlq.conf import get_settings
from django_sqlq.exceptions import PayloadError, StepError
from django_sqlq.models import Job, JobStatus, JobStep, StepKind, StepState
from django_sqlq.steps import FOREVER

if TYPE_CHECKING:
    JobModelAdmin = admin.ModelAdmin[Job]
else:
    JobModelAdmin = admin.ModelAdmin

#: The job page lists this many of a job's steps, the newest (a loop of steps can record
#: thousands); and this much of each step's result, as JSON.
MAX_STEPS_SHOWN = 200
RESULT_CHARS = 200

ASLEEP_STATES = (StepState.SLEEPING, StepState.WAITING)

#: The job page's live box reads the step a job is asleep in unless told (UNREAD: not read).
UNREAD = object()


# -- reading ------------------------------------------------------------------------------


def read_steps(
    alias: str, job_id: int, limit: int = MAX_STEPS_SHOWN
) -> tuple[list[JobStep], bool]:
    """The job's newest ``limit`` steps in the order it recorded them, and whether it
    recorded more: one query."""
    rows = list(JobStep.objects.using(alias).filter(job_id=job_id).order_by("-id")[: limit + 1])
    more = len(rows) > limit
    return rows[:limit][::-1], more


def asleep_in(job: Job, steps: Sequence[JobStep]) -> JobStep | None:
    """The step ``job`` sleeps in or waits in, among its recorded ``steps``: its newest
    sleeping or waiting one, while the job is scheduled (else None)."""
    if job.status != JobStatus.SCHEDULED:
        return None
    return next((s for s in reversed(steps) if s.state in ASLEEP_STATES), None)


def read_asleep(alias: str, job: Job) -> JobStep | None:
    """:func:`asleep_in` with its own query (none for a job that is not scheduled)."""
    if job.status != JobStatus.SCHEDULED:
        return None
    return (
        JobStep.objects.using(alias)
        .filter(job_id=job.pk, state__in=ASLEEP_STATES)
        .order_by("-id")
        .first()
    )


def asleep_note(step: JobStep, now: datetime) -> str:
    """What the job asleep in ``step`` sleeps until or waits for, in a sentence or two."""
    wake_at = step.wake_at
    values = {
        "name": step.name,
        "key": step.wait_key or "",
        "when": local_datetime(wake_at),
        "wait": dashboard.format_age(abs((wake_at - now).total_seconds())) if wake_at else "-",
    }
    if step.kind == StepKind.SLEEP:
        if wake_at is not None and wake_at > now:
            return (
                gettext(
                    "Sleeps until %(when)s (in %(wait)s): durable sleep “%(name)s”. It runs "
                    "on from there when it wakes."
                )
                % values
            )
        return (
            gettext("Slept until %(when)s (durable sleep “%(name)s”): due, waiting for a worker.")
            % values
        )
    if wake_at is None or wake_at - now > FOREVER / 2:
        return (
            gettext(
                "Waits for event “%(key)s” (step “%(name)s”), with no timeout: "
                "django_sqlq.emit_event(“%(key)s”, payload) wakes it."
            )
            % values
        )
    if wake_at > now:
        return (
            gettext(
                "Waits for event “%(key)s” (step “%(name)s”) until %(when)s (in %(wait)s), then "
                "times out: django_sqlq.emit_event(“%(key)s”, payload) wakes it."
            )
            % values
        )
    return (
        gettext(
            "Waited for event “%(key)s” (step “%(name)s”) until %(when)s: timed out, waiting "
            "for a worker."
        )
        % values
    )


@dataclass(frozen=True)
class StepRow:
    """One recorded step as the job page lists it."""

    step: JobStep
    result: str  # its result as JSON, at most RESULT_CHARS characters
    created: str
    updated: str
    wake_at: str


def result_text(value: Any, limit: int = RESULT_CHARS) -> str:
    if value is None:
        return ""
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def step_rows(steps: Iterable[JobStep]) -> list[StepRow]:
    return [
        StepRow(
            step=s,
            result=result_text(s.result),
            created=local_datetime(s.created_at),
            updated=local_datetime(s.updated_at),
            wake_at=local_datetime(s.wake_at) if s.wake_at is not None else "",
        )
        for s in steps
    ]


# -- wake ---------------------------------------------------------------------------------


def wake_sleeping(ids: Iterable[int], *, alias: str | None = None) -> lifecycle.Outcome:
    """End the durable sleep of the jobs among ``ids`` asleep in one: the job pending,
    runnable now; its sleeping step's ``wake_at`` now (the step stays sleeping: the
    handler's replay finds the sleep over and goes on). A job that is no longer scheduled
    (a worker, an emit or another operator moved it), or waits for an event rather than
    sleeps, is skipped."""
    alias = alias or get_settings().DATABASE
    wanted = sorted(set(ids))
    asleep = (
        JobStep.objects.using(alias)
        .filter(job_id__in=wanted, kind=StepKind.SLEEP, state=StepState.SLEEPING)
        .values_list("job_id", flat=True)
    )
    # run_now(): pending while still scheduled, the sleep ended (lifecycle.end_sleeps), the
    # idle workers woken.
    changed = lifecycle.run_now(sorted(set(asleep)), alias=alias).changed
    return lifecycle.Outcome(changed=changed, skipped=len(wanted) - changed)


WAKE = JobAction(
    name="wake",
    permission="change",
    label=_("Wake now"),
    done=("Woke %(n)d job: its sleep is over, it is pending again, runnable now.",
          "Woke %(n)d jobs: their sleeps are over, they are pending again, runnable now."),
    rule=_("only a job asleep in a durable sleep can be woken"),
    statuses=(JobStatus.SCHEDULED,),
    function=wake_sleeping,
    css="sqlq-run-now",
)  # fmt: skip


# -- emit an event ------------------------------------------------------------------------


class EmitEventForm(forms.Form):
    """The payload of the event to emit, as JSON (empty: null)."""

    payload = forms.CharField(
        label=_("Payload (JSON)"),
        required=False,
        strip=True,
        widget=forms.Textarea(attrs={"rows": 3, "cols": 60, "spellcheck": "false"}),
        help_text=_('What wait_for_event() returns to the handler: e.g. {"paid": true}. '
                    "Empty: null."),
    )  # fmt: skip

    def clean_payload(self) -> Any:
        text = self.cleaned_data.get("payload") or ""
        if not text:
            return None
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise forms.ValidationError(
                gettext(
                    "Not valid JSON (line %(line)s, column %(column)s: %(msg)s). "
                    'Strings need double quotes: "yes", {"paid": true}.'
                )
                % {"line": exc.lineno, "column": exc.colno, "msg": exc.msg},
                code="invalid",
            ) from exc
        except RecursionError as exc:
            raise forms.ValidationError(
                gettext("Not a payload: nested too deeply."), code="invalid"
            ) from exc


def steps_context(
    model_admin: Any,
    request: HttpRequest,
    job: Job,
    steps: list[JobStep],
    *,
    more: bool,
    asleep: JobStep | None,
) -> dict[str, Any]:
    """The job page's steps section: the recorded steps, and the emit-event form for a job
    waiting for one (to whoever may change jobs)."""
    form = None
    if (
        asleep is not None
        and asleep.kind == StepKind.EVENT
        and asleep.wait_key
        and WAKE.allowed(model_admin, request)
    ):
        form = EmitEventForm()
    return {
        "sqlq_steps": step_rows(steps),
        "sqlq_steps_more": more,
        "sqlq_steps_max": MAX_STEPS_SHOWN,
        "sqlq_waits_for": asleep.wait_key if form is not None and asleep is not None else None,
        "sqlq_emit_form": form,
        "sqlq_emit_url": model_admin._url("emit_event", job.pk) if form is not None else None,
    }


# -- the views ----------------------------------------------------------------------------


class JobStepsViews(JobModelAdmin):
    """The job page's durable-steps actions (wake, emit an event): their URLs and views,
    and the steps section of the page, for the job admins to mix in. Both need the change
    permission on jobs, as Run now."""

    def get_urls(self) -> list[URLPattern]:
        info = self.opts.app_label, self.opts.model_name
        wrap = self.admin_site.admin_view  # staff only, CSRF-protected, never cached
        return [
            path(
                "<path:object_id>/wake/",
                wrap(self.wake_view),
                name="{}_{}_wake".format(*info),
            ),
            path(
                "<path:object_id>/emit-event/",
                wrap(self.emit_event_view),
                name="{}_{}_emit_event".format(*info),
            ),
            *super().get_urls(),
        ]

    def _steps_url(self, name: str, *args: Any) -> str:
        return self._url(name, *args)  # type: ignore[attr-defined,no-any-return]

    def _gone(self, request: HttpRequest, object_id: str) -> HttpResponse:
        self.message_user(
            request,
            gettext("Job #%(id)s does not exist (deleted meanwhile?).") % {"id": object_id},
            messages.WARNING,
        )
        return HttpResponseRedirect(self._steps_url("changelist"))

    def wake_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """POST: end the durable sleep of one job now, then go back to its page."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not WAKE.allowed(self, request):
            raise PermissionDenied
        obj = self.get_object(request, unquote(object_id))
        if obj is None:
            return self._gone(request, object_id)
        alias = queue_alias()
        asleep = read_asleep(alias, obj)
        if asleep is None or asleep.kind != StepKind.SLEEP:
            text = gettext(
                "Job #%(id)s is not asleep in a durable sleep (it is %(status)s): nothing was "
                "changed."
            ) % {"id": obj.pk, "status": obj.get_status_display().lower()}
            if asleep is not None and asleep.wait_key:
                text += " " + gettext(
                    "It waits for event “%(key)s”: emit it from the job's page."
                ) % {"key": asleep.wait_key}
            self.message_user(request, text, messages.WARNING)
        else:
            # WAKE's statement checks again: a job a worker or an emit moved meanwhile is
            # skipped, and the report says so.
            act(self, request, WAKE, Job.objects.using(alias).filter(pk=obj.pk), requested=1)
        return HttpResponseRedirect(self._steps_url("change", obj.pk))

    def emit_event_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """The event a waiting job waits for: GET, the form; POST, emit it
        (``django_sqlq.emit_event``) and go back to the job's page. Invalid JSON shows the
        form again with the error, and nothing is written."""
        if not WAKE.allowed(self, request):
            raise PermissionDenied
        obj = self.get_object(request, unquote(object_id))
        if obj is None:
            return self._gone(request, object_id)
        alias = queue_alias()
        asleep = read_asleep(alias, obj)
        job_url = self._steps_url("change", obj.pk)
        if asleep is None or asleep.kind != StepKind.EVENT or not asleep.wait_key:
            self.message_user(
                request,
                gettext("Job #%(id)s waits for no event now (it is %(status)s): nothing was "
                        "emitted.")
                % {"id": obj.pk, "status": obj.get_status_display().lower()},
                messages.WARNING,
            )  # fmt: skip
            return HttpResponseRedirect(job_url)
        key = asleep.wait_key
        form = EmitEventForm(request.POST if request.method == "POST" else None)
        if request.method == "POST" and form.is_valid():
            try:
                emitted = _emit(key, form.cleaned_data["payload"])
            except (PayloadError, StepError) as exc:
                form.add_error("payload", str(exc))
            else:
                if emitted:
                    text = gettext(
                        "Emitted event “%(key)s”: job #%(id)s (and any other job waiting for "
                        "it) is pending again, runnable now."
                    )
                    level = messages.SUCCESS
                else:
                    text = gettext(
                        "Event “%(key)s” was emitted before: the first emit wins, its payload "
                        "stands. Nothing was written."
                    )
                    level = messages.WARNING
                self.message_user(request, text % {"key": key, "id": obj.pk}, level)
                return HttpResponseRedirect(job_url)
        request.current_app = self.admin_site.name
        context = {
            **self.admin_site.each_context(request),
            **self._links(),  # type: ignore[attr-defined]
            "title": gettext("Emit event “%(key)s”") % {"key": key},
            "subtitle": None,
            "opts": self.opts,
            "app_label": self.opts.app_label,
            "media": self.media,
            "sqlq_job": obj,
            "sqlq_job_url": job_url,
            "sqlq_waits_for": key,
            "sqlq_note": asleep_note(asleep, timezone.now()),
            "sqlq_emit_form": form,
            "sqlq_emit_url": self._steps_url("emit_event", obj.pk),
        }
        return TemplateResponse(request, "admin/django_sqlq/job/emit_event.html", context)


def _emit(key: str, payload: Any) -> bool:
    from django_sqlq.steps import emit_event

    return emit_event(key, payload)
