"""Scenario 1, a kill -9 storm: workers SIGKILLed one a second under load, and restarted.

Every job ends ``completed``; none is left ``processing``; each job's side effect happened
once, except that a worker killed between a job's side effect and the write of its
completion makes the job run again (at least once): every extra run is in a killed process.
"""

from __future__ import annotations

import os
import random
import time
from collections import Counter

import pytest

from django_sqlq import bulk_enqueue
from django_sqlq.models import Job, JobStatus
from tests.faults.conftest import errors_in, pid_of, runs, until

pytestmark = [pytest.mark.faults, pytest.mark.django_db(transaction=True)]

JOBS = int(os.environ.get("SQLQ_FAULTS_STORM_JOBS", "3000"))
WORKERS = 4
LEASE = "2"
KILL_EVERY = 1.0
STORM_SECONDS = 40.0  # stop killing after this, even if jobs are left (then they drain)


def test_kill_9_storm(tmp_path, pool, report):
    log = tmp_path / "ran"
    seed = int(os.environ.get("SQLQ_FAULTS_SEED", str(int(time.time()))))
    rng = random.Random(seed)
    # max_attempts is generous on purpose: a killed worker's claimed-but-unstarted jobs
    # count an attempt too (nobody can tell they never started), and a storm kills often.
    bulk_enqueue(
        "faults.record",
        [{"n": n, "path": str(log), "before": 0.015, "after": 0.015} for n in range(JOBS)],
        max_attempts=100,
    )
    started = time.monotonic()
    workers = pool(WORKERS, "--concurrency", "2", env={"SQLQ_TEST_LEASE_SECONDS": LEASE})

    def completed() -> int:
        return Job.objects.completed().count()

    kills = 0
    next_kill = time.monotonic() + KILL_EVERY
    while completed() < JOBS and time.monotonic() - started < STORM_SECONDS:
        if time.monotonic() >= next_kill:
            workers.kill_one(rng)
            kills += 1
            next_kill += KILL_EVERY
        workers.replace_dead()
        time.sleep(0.05)
    storm = time.monotonic() - started
    # Whatever the last kills left behind comes back when its lease runs out.
    until(lambda: completed() == JOBS, 60, f"all {JOBS} jobs completed")
    drained = time.monotonic() - started
    assert workers.stop() == [0] * WORKERS

    assert Job.objects.count() == JOBS
    assert not Job.objects.exclude(status=JobStatus.COMPLETED).exists()
    assert workers.died == {}, "a worker died without being killed"

    ran = runs(log)
    assert set(ran) == set(range(JOBS)), "a completed job whose side effect never happened"
    final = dict(Job.objects.values_list("id", "locked_by"))
    ids = dict(Job.objects.values_list("payload__n", "id"))
    twice = 0
    for n, pids in ran.items():
        extra = Counter(pids)
        finisher = pid_of(final[ids[n]])
        assert extra[finisher] >= 1, f"job {n} completed by {finisher}, which never ran it"
        extra[finisher] -= 1
        # Every run but the one that was recorded happened in a process killed mid-job.
        stray = {pid for pid, count in extra.items() if count and pid not in workers.killed}
        assert not stray, f"job {n} ran {pids}: extra runs in live workers {stray}"
        twice += len(pids) > 1
    for worker in workers.all:
        if worker.pid not in workers.killed:
            assert errors_in(worker.output()) == [], worker.output()

    attempts = Counter(Job.objects.values_list("attempts", flat=True))
    report(
        jobs=JOBS,
        workers=WORKERS,
        lease_seconds=float(LEASE),
        seed=seed,
        kills=kills,
        storm_seconds=round(storm, 1),
        drained_seconds=round(drained, 1),
        jobs_run_more_than_once=twice,
        runs_per_job=dict(sorted(Counter(len(p) for p in ran.values()).items())),
        attempts=dict(sorted(attempts.items())),
    )
