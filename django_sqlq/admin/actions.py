"""What an operator can do to jobs, and the Django admin actions that do it.

Each :class:`JobAction` holds the :mod:`django_sqlq.lifecycle` function that changes the
jobs; that function's single conditional statement skips a job that changed meanwhile (a
worker claimed it) instead of corrupting it. :func:`perform` runs an action on a queryset and
says what it did and why it skipped the rest; :func:`retry_jobs`, :func:`cancel_jobs`,
:func:`run_jobs_now` and :func:`delete_jobs` are the lists' bulk actions (the job page's
buttons run the same :class:`JobAction` objects, see ``JobAdmin.job_action_view``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.db.models import Count, QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.utils import timezone
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from django_sqlq import lifecycle
from django_sqlq.admin.display import queue_alias, status_badge, status_label
from django_sqlq.models import JobStatus

# Operator actions change jobs in statements of at most this many ids.
ACTION_CHUNK = 500


class LifecycleChange(Protocol):
    """A :mod:`django_sqlq.lifecycle` function that changes jobs by id (``retry_now``...)."""

    def __call__(self, ids: Iterable[int], *, alias: str | None = None) -> lifecycle.Outcome: ...


@dataclass(frozen=True)
class JobAction:
    """An operator action, on the lists (bulk) and on the job page (one job)."""

    name: str  # URL segment
    permission: str  # has_<permission>_permission on the ModelAdmin
    label: Any
    done: tuple[str, str]  # ngettext pair: "Retried %(n)d job." ...
    rule: Any  # why the other jobs are skipped
    statuses: tuple[str, ...]
    function: LifecycleChange  # the lifecycle function that does it
    future_only: bool = False
    css: str = ""

    def run(self, ids: list[int], *, alias: str) -> lifecycle.Outcome:
        return self.function(ids, alias=alias)

    def applies(self, status: str, scheduled_at: datetime | None, now: datetime) -> bool:
        if status not in self.statuses:
            return False
        return not self.future_only or (scheduled_at is not None and scheduled_at > now)

    def allowed(self, model_admin: Any, request: HttpRequest) -> bool:
        """Whether the user may run it here: ``model_admin.has_<permission>_permission``,
        the check Django makes for an action's ``permissions``."""
        check: Callable[[HttpRequest], bool] = getattr(
            model_admin, f"has_{self.permission}_permission"
        )
        return check(request)


RETRY = JobAction(
    name="retry",
    permission="retry",
    label=_("Retry now"),
    done=("Retried %(n)d job: it is pending again, runnable now.",
          "Retried %(n)d jobs: they are pending again, runnable now."),
    rule=_("only failed or cancelled jobs can be retried"),
    statuses=(JobStatus.FAILED, JobStatus.CANCELLED),
    function=lifecycle.retry_now,
    css="sqlq-retry",
)  # fmt: skip
CANCEL = JobAction(
    name="cancel",
    permission="cancel",
    label=_("Cancel"),
    done=("Cancelled %(n)d job.", "Cancelled %(n)d jobs."),
    rule=_("only blocked, scheduled, pending or running jobs can be cancelled"),
    statuses=lifecycle.CANCELLABLE,
    function=lifecycle.cancel_or_request,
    css="sqlq-cancel",
)
RUN_NOW = JobAction(
    name="run-now",
    permission="change",
    label=_("Run now"),
    done=("Scheduled %(n)d job to run now.", "Scheduled %(n)d jobs to run now."),
    rule=_("only jobs scheduled in the future can be brought forward"),
    statuses=lifecycle.WAITING,
    function=lifecycle.run_now,
    future_only=True,
    css="sqlq-run-now",
)
DELETE = JobAction(
    name="delete",
    permission="delete",
    label=_("Delete"),
    done=("Deleted %(n)d job.", "Deleted %(n)d jobs."),
    rule=_("a running job cannot be deleted while its worker holds it"),
    statuses=(*lifecycle.NOT_STARTED, JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELLED),
    function=lifecycle.delete,
)
PAGE_ACTIONS = (RETRY, CANCEL, RUN_NOW)


@dataclass(frozen=True)
class ActionReport:
    """What an action did to the jobs it was given, and why it left the others alone."""

    action: JobAction
    changed: int
    not_applicable: dict[str, int]  # reason (a status, or "already due") -> jobs
    raced: int  # applicable when read, changed by someone else before the write
    missing: int  # no longer exist
    held: int = 0  # applicable, but a live job holds their unique_key (retry)
    requested: int = 0  # of changed: running jobs whose cancel was requested

    @property
    def skipped(self) -> int:
        return sum(self.not_applicable.values()) + self.raced + self.held + self.missing

    def message(self) -> str:
        done = self.changed - self.requested
        parts = (
            []
            if self.requested and not done
            else [ngettext(*self.action.done, done) % {"n": done}]
        )
        if self.requested:
            parts.append(
                ngettext(
                    "Cancel requested for %(n)d running job: its worker stops it within a "
                    "second or two, and it ends cancelled.",
                    "Cancel requested for %(n)d running jobs: their workers stop them within a "
                    "second or two, and they end cancelled.",
                    self.requested,
                )
                % {"n": self.requested}
            )
        if self.not_applicable:
            count = sum(self.not_applicable.values())
            why = ", ".join(f"{n} {reason}" for reason, n in sorted(self.not_applicable.items()))
            parts.append(
                ngettext(
                    "Skipped %(n)d job (%(why)s): %(rule)s.",
                    "Skipped %(n)d jobs (%(why)s): %(rule)s.",
                    count,
                )
                % {"n": count, "why": why, "rule": self.action.rule}
            )
        if self.held:
            parts.append(
                ngettext(
                    "Skipped %(n)d job whose unique key a live job holds (two live jobs "
                    "with one key are what the key forbids); it was left as it is.",
                    "Skipped %(n)d jobs whose unique keys live jobs hold (two live jobs "
                    "with one key are what the key forbids); they were left as they are.",
                    self.held,
                )
                % {"n": self.held}
            )
        if self.raced:
            parts.append(
                ngettext(
                    "Skipped %(n)d job whose status changed meanwhile (a worker started it, "
                    "or someone else acted on it); it was left as it is.",
                    "Skipped %(n)d jobs whose status changed meanwhile (a worker started them, "
                    "or someone else acted on them); they were left as they are.",
                    self.raced,
                )
                % {"n": self.raced}
            )
        if self.missing:
            parts.append(
                ngettext(
                    "Skipped %(n)d job that no longer exists.",
                    "Skipped %(n)d jobs that no longer exist.",
                    self.missing,
                )
                % {"n": self.missing}
            )
        return " ".join(parts)

    @property
    def level(self) -> int:
        if not self.changed:
            return messages.WARNING
        return messages.WARNING if self.skipped else messages.SUCCESS


