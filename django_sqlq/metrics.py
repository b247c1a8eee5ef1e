"""The Prometheus view: ``path("sqlq/", include("django_sqlq.urls"))`` serves it at
``sqlq/metrics`` (URL name ``django_sqlq:metrics``). Opt-in: nothing is served until a
project includes the URLs. Built on ``prometheus-client`` (the ``prometheus`` extra) with
one custom collector that reads the database at each scrape, in a fixed number of queries
(nine) however large the jobs table is:

- ``sqlq_jobs{queue,status}``: blocked, scheduled, pending (runnable now), processing and
  failed jobs: the dashboard's counts, each read from its status's partial index (blocked
  jobs through the blockers' table), never the completed rows
  (:func:`django_sqlq.dashboard.queue_rows`);
- ``sqlq_queue_oldest_runnable_age_seconds{queue}``, ``sqlq_queue_workers{queue}``,
  ``sqlq_workers``: the oldest runnable job's wait, and the live workers (those that
  reported in the last 30 s);
- ``sqlq_jobs_enqueued_total``: the highest job id, the jobs table's sequence (one probe of
  the primary key): every job ever enqueued, counting (on PostgreSQL) those whose
  transaction rolled back;
- ``sqlq_jobs_completed_total``, ``sqlq_jobs_failed_total``, ``sqlq_jobs_retried_total``,
  ``sqlq_job_run_seconds``, ``sqlq_job_pickup_seconds`` (histograms), labelled by
  ``queue`` and ``worker``: what each worker process counted itself
  (:mod:`django_sqlq.worker.stats`) and wrote to its row at its last heartbeat, for the
  workers seen in the last ``STATS_WINDOW``. Per worker, as per-process counters always
  are: a worker that restarts starts a new series, and ``sum by (queue) (rate(...))``
  adds them up. Counting these from the jobs table instead would read every finished
  row, or (by ``completed_at``) give no counter that only goes up.

Access: a request with ``Authorization: Bearer <SQLQ["METRICS_TOKEN"]>``, or from a
logged-in staff user who may view jobs (as for the admin's dashboard); anything else gets
403 (a 404 would hide a misconfigured token).
"""

from __future__ import annotations

import hmac
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from django_sqlq import dashboard
from django_sqlq.conf import get_settings
from django_sqlq.models import Job, WorkerProcess
from django_sqlq.queues import configured_queues
from django_sqlq.worker import stats as worker_stats

try:
    from prometheus_client.core import (
        CounterMetricFamily,
        GaugeMetricFamily,
        HistogramMetricFamily,
    )
    from prometheus_client.exposition import choose_encoder
    from prometheus_client.registry import Collector, CollectorRegistry
except ImportError:  # pragma: no cover - the optional extra is installed in the test venvs
    AVAILABLE = False
    Collector = object  # type: ignore[assignment,misc]
else:
    AVAILABLE = True

#: Workers whose counts are exported: those that reported within this window (a stopped
#: worker's last counts stay visible for a few scrapes, then its series ends).
STATS_WINDOW = timedelta(minutes=15)
#: Job statuses exported by ``sqlq_jobs``: "pending" are the runnable jobs, "scheduled"
#: those whose time has not come, "blocked" those that wait for other jobs.
STATUSES = ("blocked", "scheduled", "pending", "processing", "failed")


class QueueCollector(Collector):  # type: ignore[misc]
    """The queue's metrics, read from the database ``alias`` at each ``collect()``."""

    def __init__(self, alias: str | None = None, *, now: datetime | None = None) -> None:
        self.alias = alias
        self.now = now

    def describe(self) -> list[Any]:
        return []  # read at collect time only: registering never touches the database

    def collect(self) -> Iterator[Any]:
        alias = self.alias or get_settings().DATABASE
        now = self.now or timezone.now()
        workers = dashboard.worker_rows(alias, now)
        queues = dashboard.queue_rows(alias, now, configured=configured_queues(), workers=workers)
        yield from _queue_metrics(queues)
        yield GaugeMetricFamily(
            "sqlq_workers",
            "Workers that reported in the last 30 s.",
            value=sum(1 for w in workers if w.alive),
        )
        newest = Job.objects.using(alias).order_by("-id").values_list("id", flat=True).first()
        yield CounterMetricFamily(
            "sqlq_jobs_enqueued",
            "Jobs enqueued: the highest job id (the table's sequence).",
            value=newest or 0,
        )
        rows = (
            WorkerProcess.objects.using(alias)
            .filter(last_seen_at__gte=now - STATS_WINDOW)
            .values_list("worker_id", "stats")
        )
        yield from _worker_metrics(list(rows))


