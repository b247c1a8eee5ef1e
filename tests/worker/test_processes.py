"""Real sqlq_worker processes: many at once, killed, and stopped with signals."""

from __future__ import annotations

import json
import signal
from collections import Counter
from pathlib import Path

import pytest
from django.conf import settings
from django.test import override_settings

from django_sqlq import bulk_enqueue, enqueue
from django_sqlq.models import Job, JobStatus
from tests.conftest import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def ran(path: Path) -> Counter[int]:
    if not path.exists():
        return Counter()
    return Counter(int(line.split()[0]) for line in path.read_text().splitlines() if line)


def test_four_workers_drain_2000_jobs_each_exactly_once(tmp_path, spawn_worker):
    log = tmp_path / "ran"
    workers = [spawn_worker("--concurrency", "2", "-v", "0") for _ in range(4)]
    for worker in workers:
        worker.wait_ready()
    jobs = bulk_enqueue("tests.record", [{"n": i, "path": str(log)} for i in range(2000)])
    assert len(jobs) == 2000
    wait_for(lambda: Job.objects.completed().count() == 2000, timeout=240)
    for worker in workers:
        worker.signal(signal.SIGTERM)
    for worker in workers:
        assert worker.wait(timeout=60) == 0, worker.output()
    assert not Job.objects.exclude(status=JobStatus.COMPLETED).exists()
    counts = ran(log)
    assert set(counts) == set(range(2000))
    assert max(counts.values()) == 1
    # The workers shared the work.
    pids = {line.split()[1] for line in log.read_text().splitlines()}
    assert len(pids) > 1


def test_kill_9_mid_job_is_retried_by_another_worker_after_the_lease(tmp_path, spawn_worker):
    started, log = tmp_path / "started", tmp_path / "ran"
    job = enqueue(
        "tests.sleep_then_record",
        {"n": 1, "started": str(started), "path": str(log), "max_seconds": 1.0},
        max_attempts=3,
    )
    env = {"SQLQ_TEST_LEASE_SECONDS": "1.5"}
    victim = spawn_worker("--worker-id", "victim", env=env)
    wait_for(started.exists)
    victim.signal(signal.SIGKILL)
    victim.wait()
    started.unlink()
    job.refresh_from_db()
    assert (job.status, job.locked_by) == (JobStatus.PROCESSING, "victim")
    rescuer = spawn_worker("--worker-id", "rescuer", env=env)
    rescuer.wait_ready()

    def completed() -> bool:
        job.refresh_from_db()
        return job.status == JobStatus.COMPLETED

    wait_for(completed, timeout=60)
    assert job.attempts == 2
    assert job.locked_by == "rescuer"
    assert job.errors[0]["worker_id"] == "victim"
    assert "Lease expired: worker victim" in job.errors[0]["message"] or job.last_error
    assert ran(log) == Counter({1: 1})


def test_sigterm_during_a_job_lets_it_finish_and_exits_0(tmp_path, spawn_worker):
    started, release, log = tmp_path / "started", tmp_path / "release", tmp_path / "ran"
    job = enqueue(
        "tests.sleep_then_record",
        {"n": 7, "started": str(started), "release": str(release), "path": str(log)},
    )
    worker = spawn_worker()
    wait_for(started.exists)
    worker.signal(signal.SIGTERM)
    # The job is still running: let it finish now.
    release.touch()
    assert worker.wait(timeout=30) == 0, worker.output()
    job.refresh_from_db()
    assert job.status == JobStatus.COMPLETED
    assert ran(log) == Counter({7: 1})
    assert "received SIGTERM" in worker.output()