def perform(
    action: JobAction,
    queryset: QuerySet[Any],
    *,
    alias: str,
    requested: int | None = None,
    now: datetime | None = None,
) -> ActionReport:
    """Run ``action`` on the jobs of ``queryset``: read their statuses, hand the applicable
    ones to lifecycle (which re-checks each status in its own statement) and report."""
    now = now or timezone.now()
    rows = list(queryset.order_by().values_list("pk", "status", "scheduled_at"))
    applicable: list[int] = []
    not_applicable: Counter[str] = Counter()
    for pk, status, scheduled_at in rows:
        if action.applies(status, scheduled_at, now):
            applicable.append(pk)
        elif status in lifecycle.WAITING and action.future_only:
            not_applicable[gettext("already due")] += 1
        else:
            not_applicable[status_label(status).lower()] += 1
    changed = held = cancel_requested = 0
    # Newest first, whatever order the database read them in: of jobs with one unique_key
    # spread over several chunks, retry takes the newest (a later chunk's older job then
    # finds the key held and is skipped, as within one chunk).
    applicable.sort(reverse=True)
    for start in range(0, len(applicable), ACTION_CHUNK):
        outcome = action.run(applicable[start : start + ACTION_CHUNK], alias=alias)
        changed += outcome.changed
        held += outcome.held
        cancel_requested += outcome.requested
    return ActionReport(
        action=action,
        changed=changed,
        requested=cancel_requested,
        not_applicable=dict(not_applicable),
        raced=len(applicable) - changed - held,
        held=held,
        missing=max(0, (requested if requested is not None else len(rows)) - len(rows)),
    )


def act(
    model_admin: Any,
    request: HttpRequest,
    action: JobAction,
    queryset: QuerySet[Any],
    *,
    requested: int | None = None,
) -> ActionReport:
    """:func:`perform` ``action`` on the queue's database and tell the user what it did."""
    report = perform(action, queryset, alias=queue_alias(), requested=requested)
    model_admin.message_user(request, report.message(), report.level)
    return report


# -- the lists' bulk actions (Django calls them with the ModelAdmin, the request and the
# selected rows; the action's name in the form is the function's name) --------------------


@admin.action(description=_("Retry selected jobs now"), permissions=["retry"])
def retry_jobs(model_admin: Any, request: HttpRequest, queryset: QuerySet[Any]) -> None:
    act(model_admin, request, RETRY, queryset)


@admin.action(
    description=_("Cancel selected jobs (running ones: ask their worker)"), permissions=["cancel"]
)
def cancel_jobs(model_admin: Any, request: HttpRequest, queryset: QuerySet[Any]) -> None:
    act(model_admin, request, CANCEL, queryset)


@admin.action(description=_("Run selected scheduled jobs now"), permissions=["change"])
def run_jobs_now(model_admin: Any, request: HttpRequest, queryset: QuerySet[Any]) -> None:
    act(model_admin, request, RUN_NOW, queryset)


@admin.action(description=_("Delete selected jobs"), permissions=["delete"])
def delete_jobs(
    model_admin: Any, request: HttpRequest, queryset: QuerySet[Any]
) -> TemplateResponse | None:
    """Ask first (how many, by status, and that running jobs are kept), then delete."""
    if request.POST.get("post") == "yes":
        act(model_admin, request, DELETE, queryset)
        return None
    by_status = {
        row["status"]: row["n"]
        for row in queryset.order_by().values("status").annotate(n=Count("pk"))
    }
    running = by_status.get(JobStatus.PROCESSING, 0)
    context = {
        **model_admin.admin_site.each_context(request),
        "title": gettext("Delete jobs?"),
        "opts": model_admin.opts,
        "total": sum(by_status.values()),
        "deletable": sum(by_status.values()) - running,
        "running": running,
        "by_status": [(status_badge(s), n) for s, n in sorted(by_status.items())],
        "sample": list(queryset.values_list("pk", "type")[:20]),
        "selected": request.POST.getlist(helpers.ACTION_CHECKBOX_NAME),
        "select_across": request.POST.get("select_across", "0"),
        "action_name": "delete_jobs",
        "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        "media": model_admin.media,
    }
    return TemplateResponse(request, "admin/django_sqlq/delete_jobs_confirmation.html", context)
