"""Shapes production sites load the queue with, found by adversarial testing (issue 10's
claim, scheduled status and worker): each test is a defect that was found and fixed."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from django_sqlq import enqueue, lifecycle
from django_sqlq.models import Job, JobStatus
from tests.conftest import WorkerProcess, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def _idle_worker(spawn_worker: Callable[..., WorkerProcess]) -> WorkerProcess:
    # A poll interval far beyond the deadlines below: only a wake-up can start the job in time.
    worker = spawn_worker("--poll-interval", "600", "-v", "3")
    worker.wait_ready()
    return worker


def test_run_now_wakes_an_idle_worker(spawn_worker):
    """The admin's "run now" on a job scheduled for later starts it at once, like an enqueue:
    on PostgreSQL it used to wait for the idle worker's next poll."""
    job = enqueue("tests.noop", delay=3600)
    _idle_worker(spawn_worker)
    assert lifecycle.run_now([job.pk]).changed == 1
    wait_for(lambda: Job.objects.get(pk=job.pk).status == JobStatus.COMPLETED, timeout=60)


def test_retry_now_wakes_an_idle_worker(spawn_worker):
    """The admin's "retry" of a failed job starts it at once (same defect as run now)."""
    job = enqueue("tests.boom", max_attempts=1)
    worker = _idle_worker(spawn_worker)
    wait_for(lambda: Job.objects.get(pk=job.pk).status == JobStatus.FAILED)
    # After its summary line, the worker has nothing left to wake up for.
    wait_for(lambda: "0 completed, 1 failed" in worker.output())
    Job.objects.filter(pk=job.pk).update(type="tests.noop")  # so the retry succeeds
    assert lifecycle.retry_now([job.pk]).changed == 1
    wait_for(lambda: Job.objects.get(pk=job.pk).status == JobStatus.COMPLETED, timeout=60)


def test_a_retry_in_backoff_starts_when_due_on_an_idle_worker(spawn_worker):
    """A failed attempt retried after a backoff is a scheduled job; the worker that wrote it
    wakes when it comes due. On PostgreSQL it used to sleep until its next poll (nothing
    NOTIFYs a retry), so each retry waited the whole poll interval."""
    worker = spawn_worker(
        "--poll-interval", "600", env={"SQLQ_TEST_RETRY_BACKOFF_BASE": "0.5"}
    )  # fmt: skip
    worker.wait_ready()
    job = enqueue("tests.boom", max_attempts=3)
    wait_for(lambda: Job.objects.get(pk=job.pk).status == JobStatus.FAILED, timeout=60)
    assert Job.objects.get(pk=job.pk).attempts == 3
    assert worker.output().count("failed (tests.testapp.jobs.Boom") == 2  # two retries


def test_a_worker_serving_every_queue_runs_the_jobs_of_hundreds_of_queues(spawn_worker):
    """A queue per tenant: 600 queues holding a job each, one worker serving them all. On
    SQLite the claim glued one arm per queue and SQLite refuses more than 500 ("too many
    terms in compound SELECT"): the worker retried that claim forever and ran nothing."""
    from django.db.models import CharField, Value
    from django.db.models.functions import Cast, Concat

    from django_sqlq import bulk_enqueue

    bulk_enqueue("tests.noop", [{}] * 600)
    # (The tasks backend accepts any queue name when its QUEUES is empty.)
    Job.objects.update(queue=Concat(Value("tenant-"), Cast("id", CharField())))
    assert Job.objects.values("queue").distinct().count() == 600
    worker = spawn_worker("--queue-name", "*", "--concurrency", "4")
    worker.wait_ready()
    wait_for(lambda: Job.objects.filter(status=JobStatus.COMPLETED).count() == 600, timeout=60)
    assert "database error" not in worker.output()
