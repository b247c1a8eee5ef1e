"""Issue 15, part 5: the Prometheus view, OpenTelemetry spans, and the job in every log
line's ``extra``. Both engines; the worker runs in this process (``run_burst``)."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from datetime import UTC, timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext, override_settings
from django.urls import reverse
from django.utils import timezone
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from prometheus_client.parser import text_string_to_metric_families

from django_sqlq import enqueue, tracing
from django_sqlq.conf import get_settings
from django_sqlq.db import ops_for
from django_sqlq.exceptions import ConfigurationError
from django_sqlq.logs import JOB_FIELDS
from django_sqlq.models import Job, JobStatus, WorkerProcess
from django_sqlq.worker.maintenance.reaper import Reaper
from django_sqlq.worker.stats import seconds_between
from tests.conftest import ROOT, run_burst, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

TOKEN = "a-long-enough-metrics-token"
SQLQ = {**__import__("tests.settings", fromlist=["SQLQ"]).SQLQ, "METRICS_TOKEN": TOKEN}


def scrape(client: Client, **headers: str) -> Any:
    return client.get(reverse("django_sqlq:metrics"), headers=headers)


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the exposition, parsed by prometheus_client's own parser."""
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def value(found: dict[Any, float], name: str, **labels: str) -> float:
    return found[(name, tuple(sorted(labels.items())))]


# -- the Prometheus view ------------------------------------------------------------------


@override_settings(SQLQ=SQLQ)
def test_the_metrics_parse_and_match_the_table():
    for n in range(3):
        enqueue("tests.noop", {"n": n})
    enqueue("tests.boom", {}, max_attempts=1)
    enqueue("tests.boom", {}, max_attempts=2)
    worker = run_burst(concurrency=2, worker_id="metrics-worker")
    # What the table holds after the run, plus jobs in every other state.
    enqueue("tests.noop", {}, queue="emails")
    enqueue("tests.noop", {}, queue="emails", delay=3600)
    enqueue("tests.noop", {}, queue="reports")
    claimed = ops_for("default").claim(
        queues=["reports"], worker_id="elsewhere", limit=1, lease_seconds=60
    )
    assert len(claimed) == 1
    old = enqueue("tests.noop", {}, queue="reports")
    Job.objects.filter(pk=old.pk).update(scheduled_at=timezone.now() - timedelta(seconds=90))
    later = enqueue("tests.noop", {}, queue="emails", delay=3600)
    enqueue("tests.noop", {}, queue="emails", depends_on=[later])
    enqueue("tests.noop", {}, queue="emails", depends_on=[later, old])

    response = scrape(Client(), Authorization=f"Bearer {TOKEN}")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=")
    found = samples(response.content.decode())

    now = timezone.now()
    for queue in get_settings().QUEUES:
        jobs = Job.objects.filter(queue=queue)
        expected = {
            "pending": jobs.runnable(now).count(),
            "scheduled": jobs.scheduled(now).count(),
            "processing": jobs.processing().count(),
            "failed": jobs.failed().count(),
            "blocked": jobs.blocked().count(),
        }
        got = {s: value(found, "sqlq_jobs", queue=queue, status=s) for s in expected}
        assert got == expected, queue
    assert value(found, "sqlq_jobs", queue="reports", status="processing") == 1
    assert value(found, "sqlq_jobs", queue="default", status="failed") == 2
    assert value(found, "sqlq_jobs", queue="emails", status="blocked") == 2
    assert 90 <= value(found, "sqlq_queue_oldest_runnable_age_seconds", queue="reports") < 300
    assert value(found, "sqlq_queue_oldest_runnable_age_seconds", queue="default") == 0
    assert value(found, "sqlq_jobs_enqueued_total") == Job.objects.order_by("-id")[0].pk

    # The worker's own counts, as its last report left them in its row.
    w = {"queue": "default", "worker": "metrics-worker"}
    completed = Job.objects.completed().filter(locked_by="metrics-worker").count()
    assert completed == 3 == worker.jobs_done
    assert value(found, "sqlq_jobs_completed_total", **w) == completed
    # Both boom jobs failed for good; the one with two attempts was retried once first.
    assert Job.objects.failed().count() == 2
    assert value(found, "sqlq_jobs_failed_total", **w) == 2
    assert value(found, "sqlq_jobs_retried_total", **w) == 1
    attempts = 3 + 1 + 2  # the retried job ran again within the burst (no backoff)
    assert value(found, "sqlq_job_run_seconds_count", **w) == attempts
    assert value(found, "sqlq_job_run_seconds_bucket", le="+Inf", **w) == attempts
    assert value(found, "sqlq_job_pickup_seconds_count", **w) == attempts
    assert value(found, "sqlq_job_run_seconds_sum", **w) >= 0
    # The worker stopped (burst): it no longer counts as live.
    assert value(found, "sqlq_workers") == 0
    assert value(found, "sqlq_queue_workers", queue="default") == 0


