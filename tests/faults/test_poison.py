"""Scenario 5: poison jobs. Each ends ``failed`` after its attempts, with an error that says
what happened, and the other jobs keep flowing.

- Raised in the worker: SystemExit, KeyboardInterrupt (sync and async), a bare
  BaseException subclass, exhausted recursion, and a handler that never returns (stopped by
  the per-job ``timeout``, which the worker enforces). The worker process lives on.
- Fatal to the process: ``os._exit(1)`` and a segfault. The job's lease runs out, the reaper
  records "Lease expired ..." and counts the attempt; a supervisor (here, the test) restarts
  the dead workers; at ``max_attempts`` the job is failed instead of killing workers forever.
"""

from __future__ import annotations

import contextlib
import resource
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from django_sqlq import bulk_enqueue, enqueue
from django_sqlq.models import Job, JobStatus
from tests.faults.conftest import runs, until

pytestmark = [pytest.mark.faults, pytest.mark.django_db(transaction=True)]

RAISED: dict[str, tuple[dict[str, Any], str]] = {
    # type: (enqueue options, what last_error starts with)
    "faults.system_exit": ({}, "SystemExit: 3"),
    "faults.keyboard_interrupt": ({}, "KeyboardInterrupt: pressed ^C inside a job"),
    "faults.async_keyboard_interrupt": (
        {},
        "KeyboardInterrupt: pressed ^C inside an async job",
    ),
    "faults.base_exception": (
        {},
        "tests.testapp.fault_jobs.Bare: a bare BaseException subclass",
    ),
    "faults.recursion": ({}, "RecursionError: maximum recursion depth exceeded"),
    "faults.hang": (
        {"timeout": 1},
        "django_sqlq.exceptions.JobTimeoutError: Job ran longer than its timeout of 1",
    ),
}


def normal_jobs(tmp_path: Path, count: int, **options: Any) -> list[Job]:
    path = str(tmp_path / "ran")
    return bulk_enqueue("faults.record", [{"n": n, "path": path} for n in range(count)], **options)


def test_poison_raised_inside_the_worker_fails_the_job_and_not_the_worker(
    tmp_path, spawn_worker, report
):
    poison = {
        name: enqueue(name, {}, max_attempts=2, **opts) for name, (opts, _) in RAISED.items()
    }
    normal = normal_jobs(tmp_path, 50)
    worker = spawn_worker("--concurrency", "2")

    def settled() -> bool:
        return Job.objects.failed().count() == len(
            poison
        ) and Job.objects.completed().count() == len(normal)

    until(settled, 90, "poison jobs failed and the others completed")
    for name, job in poison.items():
        job.refresh_from_db()
        expected = RAISED[name][1]
        assert (job.status, job.attempts) == (JobStatus.FAILED, 2), name
        assert job.last_error.startswith(expected), (name, job.last_error[:300])
        assert [e["attempt"] for e in job.errors] == [1, 2]
    # Still alive, and still running jobs, async ones included (the runner's event loop
    # survived the KeyboardInterrupt).
    assert worker.proc.poll() is None
    after = enqueue("tests.async_add", {"a": 20, "b": 22})
    until(lambda: Job.objects.get(pk=after.pk).status == JobStatus.COMPLETED, 30, "async job ran")
    assert Job.objects.get(pk=after.pk).result == 42
    assert {n: len(p) for n, p in runs(tmp_path / "ran").items()} == dict.fromkeys(range(50), 1)
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0
    output = worker.output()
    assert "Traceback" not in output
    assert "could not record" not in output
    report(poison_types=sorted(RAISED), attempts_each=2, normal_jobs_completed=len(normal))


@contextlib.contextmanager
def no_core_dumps() -> Iterator[None]:
    """Children inherit the limit: a segfaulting worker leaves no core file behind."""
    previous = resource.getrlimit(resource.RLIMIT_CORE)
    resource.setrlimit(resource.RLIMIT_CORE, (0, previous[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_CORE, previous)


@pytest.mark.parametrize("poison", ["faults.os_exit", "faults.segfault"])
def test_poison_that_kills_its_worker_ends_failed_after_max_attempts(
    poison, tmp_path, pool, report
):
    job = enqueue(poison, {}, max_attempts=2, priority=10)
    normal = normal_jobs(tmp_path, 30, max_attempts=10)
    with no_core_dumps():
        workers = pool(2, env={"SQLQ_TEST_LEASE_SECONDS": "1.5"})

        def settled() -> bool:
            workers.replace_dead()  # the supervisor's job
            return Job.objects.get(
                pk=job.pk
            ).status == JobStatus.FAILED and Job.objects.completed().count() == len(normal)

        # Two deaths, each a replacement's start-up and a lease to run out: slow under load.
        until(settled, 120, f"{poison} failed and the other jobs completed")
        codes = sorted(workers.died.values())
        assert workers.stop() == [0, 0]
    job.refresh_from_db()
    assert job.attempts == 2
    assert job.last_error.startswith("Lease expired: worker ")
    assert "during attempt 2 (killed, crashed, frozen or cut off from the database)" in (
        job.last_error
    )
    assert [e["exception_class"] for e in job.errors] == [
        "django_sqlq.exceptions.LeaseLostError"
    ] * 2
    assert codes
    assert set(codes) <= {1, -signal.SIGSEGV}, codes
    ran = runs(tmp_path / "ran")
    assert set(ran) == set(range(30))
    report(poison=poison, worker_deaths=len(codes), exit_codes=codes)
