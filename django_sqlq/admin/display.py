"""What several of the admin's pages show: a status badge, a progress bar, dates in the
current time zone, JSON, and the links between the queue's pages. Also the alias of the
queue's database, which every page reads from."""

from __future__ import annotations

import json
import threading
from datetime import datetime
from typing import Any

from django.urls import NoReverseMatch, reverse
from django.utils import formats, timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import gettext

from django_sqlq.conf import get_settings
from django_sqlq.models import Job, JobStatus

# The changelist shows this much of ``last_error``; the job page shows all of it.
ERROR_LINE_CHARS = 160


def queue_alias() -> str:
    """The database that holds the jobs table (``SQLQ["DATABASE"]``)."""
    return get_settings().DATABASE


def _compact_json_in_fresh_thread(value: Any) -> str:
    box: list[str] = []

    def encode() -> None:
        try:
            box.append(json.dumps(value, sort_keys=True, ensure_ascii=False, default=str))
        except RecursionError:
            box.append('"(nested too deeply to display)"')

    thread = threading.Thread(target=encode, name="sqlq-admin-json")
    thread.start()
    thread.join()
    return box[0] if box else '"(could not display)"'


def pretty_json(value: Any) -> SafeString:
    """``value`` as indented JSON in a ``<pre>``, escaped."""
    try:
        text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)
    except RecursionError:
        # Indented output is encoded in Python, a few frames per level, on top of the
        # admin's own deep stack: a payload nested a few hundred levels deep (enqueue
        # accepts it) overflowed it, a 500. The compact encoder, on the fresh stack of a
        # thread of its own (as shallow as enqueue's), handles whatever was stored.
        text = _compact_json_in_fresh_thread(value)
    return format_html('<pre class="sqlq-json">{}</pre>', text)


def local_datetime(value: datetime | None) -> str:
    """``value`` in the current time zone, formatted for the current locale; "-" for None."""
    if value is None:
        return "-"
    if timezone.is_aware(value):
        value = timezone.localtime(value)
    return str(formats.localize(value))


# A part of a dotted name longer than this also breaks after its underscores: alone on a
# line it would be wider than the type column can be at 1400 px beside the filters.
LONG_NAME_PART = 20


def breakable_name(name: str) -> SafeString:
    """A dotted name (a job type, a task path) that wraps after its dots, and inside a long
    part after its underscores, never in the middle of a word: ``<wbr>`` marks where."""
    parts = []
    for part in name.split("."):
        if len(part) > LONG_NAME_PART:
            words = part.split("_")
            part_html = format_html_join(mark_safe("_<wbr>"), "{}", ((w,) for w in words))
        else:
            part_html = format_html("{}", part)
        parts.append((part_html,))
    return format_html_join(mark_safe(".<wbr>"), "{}", parts)


def status_label(status: str) -> str:
    return str(JobStatus(status).label) if status in JobStatus.values else status


def status_badge(status: str) -> SafeString:
    return format_html('<span class="sqlq-badge sqlq-{}">{}</span>', status, status_label(status))


def progress_bar(job: Job) -> SafeString:
    """A running job's progress as its handler last reported it (a bar, the percentage and
    the message), and whether its cancel was requested; "" when there is nothing to show."""
    parts: list[SafeString] = []
    if job.progress is not None:
        fraction = min(1.0, max(0.0, job.progress))
        parts.append(
            format_html(
                '<progress class="sqlq-progress" value="{}" max="1" title="{}">{}%</progress> '
                "<span>{}%</span>",
                f"{fraction:.3f}",
                job.progress_message or "",
                round(fraction * 100),
                round(fraction * 100),
            )
        )
        if job.progress_message:
            parts.append(format_html(' <span class="sqlq-quiet">{}</span>', job.progress_message))
    if job.cancel_requested_at is not None and job.status == JobStatus.PROCESSING:
        parts.append(
            format_html(
                ' <span class="sqlq-badge sqlq-cancelled sqlq-cancel-requested">{}</span>',
                gettext("cancel requested"),
            )
        )
    return format_html_join("", "{}", ((part,) for part in parts))


def admin_links(site_name: str) -> dict[str, str | None]:
    """URLs of the queue's pages in this admin site (None for a model not registered)."""
    links: dict[str, str | None] = {}
    for key, model, name in (
        ("sqlq_dashboard_url", "job", "dashboard"),
        ("sqlq_alerts_url", "job", "dashboard_alerts"),
        ("sqlq_jobs_url", "job", "changelist"),
        ("sqlq_failed_url", "failedjob", "changelist"),
        ("sqlq_workers_url", "workerprocess", "changelist"),
    ):
        try:
            links[key] = reverse(f"{site_name}:django_sqlq_{model}_{name}", current_app=site_name)
        except NoReverseMatch:
            links[key] = None
    return links
