"""Workflows in the admin: a chain's page (every step of a chain, in order, and the jobs that
wait for the chain), and what the job page shows of a job's chain and dependencies.

A chain is named by its first job's id (``Chain(id)``); its page is served under the job
admin's URLs (``job/chain/<id>/``; the job admins mix in :class:`ChainViews`). Whoever may
view jobs may see it. Each read is bounded: the steps through the chain's own index
(``sqlq_job_chain_step_unique``), at most :data:`MAX_CHAIN_STEPS` of them; the waiters
through the blockers' index, at most :data:`MAX_WAITERS`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from django.contrib import admin
from django.contrib.admin.utils import quote
from django.core.exceptions import PermissionDenied
from django.db.models import Q
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import NoReverseMatch, URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.translation import gettext

from django_sqlq import dashboard
from django_sqlq.admin.display import admin_links, local_datetime, queue_alias, status_badge
from django_sqlq.models import Chain, Job, JobBlocker, JobStatus

if TYPE_CHECKING:
    JobModelAdmin = admin.ModelAdmin[Job]
else:
    JobModelAdmin = admin.ModelAdmin

#: The chain page lists at most this many steps (the first ones), then the last step.
MAX_CHAIN_STEPS = 500
#: The chain page and the job page list at most this many of the jobs that wait.
MAX_WAITERS = 100

# The columns a chain's step row shows (not the payload, result or errors).
STEP_FIELDS = (
    "id", "type", "queue", "status", "attempts", "max_attempts", "chain_id", "chain_index",
    "created_at", "started_at", "completed_at",
)  # fmt: skip


def job_url(site_name: str, pk: int) -> str:
    return reverse(f"{site_name}:django_sqlq_job_change", args=[quote(pk)], current_app=site_name)


def chain_url(site_name: str, chain_id: int) -> str | None:
    """The chain page's URL; None when the all-jobs admin is not in this site."""
    try:
        return reverse(
            f"{site_name}:django_sqlq_job_chain", args=[chain_id], current_app=site_name
        )
    except NoReverseMatch:
        return None


def duration(job: Job, now: datetime) -> str:
    """How long the job's last attempt ran (or has run so far); "" before it started."""
    if job.started_at is None:
        return ""
    if job.status == JobStatus.PROCESSING:
        return gettext("%s so far") % dashboard.format_age((now - job.started_at).total_seconds())
    if job.completed_at is None or job.completed_at < job.started_at:
        return ""
    seconds = (job.completed_at - job.started_at).total_seconds()
    if seconds < 10:
        return gettext("%.2f s") % seconds
    return dashboard.format_age(seconds)


@dataclass(frozen=True)
class Step:
    """One step's row on the chain page."""

    job: Job
    url: str
    duration: str

    @property
    def badge(self) -> SafeString:
        return status_badge(self.job.status)

    @property
    def created(self) -> str:
        return local_datetime(self.job.created_at)

    @property
    def started(self) -> str:
        return local_datetime(self.job.started_at)

    @property
    def completed(self) -> str:
        return local_datetime(self.job.completed_at)


@dataclass(frozen=True)
class Waiter:
    """A blocked job that waits for a job or a chain."""

    job: Job
    url: str
    on_chain: bool  # waits for the chain (depends_on=[job.chain], a group), not the job

    @property
    def badge(self) -> SafeString:
        return status_badge(self.job.status)


def waiters(site_name: str, condition: Q) -> tuple[list[Waiter], bool]:
    """The jobs whose blockers' rows match ``condition`` (at most :data:`MAX_WAITERS`) and
    whether there are more. Rows exist only while the job waits: a released, failed or
    cancelled waiter is no longer listed."""
    alias = queue_alias()
    rows = list(
        JobBlocker.objects.using(alias)
        .filter(condition)
        .order_by("job_id")
        .values_list("job_id", "chain")[: MAX_WAITERS + 1]
    )
    more = len(rows) > MAX_WAITERS
    rows = rows[:MAX_WAITERS]
    jobs = Job.objects.using(alias).only(*STEP_FIELDS).in_bulk([pk for pk, _ in rows])
    found: dict[int, Waiter] = {}
    for pk, on_chain in rows:
        job = jobs.get(pk)
        if job is not None and pk not in found:
            found[pk] = Waiter(job=job, url=job_url(site_name, pk), on_chain=on_chain)
    return list(found.values()), more


