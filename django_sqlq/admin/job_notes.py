"""What the job page's live box says about a job's state: why it waits, what a running
job's cancel does, what a blocked job waits for."""

from __future__ import annotations

from datetime import datetime

from django.utils.translation import gettext

from django_sqlq import dashboard
from django_sqlq.admin.display import local_datetime
from django_sqlq.lifecycle import WAITING
from django_sqlq.models import Job, JobStatus


def status_note(job: Job, now: datetime) -> str:
    """One or two sentences for ``job`` at ``now`` ("" for a finished job)."""
    if job.status == JobStatus.PROCESSING and job.cancel_requested_at is not None:
        note = gettext(
            "Cancel requested at %(when)s: its worker stops it within a second or two "
            "(a handler that does not check for it runs to its end), and it ends cancelled."
        ) % {"when": local_datetime(job.cancel_requested_at)}
    elif job.status == JobStatus.PROCESSING:
        note = gettext(
            "A worker is running this job. Cancel asks the worker to stop it; it cannot "
            "be deleted while it runs. If the worker dies, the job returns to the queue "
            "when its lease ends."
        )
    elif job.status == JobStatus.BLOCKED:
        note = gettext(
            "Blocked: waits for %(n)s of the jobs and chains it depends on (listed "
            "below); it becomes pending when they have completed. If one fails or is "
            "cancelled: %(policy)s."
        ) % {
            "n": job.blockers_left if job.blockers_left is not None else "?",
            "policy": str(job.get_dependency_policy_display()).lower()
            if job.dependency_policy
            else "-",
        }
    elif job.status in WAITING and job.scheduled_at > now:
        note = gettext("Waits until %(when)s (in %(wait)s).") % {
            "when": local_datetime(job.scheduled_at),
            "wait": dashboard.format_age((job.scheduled_at - now).total_seconds()),
        }
    elif job.status in WAITING:
        note = gettext("Waiting for a worker since %(when)s (%(wait)s).") % {
            "when": local_datetime(job.scheduled_at),
            "wait": dashboard.format_age((now - job.scheduled_at).total_seconds()),
        }
    else:
        note = ""
    return note