def test_a_worker_id_used_again_starts_its_counts_again() -> None:
    enqueue("tests.noop", {})
    run_burst(worker_id="again")
    assert WorkerProcess.objects.get(worker_id="again").stats["queues"]["default"]["completed"]
    WorkerProcess.objects.register("again", queues=["default"], concurrency=1)
    assert WorkerProcess.objects.get(worker_id="again").stats == {}


@override_settings(SQLQ=SQLQ)
def test_a_running_worker_reports_its_counts_at_each_heartbeat(spawn_worker: Any) -> None:
    """A real worker process: its counts reach the view while it runs, not only at stop."""
    for n in range(5):
        enqueue("tests.noop", {"n": n}, queue="emails")
    worker = spawn_worker(
        "--queue", "emails", "--worker-id", "live-one", env={"SQLQ_TEST_LEASE_SECONDS": "3"}
    )
    worker.wait_ready()
    labels = {"queue": "emails", "worker": "live-one"}

    def reported() -> dict[Any, float] | None:
        found = samples(scrape(Client(), Authorization=f"Bearer {TOKEN}").content.decode())
        key = ("sqlq_jobs_completed_total", tuple(sorted(labels.items())))
        return found if found.get(key) == 5 else None

    found = wait_for(reported, timeout=30)
    assert value(found, "sqlq_workers") == 1
    assert value(found, "sqlq_queue_workers", queue="emails") == 1
    assert value(found, "sqlq_job_pickup_seconds_count", **labels) == 5
    assert value(found, "sqlq_jobs", queue="emails", status="pending") == 0
    assert WorkerProcess.objects.get(worker_id="live-one").stopped_at is None


@override_settings(SQLQ=SQLQ)
def test_openmetrics_when_the_scraper_asks_for_it() -> None:
    from prometheus_client.openmetrics.parser import (
        text_string_to_metric_families as openmetrics_families,
    )

    enqueue("tests.noop", {})
    run_burst(worker_id="om")
    accept = "application/openmetrics-text; version=1.0.0,text/plain;version=0.0.4;q=0.5"
    response = scrape(Client(), Authorization=f"Bearer {TOKEN}", Accept=accept)
    assert response["Content-Type"].startswith("application/openmetrics-text")
    text = response.content.decode()
    families = {f.name: f for f in openmetrics_families(text)}  # type: ignore[no-untyped-call]
    [completed] = families["sqlq_jobs_completed"].samples
    assert (completed.name, completed.value) == ("sqlq_jobs_completed_total", 1)
    assert families["sqlq_job_run_seconds"].type == "histogram"


@override_settings(SQLQ=SQLQ)
def test_live_workers_are_counted_per_queue():
    WorkerProcess.objects.register("w1", queues=["emails"], concurrency=1)
    WorkerProcess.objects.register("w2", queues=["*"], concurrency=1)
    WorkerProcess.objects.register("gone", queues=["emails"], concurrency=1)
    WorkerProcess.objects.filter(worker_id="gone").update(
        last_seen_at=timezone.now() - timedelta(minutes=5)
    )
    found = samples(scrape(Client(), Authorization=f"Bearer {TOKEN}").content.decode())
    assert value(found, "sqlq_workers") == 2
    assert value(found, "sqlq_queue_workers", queue="emails") == 2
    assert value(found, "sqlq_queue_workers", queue="reports") == 1


@override_settings(SQLQ=SQLQ)
def test_a_scrape_costs_the_same_queries_on_a_deep_table():
    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert scrape(Client(), Authorization=f"Bearer {TOKEN}").status_code == 200
        return len(captured)

    run_burst(worker_id="w")  # a worker row with stats
    shallow = queries()
    jobs = [Job(type="tests.noop", queue=q) for q in ("default", "emails") for _ in range(500)]
    Job.objects.bulk_create(jobs)
    Job.objects.filter(pk__in=[j.pk for j in jobs[::3]]).update(status=JobStatus.COMPLETED)
    Job.objects.filter(pk__in=[j.pk for j in jobs[1::7]]).update(status=JobStatus.FAILED)
    # Eight, and one more (the running jobs of the workers) while a worker is registered.
    assert queries() == shallow == 8
    WorkerProcess.objects.register("live", queues=["*"], concurrency=1)
    assert queries() == 9