def _queue_metrics(queues: list[dashboard.QueueRow]) -> Iterator[Any]:
    counts = GaugeMetricFamily(
        "sqlq_jobs",
        "Jobs by queue and status (pending: runnable now; completed and cancelled jobs are "
        "not counted).",
        labels=["queue", "status"],
    )
    oldest = GaugeMetricFamily(
        "sqlq_queue_oldest_runnable_age_seconds",
        "Seconds the oldest runnable job of the queue has waited (0: none waits).",
        labels=["queue"],
    )
    serving = GaugeMetricFamily(
        "sqlq_queue_workers", "Live workers that serve the queue.", labels=["queue"]
    )
    for queue in queues:
        by_status = {
            "scheduled": queue.scheduled,
            "pending": queue.runnable,
            "processing": queue.processing,
            "failed": queue.failed,
            "blocked": queue.blocked,
        }
        for status in STATUSES:
            counts.add_metric([queue.name, status], by_status[status])
        oldest.add_metric([queue.name], queue.oldest_wait or 0.0)
        serving.add_metric([queue.name], queue.workers)
    yield counts
    yield oldest
    yield serving


def _worker_metrics(rows: list[tuple[str, Any]]) -> Iterator[Any]:
    labels = ["queue", "worker"]
    counters = {
        "completed": CounterMetricFamily(
            "sqlq_jobs_completed", "Attempts completed, as each worker counted.", labels=labels
        ),
        "failed": CounterMetricFamily(
            "sqlq_jobs_failed", "Jobs failed for good (attempts spent).", labels=labels
        ),
        "retried": CounterMetricFamily(
            "sqlq_jobs_retried", "Failed attempts that will be retried.", labels=labels
        ),
    }
    histograms = {
        "run_seconds": HistogramMetricFamily(
            "sqlq_job_run_seconds", "Run time of each attempt's handler.", labels=labels
        ),
        "pickup_seconds": HistogramMetricFamily(
            "sqlq_job_pickup_seconds",
            "Time from a job's scheduled_at to the start of its attempt.",
            labels=labels,
        ),
    }
    bounds = [_le(b) for b in worker_stats.BUCKETS] + ["+Inf"]
    for worker_id, stats in rows:
        if not isinstance(stats, dict) or stats.get("version") != worker_stats.VERSION:
            continue  # a worker of another version, or none reported yet
        if stats.get("buckets") != list(worker_stats.BUCKETS):
            continue
        queues = stats.get("queues")
        for queue, counts in (queues if isinstance(queues, dict) else {}).items():
            try:
                for key, family in counters.items():
                    family.add_metric([queue, worker_id], float(counts[key]))
                for key, histogram in histograms.items():
                    cumulative = _cumulative(counts[key]["counts"], len(bounds))
                    histogram.add_metric(
                        [queue, worker_id],
                        buckets=list(zip(bounds, cumulative, strict=True)),
                        sum_value=float(counts[key]["sum"]),
                    )
            except (KeyError, TypeError, ValueError):
                continue  # a row edited by hand: skipped, not a failed scrape
    yield from counters.values()
    yield from histograms.values()


def _le(bound: float) -> str:
    return repr(float(bound))


def _cumulative(counts: Any, size: int) -> list[float]:
    if not isinstance(counts, list) or len(counts) != size:
        raise ValueError("not a histogram of the current buckets")
    total = 0.0
    result = []
    for count in counts:
        total += float(count)
        result.append(total)
    return result


def allowed(request: HttpRequest) -> bool:
    """Whether ``request`` may read the metrics: the bearer token, or a staff user with the
    view permission on jobs."""
    token = get_settings().METRICS_TOKEN
    if token is not None:
        header = request.headers.get("Authorization", "")
        scheme, _, given = header.partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(
            given.strip().encode(), token.encode()
        ):
            return True
    user = getattr(request, "user", None)
    return bool(
        user is not None
        and user.is_active
        and user.is_staff
        and user.has_perm("django_sqlq.view_job")
    )


@never_cache
@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    """:class:`QueueCollector`'s metrics, in the format the scraper accepts."""
    if not allowed(request):
        return HttpResponse(
            "Forbidden: send Authorization: Bearer <SQLQ['METRICS_TOKEN']>, or log in as staff.",
            status=403,
            content_type="text/plain; charset=utf-8",
        )
    if not AVAILABLE:
        return HttpResponse(
            "prometheus-client is not installed: pip install 'django-sqlq[prometheus]'.",
            status=501,
            content_type="text/plain; charset=utf-8",
        )
    registry = CollectorRegistry(auto_describe=False)
    registry.register(QueueCollector())
    # OpenMetrics when the scraper asks for it (Prometheus does), else the text format.
    encode, content_type = choose_encoder(request.headers.get("Accept", ""))
    return HttpResponse(encode(registry), content_type=content_type)