def test_sigterm_gives_back_claimed_but_unstarted_jobs_at_once(tmp_path, spawn_worker):
    started, release, log = tmp_path / "started", tmp_path / "release", tmp_path / "ran"
    running = enqueue(
        "tests.sleep_then_record",
        {"n": 1, "started": str(started), "release": str(release), "path": str(log)},
        priority=10,
    )
    waiting = enqueue("tests.noop")
    worker = spawn_worker()
    wait_for(started.exists)
    worker.signal(signal.SIGTERM)
    # The stop is set by a thread the signal starts: released before it, the running job
    # could end and the waiting one be claimed first (seen on a loaded machine).
    wait_for(lambda: "received SIGTERM" in worker.output())
    release.touch()
    assert worker.wait(timeout=30) == 0, worker.output()
    assert Job.objects.get(pk=running.pk).status == JobStatus.COMPLETED
    waiting.refresh_from_db()
    # Never claimed (concurrency 1, the slot was busy) or given back: pending, attempt uncounted.
    assert (waiting.status, waiting.attempts, waiting.locked_by) == (JobStatus.PENDING, 0, "")


def test_processes_supervisor_restarts_a_dead_child(tmp_path, spawn_worker):
    import os

    log = tmp_path / "ran"
    supervisor = spawn_worker("--processes", "2", "--worker-id", "sup", "-v", "1")
    wait_for(lambda: all(f"sqlq_worker sup-{i} ready" in supervisor.output() for i in (0, 1)))
    # "Supervisor started worker process <index> (pid <pid>)"
    children = {
        int(line.rsplit("pid ", 1)[1].rstrip(")")): line.split("worker process ")[1].split()[0]
        for line in supervisor.output().splitlines()
        if "started worker process" in line
    }
    assert len(children) == 2
    victim = sorted(children)[0]
    os.kill(victim, signal.SIGKILL)
    wait_for(lambda: "died with exit code -9" in supervisor.output())
    wait_for(lambda: supervisor.output().count("started worker process") >= 3)
    # The restarted child serves again: its second readiness line.
    ready_line = f"sqlq_worker sup-{children[victim]} ready"
    wait_for(lambda: supervisor.output().count(ready_line) >= 2)
    jobs = bulk_enqueue("tests.record", [{"n": i, "path": str(log)} for i in range(200)])
    wait_for(lambda: Job.objects.completed().count() == len(jobs), timeout=60)
    supervisor.signal(signal.SIGTERM)
    assert supervisor.wait(timeout=60) == 0, supervisor.output()
    assert set(ran(log)) == set(range(200))
    assert max(ran(log).values()) == 1


def test_processes_supervisor_stopped_while_its_children_start_exits_0(spawn_worker):
    supervisor = spawn_worker("--processes", "2", "-v", "1")
    # As soon as the children are forked, before they are ready to handle signals themselves.
    wait_for(lambda: supervisor.output().count("started worker process") >= 2, interval=0.001)
    supervisor.signal(signal.SIGTERM)
    assert supervisor.wait(timeout=60) == 0, supervisor.output()
    assert "died" not in supervisor.output()


def test_processes_with_max_jobs_exit_once_the_children_are_done(spawn_worker):
    jobs = bulk_enqueue("tests.noop", [{} for _ in range(10)])
    supervisor = spawn_worker("--processes", "2", "--max-jobs", "2", "-v", "1")
    # Each child exits 0 after its 2 jobs: finished, not dead; the supervisor exits with them.
    assert supervisor.wait(timeout=60) == 0, supervisor.output()
    assert "restarting" not in supervisor.output()
    assert Job.objects.filter(pk__in=[j.pk for j in jobs]).completed().count() == 4


def test_processes_a_second_sigterm_forces_the_children_out(tmp_path, spawn_worker):
    release = tmp_path / "release"  # never created: the jobs run until forced
    started = tmp_path / "started"
    supervisor = spawn_worker("--processes", "2", "-v", "1")
    wait_for(lambda: supervisor.output().count(" ready") >= 2)
    for n in range(2):
        enqueue("faults.block", {"n": n, "started": str(started), "release": str(release),
                                 "path": str(tmp_path / "ran"), "max_seconds": 60})  # fmt: skip
    wait_for(lambda: started.exists() and len(started.read_text().splitlines()) == 2)
    supervisor.signal(signal.SIGTERM)
    wait_for(lambda: "finishing running jobs" in supervisor.output())
    supervisor.signal(signal.SIGTERM)
    assert supervisor.wait(timeout=30) == 1, supervisor.output()
    assert "forced to stop" in supervisor.output()
    assert "restarting" not in supervisor.output()