@override_settings(SQLQ=SQLQ)
def test_only_the_token_or_staff_with_the_view_permission_may_scrape():
    assert scrape(Client()).status_code == 403
    assert scrape(Client(), Authorization="Bearer wrong-token-of-some-length").status_code == 403
    assert scrape(Client(), Authorization=TOKEN).status_code == 403  # no scheme
    assert scrape(Client(), Authorization=f"bearer {TOKEN}").status_code == 200
    staff = Client()
    User.objects.create_user("staff", password="pw", is_staff=True)
    staff.login(username="staff", password="pw")
    assert scrape(staff).status_code == 403  # staff, but may not view jobs
    admin = Client()
    User.objects.create_superuser("admin", password="pw")
    admin.login(username="admin", password="pw")
    assert scrape(admin).status_code == 200
    assert Client().post(reverse("django_sqlq:metrics")).status_code == 405


def test_without_a_token_only_staff_may_scrape():
    assert get_settings().METRICS_TOKEN is None
    assert scrape(Client(), Authorization="Bearer ").status_code == 403
    assert scrape(Client(), Authorization="Bearer None").status_code == 403


@pytest.mark.parametrize("token", ["short", "", 1234567890123456789, ["x" * 20]])
def test_a_bad_metrics_token_is_a_configuration_error(token: Any) -> None:
    with (
        override_settings(SQLQ={"METRICS_TOKEN": token}),
        pytest.raises(ConfigurationError, match="METRICS_TOKEN"),
    ):
        get_settings()


@override_settings(SQLQ=SQLQ)
def test_a_worker_row_edited_by_hand_is_skipped_not_a_failed_scrape():
    run_burst(worker_id="good")
    enqueue("tests.noop", {})
    run_burst(worker_id="bad")
    bad = WorkerProcess.objects.get(worker_id="bad")
    bad.stats["queues"]["default"]["run_seconds"]["counts"] = [1, 2]
    bad.save()
    WorkerProcess.objects.create(worker_id="junk", hostname="h", pid=1, stats=["junk"])
    response = scrape(Client(), Authorization=f"Bearer {TOKEN}")
    assert response.status_code == 200
    found = samples(response.content.decode())
    assert ("sqlq_job_run_seconds_count", (("queue", "default"), ("worker", "bad"))) not in found


def test_pickup_latency_reads_both_engines_datetimes():
    now = timezone.now()
    later = time.time()
    assert 9 <= (seconds_between(now - timedelta(seconds=10), later) or 0) < 60
    text = (now - timedelta(seconds=10)).astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
    assert 9 <= (seconds_between(text, later) or 0) < 60
    # A clock behind: never negative.
    assert seconds_between(now + timedelta(hours=1), later) == 0
    assert seconds_between("junk", later) is None
    assert seconds_between(None, later) is None


