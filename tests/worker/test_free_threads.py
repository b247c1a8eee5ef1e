"""Every free thread works: long jobs on some threads never keep a worker from running
new jobs on the others, and jobs a worker claimed ahead (prefetch) go back to the queue
when its threads are held up, so that another worker's free thread runs them."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from django.db import transaction

from django_sqlq import bulk_enqueue, enqueue
from django_sqlq.models import Job, JobStatus
from tests.conftest import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def pids(path: Path) -> Counter[int]:
    """Which process ran each tests.record job (lines are "<n> <pid>")."""
    if not path.exists():
        return Counter()
    return Counter(int(line.split()[1]) for line in path.read_text().splitlines() if line)


def long_job(tmp_path: Path, n: int, *, priority: int = 0) -> Job:
    return enqueue(
        "tests.sleep_then_record",
        {
            "n": n,
            "started": str(tmp_path / f"started-{n}"),
            "release": str(tmp_path / "release"),
            "path": str(tmp_path / "long"),
            "max_seconds": 120,
        },
        priority=priority,
    )


@pytest.mark.parametrize(("concurrency", "long"), [(4, 3), (8, 5)])
def test_quick_jobs_run_on_the_threads_long_jobs_leave_free(
    tmp_path, spawn_worker, concurrency, long
):
    long_jobs = [long_job(tmp_path, n) for n in range(long)]
    worker = spawn_worker("--concurrency", str(concurrency))
    wait_for(lambda: all((tmp_path / f"started-{n}").exists() for n in range(long)))
    quick = bulk_enqueue(
        "tests.record", [{"n": 100 + i, "path": str(tmp_path / "quick")} for i in range(10)]
    )
    wait_for(
        lambda: Job.objects.filter(pk__in=[j.pk for j in quick]).completed().count() == 10,
        timeout=30,
    )
    # ... while every long job is still running.
    assert not (tmp_path / "release").exists()
    statuses = set(
        Job.objects.filter(pk__in=[j.pk for j in long_jobs]).values_list("status", flat=True)
    )
    assert statuses == {JobStatus.PROCESSING}, worker.output()
    (tmp_path / "release").touch()
    wait_for(lambda: Job.objects.completed().count() == 10 + long, timeout=30)


def test_prefetched_jobs_go_to_another_workers_free_thread(tmp_path, spawn_worker):
    # Worker A learns that jobs are fast (so it prefetches), then claims a long job and,
    # ahead, the quick jobs behind it; its one thread is held up by the long job.
    first = spawn_worker("--concurrency", "1", "--worker-id", "A", "-v", "3")
    first.wait_ready()
    warm_up = bulk_enqueue("tests.noop", [{}] * 50)
    wait_for(lambda: Job.objects.filter(pk__in=[j.pk for j in warm_up]).completed().count() == 50)
    with transaction.atomic():
        long_job(tmp_path, 0, priority=10)
        quick = bulk_enqueue(
            "tests.record", [{"n": 100 + i, "path": str(tmp_path / "quick")} for i in range(30)]
        )
    wait_for((tmp_path / "started-0").exists)
    # Worker B, idle, gets them: A gives them back after PREFETCH_HOLD.
    second = spawn_worker("--concurrency", "1", "--worker-id", "B")
    wait_for(
        lambda: Job.objects.filter(pk__in=[j.pk for j in quick]).completed().count() == 30,
        timeout=30,
    )
    assert not (tmp_path / "release").exists()
    assert pids(tmp_path / "quick") == Counter({second.pid: 30})
    assert "Worker A gave back" in first.output()
    (tmp_path / "release").touch()
    wait_for(lambda: Job.objects.completed().count() == 50 + 1 + 30, timeout=30)
