"""Scenario 6: PostgreSQL connections cut under the workers.

- ``pg_terminate_backend`` on a worker's connection in the middle of a claim, and in the
  middle of writing a completion (each made to wait on a lock the test holds, so that the
  cut lands exactly there), and on every worker connection at random during a drain: the
  workers log it, reconnect with backoff and finish; no worker exits; no job is failed
  because the database was unreachable.
- A dead LISTEN connection is noticed and re-opened; a job whose notification never came is
  picked up by polling, within the poll interval.
- ``SQLQ_FAULTS_PG_RESTART=1``: a full server restart in the middle of a drain
  (``SQLQ_FAULTS_PG_RESTART_CMD`` restarts it; default: the local cluster's pg_ctlcluster).

Only the test database's own sessions are ever terminated: other test runs share the server.
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.db import connection, transaction

from django_sqlq import bulk_enqueue, enqueue
from django_sqlq.models import Job, JobStatus
from tests.faults.conftest import (
    backends,
    drain_through_a_restart,
    errors_in,
    runs,
    terminate,
    until,
)

pytestmark = [pytest.mark.faults, pytest.mark.django_db(transaction=True)]


def record_jobs(tmp_path: Path, count: int, **payload: Any) -> list[Job]:
    path = str(tmp_path / "ran")
    return bulk_enqueue("faults.record", [{"n": n, "path": path, **payload} for n in range(count)])


@pytest.mark.usefixtures("postgresql")
def test_connection_cut_during_a_claim(tmp_path, spawn_worker, report):
    worker = spawn_worker("--worker-id", "claimer")
    worker.wait_ready()
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("LOCK TABLE sqlq_job IN SHARE MODE")  # writers wait
        claims = until(
            lambda: backends("UPDATE sqlq_job SET status = 'processing'%", waiting_for_lock=True),
            30,
            "the worker's claim waiting on the lock",
        )
        assert terminate([b["pid"] for b in claims]) == 1
        until(lambda: "database error during claim" in worker.output(), 30, "the worker noticed")
    jobs = record_jobs(tmp_path, 20)
    until(lambda: Job.objects.completed().count() == len(jobs), 60, "jobs run after the cut")
    assert worker.proc.poll() is None
    assert {n: len(p) for n, p in runs(tmp_path / "ran").items()} == dict.fromkeys(range(20), 1)
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    assert errors_in(worker.output()) == []
    line = next(x for x in worker.output().splitlines() if "during claim" in x)
    report(worker_log=line.split(" WARNING ")[-1][:200])


@pytest.mark.usefixtures("postgresql")
def test_connection_cut_during_a_completion(tmp_path, spawn_worker, report):
    started, release, log = tmp_path / "started", tmp_path / "release", tmp_path / "ran"
    job = enqueue(
        "faults.block",
        {"n": 1, "started": str(started), "release": str(release), "path": str(log)},
    )
    worker = spawn_worker("--worker-id", "finisher")
    until(lambda: runs(started), 30, "the job started")
    with transaction.atomic():
        Job.objects.select_for_update().get(pk=job.pk)  # the completion will wait on this row
        release.touch()
        writes = until(
            lambda: backends(
                "UPDATE sqlq_job SET status = CASE %'completed'%", waiting_for_lock=True
            ),
            30,
            "the worker's completion waiting on the row lock",
        )
        assert terminate([b["pid"] for b in writes]) == 1
        until(lambda: "database error during record outcomes" in worker.output(), 30, "noticed")
    until(lambda: Job.objects.get(pk=job.pk).status == JobStatus.COMPLETED, 60, "completed")
    job.refresh_from_db()
    assert (job.attempts, job.result, job.errors) == (1, worker.pid, [])
    assert runs(log) == {1: [worker.pid]}
    assert worker.proc.poll() is None
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    assert errors_in(worker.output()) == []
    line = next(x for x in worker.output().splitlines() if "during record outcomes" in x)
    report(worker_log=line.split(" WARNING ")[-1][:200])


@pytest.mark.usefixtures("postgresql")
def test_connections_cut_at_random_during_a_drain(tmp_path, pool, report):
    jobs = record_jobs(tmp_path, 2000, before=0.005, after=0.005)
    failing = bulk_enqueue("faults.raise", [{"message": "handler says no"}] * 20, max_attempts=2)
    workers = pool(2, "--concurrency", "2")
    # Cut connections of running workers: a worker whose start-up check loses its
    # connection exits with one line for its process manager to restart it (by design).
    workers.wait_ready()
    rng = random.Random(int(os.environ.get("SQLQ_FAULTS_SEED", "0")) or None)
    cuts = 0
    started = time.monotonic()

    def drained() -> bool:
        return Job.objects.exclude(status__in=["completed", "failed"]).count() == 0

    while not drained() and time.monotonic() - started < 20:
        victims = [b["pid"] for b in backends()]
        if victims:
            cuts += terminate(rng.sample(victims, max(1, len(victims) // 2)))
        assert all(w.proc.poll() is None for w in workers.workers), workers.output()
        time.sleep(rng.uniform(0.05, 0.3))
    until(drained, 120, "the queue drained after the cuts")
    assert all(w.proc.poll() is None for w in workers.workers), "a worker exited"
    assert Job.objects.completed().count() == len(jobs)
    # Only the handler's own error failed jobs, never the database's.
    for job in Job.objects.filter(pk__in=[j.pk for j in failing]):
        assert (job.status, job.attempts) == (JobStatus.FAILED, 2)
        assert {e["exception_class"] for e in job.errors} == {"ValueError"}
    assert {n: len(p) for n, p in runs(tmp_path / "ran").items()} == dict.fromkeys(
        range(len(jobs)), 1
    )
    assert workers.stop() == [0, 0]
    output = workers.output()
    assert errors_in(output, allowed=("type=faults.raise failed for good",)) == []
    report(
        jobs=len(jobs) + len(failing),
        connections_terminated=cuts,
        seconds=round(time.monotonic() - started, 1),
        worker_warnings=sum(" WARNING " in line for line in output.splitlines()),
    )


def pickup_seconds(make_job: Callable[[], Job], timeout: float = 60) -> float:
    # The pickup time is measured and reported, not asserted: the timeout only fails a job
    # never picked up (a quiet machine takes well under the poll interval).
    enqueued = time.monotonic()
    job = make_job()
    until(lambda: Job.objects.get(pk=job.pk).status == JobStatus.COMPLETED, timeout, "pickup")
    return time.monotonic() - enqueued


@pytest.mark.usefixtures("postgresql")
def test_dead_listen_connection_is_noticed_and_reopened(spawn_worker, report):
    worker = spawn_worker("--poll-interval", "3")
    worker.wait_ready()
    listeners = until(lambda: backends("LISTEN %"), 30, "the LISTEN connection")
    notified = pickup_seconds(lambda: enqueue("tests.noop"))
    assert terminate([b["pid"] for b in listeners]) == 1
    until(lambda: "LISTEN connection lost" in worker.output(), 30, "the lost LISTEN noticed")
    after_cut = pickup_seconds(lambda: enqueue("tests.noop"))
    until(lambda: "LISTEN connection re-established" in worker.output(), 30, "LISTEN again")
    until(lambda: backends("LISTEN %"), 30, "the new LISTEN connection")
    renotified = pickup_seconds(lambda: enqueue("tests.noop"))
    assert worker.proc.poll() is None
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    report(
        poll_interval=3.0,
        pickup_seconds_notified=round(notified, 3),
        pickup_seconds_just_after_cut=round(after_cut, 3),
        pickup_seconds_after_reconnect=round(renotified, 3),
    )


@pytest.mark.usefixtures("postgresql")
def test_lost_notification_only_delays_pickup_to_the_poll_interval(spawn_worker, report):
    worker = spawn_worker("--poll-interval", "1")
    worker.wait_ready()
    until(lambda: backends("LISTEN %"), 30, "the LISTEN connection")
    notified = [pickup_seconds(lambda: enqueue("tests.noop")) for _ in range(3)]
    # A row written without NOTIFY (as if the notification were lost): found by polling.
    silent = [
        pickup_seconds(lambda: Job.objects.create(type="tests.noop", payload={})) for _ in range(3)
    ]
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    report(
        poll_interval=1.0,
        pickup_seconds_with_notify=[round(t, 3) for t in notified],
        pickup_seconds_without_notify=[round(t, 3) for t in silent],
    )


@pytest.mark.server_restart
@pytest.mark.skipif(
    os.environ.get("SQLQ_FAULTS_PG_RESTART") != "1",
    reason="restarts the PostgreSQL server: set SQLQ_FAULTS_PG_RESTART=1 (.ci/run does)",
)
@pytest.mark.usefixtures("postgresql")
def test_server_restart_mid_drain(tmp_path, pool, report):
    command = os.environ.get("SQLQ_FAULTS_PG_RESTART_CMD") or (
        "pg_ctlcluster --skip-systemctl-redirect "
        f"{' '.join(sorted(os.listdir('/etc/postgresql')))} main restart"
    )
    drain_through_a_restart(tmp_path, pool, report, command, drain_timeout=90)
