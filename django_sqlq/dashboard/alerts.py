"""The dashboard's alerts: what is wrong, worst first, in the operator's language, each
with the admin list (and its query string) that shows it."""

from __future__ import annotations

from django.utils.http import urlencode
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from django_sqlq.dashboard.durations import format_age
from django_sqlq.dashboard.rows import WAITING_ALERT_SECONDS, Alert, Snapshot
from django_sqlq.models import JobStatus


def alerts(snap: Snapshot) -> list[Alert]:
    """What is wrong, worst first: nobody works, a queue nobody serves or that falls behind,
    leases of dead workers, failed jobs waiting for an operator."""
    found: list[Alert] = []
    live = snap.live_workers
    waiting = sum(q.runnable for q in snap.queues)
    if not live and waiting:
        lost = [w for w in snap.workers if not w.alive]
        message = ngettext(
            "No worker is running: %(n)d job is waiting.",
            "No worker is running: %(n)d jobs are waiting.",
            waiting,
        ) % {"n": waiting}
        if lost:
            message += " " + _("The last worker reported %(ago)s (%(id)s).") % {
                "ago": lost[0].last_seen_display,
                "id": lost[0].worker_id,
            }
        else:
            message += " " + _("Start one with: python manage.py sqlq_worker")
        found.append(Alert("error", message, "workers"))
    for queue in snap.queues:
        if not queue.runnable:
            continue
        query = urlencode({"queue": queue.name, "when": "due"})
        if live and not queue.workers:
            found.append(
                Alert(
                    "error",
                    ngettext(
                        "No running worker serves queue “%(q)s”: %(n)d job is waiting.",
                        "No running worker serves queue “%(q)s”: %(n)d jobs are waiting.",
                        queue.runnable,
                    )
                    % {"q": queue.name, "n": queue.runnable},
                    "jobs",
                    query,
                )
            )
        elif live and (queue.oldest_wait or 0) >= WAITING_ALERT_SECONDS:
            found.append(
                Alert(
                    "warning",
                    ngettext(
                        "Queue “%(q)s” is falling behind: %(n)d job is waiting, "
                        "the oldest for %(age)s.",
                        "Queue “%(q)s” is falling behind: %(n)d jobs are waiting, "
                        "the oldest for %(age)s.",
                        queue.runnable,
                    )
                    % {"q": queue.name, "n": queue.runnable, "age": queue.oldest_wait_display},
                    "jobs",
                    query,
                )
            )
    if snap.expired_leases:
        found.append(
            Alert(
                "warning",
                ngettext(
                    "%(n)d running job's worker stopped renewing its lease; a worker will "
                    "return it to the queue.",
                    "%(n)d running jobs' workers stopped renewing their leases; a worker will "
                    "return them to the queue.",
                    snap.expired_leases,
                )
                % {"n": snap.expired_leases},
                "jobs",
                urlencode({"status__exact": JobStatus.PROCESSING}),
            )
        )
    failed = sum(q.failed for q in snap.queues)
    if failed:
        message = ngettext(
            "%(n)d job failed and waits for an operator.",
            "%(n)d jobs failed and wait for an operator.",
            failed,
        ) % {"n": failed}
        if snap.newest_failure_at is not None:
            message += " " + _("The last one failed %(ago)s ago.") % {
                "ago": format_age((snap.now - snap.newest_failure_at).total_seconds())
            }
        found.append(Alert("warning", message, "failed"))
    return found