# -- OpenTelemetry --------------------------------------------------------------------------


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    """A tracer provider of the test's own, whose finished spans stay in memory."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(tracing, "tracer_provider", provider)
    yield exporter
    provider.shutdown()


def test_the_run_span_continues_the_trace_of_the_request_that_enqueued(spans):
    tracer = tracing.tracer_provider.get_tracer("tests")
    with tracer.start_as_current_span("GET /checkout") as request_span:
        job = enqueue("tests.noop", {}, queue="emails")
    request = request_span.get_span_context()
    stored = Job.objects.get(pk=job.pk).trace
    assert stored is not None
    assert f"{request.trace_id:032x}" in json.loads(stored)["traceparent"]

    run_burst(queues=["emails"])
    by_name = {span.name: span for span in spans.get_finished_spans()}
    send, process = by_name["send emails"], by_name["process emails"]
    assert send.kind == SpanKind.PRODUCER
    assert send.parent is not None
    assert send.parent.span_id == request.span_id
    assert process.kind == SpanKind.CONSUMER
    assert process.context.trace_id == request.trace_id
    assert process.parent is not None
    assert process.parent.span_id == send.context.span_id
    assert [link.context.span_id for link in process.links] == [send.context.span_id]
    assert send.attributes is not None
    assert process.attributes is not None
    assert send.attributes["messaging.system"] == "django_sqlq"
    assert send.attributes["messaging.destination.name"] == "emails"
    assert send.attributes["messaging.operation.type"] == "send"
    assert send.attributes["messaging.message.id"] == str(job.pk)
    assert process.attributes["messaging.operation.type"] == "process"
    assert process.attributes["messaging.message.id"] == str(job.pk)
    assert process.attributes["django_sqlq.job.type"] == "tests.noop"
    assert process.attributes["django_sqlq.job.attempt"] == 1
    assert process.status.status_code == StatusCode.UNSET


@pytest.mark.usefixtures("spans")
def test_the_admin_job_page_shows_the_trace_id() -> None:
    with tracing.tracer_provider.get_tracer("tests").start_as_current_span("GET /") as span:
        traced = enqueue("tests.noop", {})
    plain = Job.objects.get(pk=enqueue("tests.noop", {}).pk)
    Job.objects.filter(pk=plain.pk).update(trace=None)
    admin = Client()
    User.objects.create_superuser("admin", password="pw")
    admin.login(username="admin", password="pw")
    page = admin.get(reverse("admin:django_sqlq_job_change", args=[traced.pk]))
    assert f"{span.get_span_context().trace_id:032x}" in page.content.decode()
    assert "trace id" in page.content.decode().lower()
    page = admin.get(reverse("admin:django_sqlq_job_change", args=[plain.pk]))
    assert "trace id" not in page.content.decode().lower()


@pytest.mark.parametrize(
    ("stored", "expected"),
    [
        ('{"traceparent": "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01"}',
         "4bf92f3577b34da6a3ce929d0e0e4736"),
        (None, None), ("junk", None), ("[]", None), ('{"traceparent": 5}', None),
        ('{"traceparent": "00-zz-zz-01"}', None),
        ('{"traceparent": "00-' + "g" * 32 + '-00f067aa0ba902b7-01"}', None),
    ],
)  # fmt: skip
def test_trace_id_reads_only_a_well_formed_traceparent(stored: str | None, expected: Any) -> None:
    assert tracing.trace_id(stored) == expected


def test_a_failed_attempt_is_an_error_span_and_a_bulk_enqueue_one_send(spans):
    from django_sqlq import bulk_enqueue

    jobs = bulk_enqueue("tests.boom", [{"why": "a"}, {"why": "b"}], max_attempts=1)
    run_burst()
    finished = spans.get_finished_spans()
    [send] = [s for s in finished if s.name == "send default"]
    assert send.attributes is not None
    assert send.attributes["messaging.batch.message_count"] == 2
    process = [s for s in finished if s.name == "process default"]
    assert len(process) == 2
    for span in process:
        assert span.parent is not None
        assert span.parent.span_id == send.context.span_id
        assert span.status.status_code == StatusCode.ERROR
        assert "Boom" in (span.status.description or "")
        assert [event.name for event in span.events] == ["exception"]
    assert {j.trace for j in Job.objects.filter(pk__in=[j.pk for j in jobs])} == {
        Job.objects.get(pk=jobs[0].pk).trace
    }


def test_no_trace_is_stored_when_no_span_records():
    # The API alone (no SDK configured in this process): non-recording spans, no context.
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    assert tracing.tracer() is None  # so enqueue() and the worker make no span at all
    job = enqueue("tests.noop", {})
    assert Job.objects.get(pk=job.pk).trace is None
    assert run_burst().jobs_done == 1


def test_an_oversized_trace_context_is_not_stored(spans: InMemorySpanExporter) -> None:
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, TraceState

    state = TraceState([(f"vendor{i}", "x" * 200) for i in range(20)])  # ~4 KB
    parent = SpanContext(
        trace_id=0x1234,
        span_id=0x5678,
        is_remote=True,
        trace_flags=TraceFlags(1),
        trace_state=state,
    )
    with trace.use_span(NonRecordingSpan(parent)):
        job = enqueue("tests.noop", {})
    assert Job.objects.get(pk=job.pk).trace is None
    [send] = spans.get_finished_spans()
    assert send.context.trace_id == 0x1234  # the span itself is made and exported


@pytest.mark.parametrize("junk", ["not json", "[1, 2]", '{"traceparent": "00-zz-zz-01"}'])
def test_a_junk_trace_context_runs_the_job_in_a_new_trace(
    spans: InMemorySpanExporter, junk: str
) -> None:
    job = enqueue("tests.noop", {})
    Job.objects.filter(pk=job.pk).update(trace=junk)
    assert run_burst().jobs_done == 1
    [process] = [s for s in spans.get_finished_spans() if s.name == "process default"]
    assert process.parent is None
    assert process.links == ()


# -- logs -----------------------------------------------------------------------------------


def job_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.getMessage().startswith("Job id=")]


def test_every_log_line_about_a_job_carries_the_job(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="django_sqlq")
    ok = enqueue("tests.noop", {}, queue="emails")
    retried = enqueue("tests.boom", {}, max_attempts=2)
    run_burst(queues=["emails", "default"])
    lost = enqueue("tests.noop", {}, queue="reports")
    ops_for("default").claim(queues=["reports"], worker_id="dead", limit=1, lease_seconds=60)
    Job.objects.filter(pk=lost.pk).update(lease_expires_at=timezone.now() - timedelta(minutes=1))
    Reaper(run_burst(queues=["default"]).context).reap()  # the worker reaps it as it starts

    records = job_records(caplog)
    by_job: dict[int, list[str]] = {}
    for record in records:
        extra = {name: getattr(record, name, None) for name in JOB_FIELDS}
        job = Job.objects.get(pk=int(extra["job_id"] or 0))
        assert extra["job_type"] == job.type, record.getMessage()
        assert extra["job_queue"] == job.queue, record.getMessage()
        assert isinstance(extra["job_attempt"], int), record.getMessage()
        assert f"id={job.pk}" in record.getMessage()
        by_job.setdefault(job.pk, []).append(record.getMessage())
    # enqueued (DEBUG), started (DEBUG), completed (INFO), retried, failed for good, reaped
    assert len(by_job[ok.pk]) == 3
    assert any("retry in" in m for m in by_job[retried.pk])
    assert any("failed for good" in m for m in by_job[retried.pk]), by_job
    assert any("lease expired" in m for m in by_job[lost.pk])
    attempts = [
        r.job_attempt  # type: ignore[attr-defined]
        for r in records
        if r.job_id == retried.pk and "failed" in r.getMessage()  # type: ignore[attr-defined]
    ]
    assert attempts == [1, 2]


def test_a_hook_that_raises_is_logged_with_the_job(caplog: pytest.LogCaptureFixture) -> None:
    from django_sqlq.jobcontext import JobContext, call_hook

    def hook(context: JobContext) -> None:
        raise RuntimeError(f"hook of job {context.job_id}")

    context = JobContext(
        job_id=7, type="t", queue="emails", attempt=2, max_attempts=5, worker_id="w"
    )
    call_hook("w", hook, context)
    [record] = [r for r in caplog.records if "hook raised" in r.getMessage()]
    assert {name: getattr(record, name) for name in JOB_FIELDS} == {
        "job_id": 7,
        "job_type": "t",
        "job_queue": "emails",
        "job_attempt": 2,
    }


def test_a_json_formatter_gets_the_job_fields(caplog: pytest.LogCaptureFixture) -> None:
    """The how-to's formatter: the extras are plain attributes of the record."""

    class JsonFormatter(logging.Formatter):
        def format(self, record: logging.LogRecord) -> str:
            data = {"message": record.getMessage()}
            data.update({k: getattr(record, k) for k in JOB_FIELDS if hasattr(record, k)})
            return json.dumps(data)

    caplog.set_level(logging.INFO, logger="django_sqlq.worker.jobs")
    job = enqueue("tests.noop", {})
    run_burst()
    [line] = [JsonFormatter().format(r) for r in job_records(caplog)]
    assert json.loads(line) == {
        "message": json.loads(line)["message"],
        "job_id": job.pk,
        "job_type": "tests.noop",
        "job_queue": "default",
        "job_attempt": 1,
    }