def test_stop_signals_never_run_the_stop_in_the_signal_handler():
    import threading

    from django_sqlq.worker import signals as stop_signals

    seen: list[tuple[str, int, int]] = []
    done = threading.Event()

    def on_stop(signum: int, count: int) -> None:
        seen.append((threading.current_thread().name, signum, count))
        done.set()

    def on_force(signum: int) -> None:
        seen.append((threading.current_thread().name, signum, -1))

    handle = stop_signals.handler(on_stop, on_force)
    handle(signal.SIGTERM, None)
    assert done.wait(10)
    handle(signal.SIGINT, None)
    assert seen == [("sqlq-stop", signal.SIGTERM, 1),
                    (threading.current_thread().name, signal.SIGINT, -1)]  # fmt: skip


def test_a_job_that_comes_due_while_the_worker_sleeps_starts_without_a_poll(spawn_worker):
    """A scheduled job waits out of the claim's index; the idle worker wakes when it is due
    (not at its next poll: the poll interval here is a minute) and runs it."""
    worker = spawn_worker("--poll-interval", "60", "-v", "0")
    worker.wait_ready()
    job = enqueue("tests.noop", delay=1.5)
    assert Job.objects.get(pk=job.pk).status == JobStatus.SCHEDULED
    wait_for(lambda: Job.objects.get(pk=job.pk).status == JobStatus.COMPLETED, timeout=30)
    done = Job.objects.get(pk=job.pk)
    assert done.started_at is not None
    assert done.started_at >= done.scheduled_at
    assert done.attempts == 1


@pytest.mark.parametrize("check", ["", "0.2"], ids=["engine-default", "0.2s"])
def test_a_new_job_wakes_an_idle_worker_between_its_polls(spawn_worker, check):
    """An idle worker learns of a committed job from its change check (SQLite, MariaDB) or a
    NOTIFY (PostgreSQL), at the engine's pace or at ``WAKE_CHECK_INTERVAL``'s, not at its
    next poll (a minute away here)."""
    worker = spawn_worker(
        "--poll-interval", "60", "-v", "0", env={"SQLQ_TEST_WAKE_CHECK_INTERVAL": check}
    )
    worker.wait_ready()
    for _ in range(3):  # each after the worker has gone idle again
        pk = enqueue("tests.noop").pk
        wait_for(lambda: Job.objects.get(pk=pk).status == JobStatus.COMPLETED, 30)  # noqa: B023


def test_a_burst_worker_exits_once_its_work_is_written_whatever_its_poll_interval(
    spawn_worker,
):
    """``--burst`` exits when nothing is runnable and its outcomes are written, not at its
    next poll (here two minutes away). (On PostgreSQL it used to wait for the next turn of
    its loop, up to a second at the default POLL_INTERVAL: too short to tell here without
    timing it; benchmarks would.)"""
    enqueued = [enqueue("tests.noop") for _ in range(3)]
    worker = spawn_worker("--burst", "--poll-interval", "120", "-v", "0")
    assert worker.wait(timeout=60) == 0, worker.output()
    statuses = Job.objects.filter(pk__in=[job.pk for job in enqueued]).values_list("status")
    assert [status for (status,) in statuses] == [JobStatus.COMPLETED] * 3


def test_a_burst_worker_drains_every_queue_however_many_it_serves(spawn_worker):
    """Found by adversaries (SQLite, then MariaDB): a ``--burst`` worker exited after a claim
    that found nothing while jobs were runnable. On SQLite one claim reads 300 of the
    queues it serves at most (here the first 300 are empty); on the engines with row locks
    a claim skips the rows other workers hold. An empty claim is not the end: the worker
    looks for a runnable job first."""
    queues = [f"q{n:03d}" for n in range(330)]
    with override_settings(SQLQ={**settings.SQLQ, "QUEUES": queues}):
        for queue in queues[300:]:
            bulk_enqueue("tests.noop", [{}], queue=queue)
    worker = spawn_worker("--burst", env={"SQLQ_TEST_QUEUES": json.dumps(queues)})
    assert worker.wait(timeout=120) == 0, worker.output()
    assert not Job.objects.exclude(status=JobStatus.COMPLETED).exists()
    assert Job.objects.count() == 30
