"""Scenario 4: stopping a worker.

- SIGTERM with jobs running and jobs claimed but not started: the running ones finish, the
  others are back in ``pending`` at once (attempt not counted, no lease to wait for), exit 0.
- While it finishes its running jobs after SIGTERM, the worker keeps renewing their leases,
  so no other worker takes them over.
- SIGTERM while idle: a prompt exit (the time is measured and reported, not asserted).
- A second SIGTERM (or SIGINT): a prompt exit (status 1) that records each interrupted attempt
  at once (retried or failed by its attempts), fenced: a job taken over meanwhile is left alone.
"""

from __future__ import annotations

import re
import signal
import statistics
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import transaction

from django_sqlq import bulk_enqueue, enqueue
from django_sqlq.models import Job, JobStatus
from tests.faults.conftest import errors_in, runs, seconds_to_exit, until

pytestmark = [pytest.mark.faults, pytest.mark.django_db(transaction=True)]


def block(n: int, tmp_path: Path, **options: Any) -> Job:
    payload = {
        "n": n,
        "started": str(tmp_path / "started"),
        "release": str(tmp_path / "release"),
        "path": str(tmp_path / "ran"),
        # Released by the test, not by the handler's own limit (30 s by default), however
        # slowly the machine gets there.
        "max_seconds": 120,
    }
    return enqueue("faults.block", payload, **options)


def test_sigterm_finishes_running_jobs_and_gives_back_claimed_ones_at_once(
    tmp_path, spawn_worker, report
):
    worker = spawn_worker("--concurrency", "2")
    worker.wait_ready()
    # Fast jobs first: the worker learns they are fast and claims ahead (prefetch).
    bulk_enqueue("tests.noop", [{}] * 200)
    until(lambda: Job.objects.completed().count() == 200, 30, "warm-up jobs done")
    with transaction.atomic():  # one commit, so that one claim takes them all
        running = [block(n, tmp_path, priority=10) for n in (1, 2)]
        waiting = bulk_enqueue(
            "faults.record", [{"n": n, "path": str(tmp_path / "ran")} for n in range(10, 40)]
        )
    waiting_ids = [job.pk for job in waiting]
    until(lambda: len(runs(tmp_path / "started")) == 2, 30, "both slow jobs started")
    # How many it claims ahead is its prefetch's choice (what it learned of the jobs' speed:
    # under a loaded machine, fewer): at least one, held and not started.
    until(
        lambda: Job.objects.filter(pk__in=waiting_ids, status=JobStatus.PROCESSING).exists(),
        30,
        "other jobs claimed ahead (in the worker's hands, not started)",
    )

    signalled = time.monotonic()
    worker.signal(signal.SIGTERM)
    until(
        lambda: (
            Job.objects.filter(
                pk__in=waiting_ids, status=JobStatus.PENDING, attempts=0, locked_by=""
            ).count()
            == 30
        ),
        30,
        "claimed-but-unstarted jobs back in pending",
    )
    given_back = time.monotonic() - signalled
    # ... while the running jobs still run: that was no lease running out.
    assert Job.objects.filter(pk__in=[j.pk for j in running], status="processing").count() == 2
    assert worker.proc.poll() is None
    (tmp_path / "release").touch()
    assert worker.wait(30) == 0, worker.output()
    finished = Job.objects.filter(pk__in=[j.pk for j in running])
    assert set(finished.values_list("status", "attempts")) == {(JobStatus.COMPLETED, 1)}
    assert runs(tmp_path / "ran") == {1: [worker.pid], 2: [worker.pid]}
    gave_back = re.search(r"gave back (\d+) unstarted job\(s\)", worker.output())
    assert gave_back is not None, worker.output()
    assert 1 <= int(gave_back[1]) <= 30, worker.output()
    report(given_back_after_sigterm_seconds=round(given_back, 3))


def test_leases_are_renewed_while_running_jobs_finish_after_sigterm(tmp_path, spawn_worker):
    env = {"SQLQ_TEST_LEASE_SECONDS": "1"}
    job = block(1, tmp_path, max_attempts=1)
    worker = spawn_worker("--worker-id", "stopping", env=env)
    until(lambda: runs(tmp_path / "started"), 30, "the job started")
    other = spawn_worker("--worker-id", "other", env=env)
    other.wait_ready()
    worker.signal(signal.SIGTERM)
    until(lambda: "finishing running jobs" in worker.output(), 30, "SIGTERM received")
    job.refresh_from_db()
    first_expiry = job.lease_expires_at
    assert first_expiry is not None

    def renewed_past(seconds: float) -> bool:
        job.refresh_from_db()
        assert job.lease_expires_at is not None
        return job.lease_expires_at - first_expiry >= timedelta(seconds=seconds)

    # Three leases' worth of renewals after the signal, and the job still its worker's.
    until(lambda: renewed_past(3), 60, "the lease renewed after SIGTERM")
    assert (job.status, job.locked_by, job.attempts) == (JobStatus.PROCESSING, "stopping", 1)
    (tmp_path / "release").touch()
    assert worker.wait(30) == 0
    job.refresh_from_db()
    assert (job.status, job.attempts, job.errors) == (JobStatus.COMPLETED, 1, [])
    assert runs(tmp_path / "started") == {1: [worker.pid]}
    other.signal(signal.SIGTERM)
    assert other.wait() == 0
    assert "Lease expired" not in other.output()