# -- without the optional libraries ---------------------------------------------------------

WITHOUT_LIBRARIES = textwrap.dedent(
    """
    import sys
    # What a missing package does to an import: ImportError.
    for name in ("prometheus_client", "opentelemetry"):
        sys.modules[name] = None
    import django
    django.setup()
    from django.test import Client
    from django.test.utils import override_settings
    from django_sqlq import enqueue, metrics, tracing
    from django_sqlq.models import Job
    from django_sqlq.worker import Worker
    assert not tracing.ENABLED and not metrics.AVAILABLE
    job = enqueue("tests.noop", {})
    assert Worker(worker_id="plain").run(burst=True, install_signal_handlers=False) == 1
    job.refresh_from_db()
    assert job.status == "completed" and job.trace is None, job
    sqlq = {**__import__("tests.settings", fromlist=["SQLQ"]).SQLQ, "METRICS_TOKEN": "t" * 20}
    with override_settings(SQLQ=sqlq):
        response = Client().get("/sqlq/metrics", headers={"Authorization": "Bearer " + "t" * 20})
    assert response.status_code == 501, response.status_code
    assert b"django-sqlq[prometheus]" in response.content
    assert Client().get("/sqlq/metrics").status_code == 403
    print("WITHOUT LIBRARIES OK")
    """
)


def test_everything_works_without_prometheus_client_and_opentelemetry(
    worker_env: dict[str, str],
) -> None:
    result = subprocess.run(
        [sys.executable, "-c", WITHOUT_LIBRARIES],
        cwd=ROOT,
        env=worker_env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert "WITHOUT LIBRARIES OK" in result.stdout, result.stdout + result.stderr