def waiters_list(found: list[Waiter], more: bool) -> SafeString:
    if not found:
        return format_html('<span class="sqlq-quiet">{}</span>', gettext("none"))
    on_chain = format_html(' <span class="sqlq-quiet">({})</span>', gettext("waits for the chain"))
    items = format_html_join(
        "\n",
        '<li data-job="{}"><a href="{}">#{}</a> {} {}{}</li>',
        (
            (
                w.job.pk,
                w.url,
                w.job.pk,
                w.job.type,
                w.badge,
                on_chain if w.on_chain else "",
            )
            for w in found
        ),
    )
    shown = gettext("and more (the first %d shown)") % MAX_WAITERS
    tail = format_html('<li class="sqlq-quiet">{}</li>', shown) if more else ""
    return format_html('<ul class="sqlq-waiters">{}{}</ul>', items, tail)


def depends_on_html(site_name: str, job: Job) -> SafeString:
    """What the job was enqueued to wait for, each with its state: a job's status, or
    whether the job still waits for it (a chain; a job deleted since)."""
    targets = [t for t in (job.depends_on or []) if isinstance(t, dict)]
    if not targets:
        return format_html('<span class="sqlq-quiet">{}</span>', gettext("none"))
    alias = queue_alias()
    pending = set(
        JobBlocker.objects.using(alias).filter(job_id=job.pk).values_list("blocker_id", "chain")
    )
    ids = [t["job"] for t in targets if isinstance(t.get("job"), int)]
    statuses = dict(Job.objects.using(alias).filter(pk__in=ids).values_list("pk", "status"))
    items = []
    for target in targets:
        on_chain = "chain" in target
        pk = target.get("chain") if on_chain else target.get("job")
        if not isinstance(pk, int):
            continue
        waits = (pk, on_chain) in pending
        if on_chain:
            url = chain_url(site_name, pk)
            label = gettext("chain #%(id)s") % {"id": pk}
            state = format_html(
                '<span class="{}">{}</span>',
                "sqlq-waiting" if waits else "sqlq-quiet",
                gettext("not done yet") if waits else gettext("done, or no longer waited for"),
            )
        else:
            url = job_url(site_name, pk)
            label = gettext("job #%(id)s") % {"id": pk}
            status = statuses.get(pk)
            state = (
                status_badge(status)
                if status is not None
                else format_html('<span class="sqlq-quiet">{}</span>', gettext("deleted"))
            )
        link = format_html('<a href="{}">{}</a>', url, label) if url else label
        items.append((pk, "chain" if on_chain else "job", link, state))
    rows = format_html_join("\n", '<li data-{1}="{0}">{2} {3}</li>', items)
    return format_html('<ul class="sqlq-depends-on">{}</ul>', rows)


class ChainViews(JobModelAdmin):
    """The chain page's view and URL, for the job admins to mix in."""

    def get_urls(self) -> list[URLPattern]:
        info = self.opts.app_label, self.opts.model_name
        return [
            path(
                "chain/<int:chain_id>/",
                self.admin_site.admin_view(self.chain_view),
                name="{}_{}_chain".format(*info),
            ),
            *super().get_urls(),
        ]

    def chain_view(self, request: HttpRequest, chain_id: int) -> HttpResponse:
        """Every step of chain ``chain_id`` (the first :data:`MAX_CHAIN_STEPS`, then the
        last), and the jobs that wait for it."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        request.current_app = site = self.admin_site.name
        alias = queue_alias()
        jobs = Chain(chain_id).jobs(using=alias).only(*STEP_FIELDS)
        found = list(jobs[: MAX_CHAIN_STEPS + 1])
        if not found:
            raise Http404(gettext("No chain or job has the id %(id)s.") % {"id": chain_id})
        first = found[0]
        if first.chain_id is not None and first.chain_id != chain_id:
            # A later step of another chain: its chain's page.
            return HttpResponseRedirect(chain_url(site, first.chain_id) or job_url(site, first.pk))
        truncated = len(found) > MAX_CHAIN_STEPS
        found = found[:MAX_CHAIN_STEPS]
        last = jobs.order_by("-chain_index", "-id").first() if truncated else found[-1]
        now = timezone.now()

        def step(job: Job) -> Step:
            return Step(job=job, url=job_url(site, job.pk), duration=duration(job, now))

        waiting, more_waiting = waiters(site, Q(blocker_id=chain_id, chain=True))
        context = {
            **self.admin_site.each_context(request),
            **admin_links(site),
            "title": gettext("Chain #%(id)s") % {"id": chain_id},
            "subtitle": None,
            "opts": self.opts,
            "app_label": self.opts.app_label,
            "media": self.media,
            "chain_id": chain_id,
            "steps": [step(job) for job in found],
            "truncated": truncated,
            "max_steps": MAX_CHAIN_STEPS,
            "last": step(last) if last is not None else None,
            "waiters": waiting,
            "more_waiters": more_waiting,
            "max_waiters": MAX_WAITERS,
        }
        return TemplateResponse(request, "admin/django_sqlq/chain.html", context)