def test_sigterm_while_idle_exits_promptly(spawn_worker, report):
    times = []
    for _ in range(5):
        worker = spawn_worker()
        worker.wait_ready()
        signalled = time.monotonic()
        worker.signal(signal.SIGTERM)
        code, seconds = seconds_to_exit(worker, signalled, timeout=30)
        assert code == 0, worker.output()
        times.append(seconds)
        assert errors_in(worker.output()) == []
    report(
        idle_sigterm_to_exit_seconds=[round(t, 3) for t in times],
        median=round(statistics.median(times), 3),
    )


def test_second_sigterm_exits_at_once_and_records_the_interrupted_attempt(
    tmp_path, spawn_worker, report
):
    # A long lease: what the test sees happens at the forced stop, not when a lease runs out.
    env = {"SQLQ_TEST_LEASE_SECONDS": "60"}
    job = block(1, tmp_path, max_attempts=3)
    queued = enqueue("faults.record", {"n": 2, "path": str(tmp_path / "ran")})
    worker = spawn_worker("--worker-id", "forced", env=env)
    until(lambda: runs(tmp_path / "started"), 30, "the job started")
    worker.signal(signal.SIGTERM)
    until(lambda: "finishing running jobs" in worker.output(), 30, "first SIGTERM received")
    signalled = time.monotonic()
    worker.signal(signal.SIGTERM)
    # At once: the job it interrupts would block for 120 s (the bound only fails the test).
    code, forced_exit = seconds_to_exit(worker, signalled, timeout=30)
    assert code == 1, worker.output()
    assert "forced to stop: 1 running job(s) interrupted, 1 recorded at once" in worker.output()
    assert "Traceback" not in worker.output()
    # The interrupted attempt is recorded at once, with attempts left: pending again (the
    # test settings' backoff is 0), its error saying what happened.
    job.refresh_from_db()
    assert (job.status, job.attempts, job.locked_by) == (JobStatus.PENDING, 1, "")
    assert job.lease_expires_at is None
    [entry] = job.errors
    assert entry["exception_class"] == "django_sqlq.exceptions.JobInterruptedError"
    assert entry["message"] == "interrupted by a forced stop of worker forced"
    assert (entry["attempt"], entry["worker_id"]) == (1, "forced")
    assert "interrupted by a forced stop of worker forced" in job.last_error
    assert Job.objects.get(pk=queued.pk).status == JobStatus.PENDING
    # Another worker runs it again at once: no lease to wait for.
    (tmp_path / "release").touch()
    rescuer = spawn_worker("--worker-id", "rescuer", env=env)
    until(lambda: Job.objects.completed().count() == 2, 30, "the rescuer finished both jobs")
    job.refresh_from_db()
    assert (job.attempts, job.locked_by) == (2, "rescuer")
    assert runs(tmp_path / "ran") == {1: [rescuer.pid], 2: [rescuer.pid]}
    rescuer.signal(signal.SIGTERM)
    assert rescuer.wait() == 0
    report(second_sigterm_to_exit_seconds=round(forced_exit, 3))


def test_a_forced_stop_fails_a_job_whose_attempts_are_spent(tmp_path, spawn_worker):
    env = {"SQLQ_TEST_LEASE_SECONDS": "60"}
    job = block(1, tmp_path, max_attempts=1)
    worker = spawn_worker("--worker-id", "forced", "--concurrency", "2", env=env)
    until(lambda: runs(tmp_path / "started"), 30, "the job started")
    worker.signal(signal.SIGINT)
    until(lambda: "finishing running jobs" in worker.output(), 30, "first SIGINT received")
    worker.signal(signal.SIGINT)
    assert worker.wait(30) == 1, worker.output()
    job.refresh_from_db()
    assert (job.status, job.attempts) == (JobStatus.FAILED, 1)
    assert job.completed_at is not None
    assert job.errors[-1]["message"] == "interrupted by a forced stop of worker forced"


def test_a_forced_stop_does_not_overwrite_a_job_another_worker_took_over(tmp_path, spawn_worker):
    # The fence: the stopping worker's lease ran out and a reaper gave the job to another
    # attempt meanwhile; the forced stop must not record anything over it.
    env = {"SQLQ_TEST_LEASE_SECONDS": "60"}
    job = block(1, tmp_path, max_attempts=3)
    worker = spawn_worker("--worker-id", "zombie", env=env)
    until(lambda: runs(tmp_path / "started"), 30, "the job started")
    # As if its lease had expired and another worker had claimed the job (attempt 2).
    Job.objects.filter(pk=job.pk).update(locked_by="other", attempts=2)
    worker.signal(signal.SIGTERM)
    until(lambda: "finishing running jobs" in worker.output(), 30, "first SIGTERM received")
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 1, worker.output()
    assert "1 running job(s) interrupted, 0 recorded at once" in worker.output()
    job.refresh_from_db()
    assert (job.status, job.locked_by, job.attempts, job.errors) == (
        JobStatus.PROCESSING,
        "other",
        2,
        [],
    )
