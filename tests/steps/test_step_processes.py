"""Durable steps (issue 25) under real ``sqlq_worker`` processes, on each engine: a worker
killed with SIGKILL inside a step and between two steps (each step's writes happen once), a
worker stopped while its job sleeps (the sleep holds nothing; another worker resumes it),
two emits of one key racing for a waiting job (one wins, the job gets its payload), and
hundreds of jobs asleep at once beside a plain job (10,000: benchmarks/run sidebyside
--b-sleepers). The handlers are in
tests/testapp/step_jobs.py; the in-process tests in test_steps.py."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.db import connections

from django_sqlq import bulk_enqueue, emit_event, enqueue
from django_sqlq.models import Job, JobStatus, JobStep, StepState
from tests.conftest import WorkerProcess, wait_for
from tests.testapp import step_jobs  # noqa: F401 (registers the handlers)
from tests.testapp.models import Order

pytestmark = pytest.mark.django_db(transaction=True)

#: A lease short enough that a killed worker's job is taken over within seconds.
SHORT_LEASE = {"SQLQ_TEST_LEASE_SECONDS": "1"}


def status_of(job: Job) -> str:
    job.refresh_from_db()
    return job.status


def items(tag: str) -> list[str]:
    return sorted(Order.objects.filter(item__startswith=f"{tag} ").values_list("item", flat=True))


@pytest.mark.parametrize("crash", ["in-charge", "between"])
def test_a_worker_killed_inside_or_between_steps_leaves_each_step_done_once(
    crash: str, tmp_path: Path, spawn_worker: Callable[..., WorkerProcess]
) -> None:
    log = tmp_path / "attempts"
    job = enqueue(
        "steps.flow",
        {"tag": "k", "crash": crash, "dir": str(tmp_path), "log": str(log)},
        max_attempts=3,
    )
    first = spawn_worker(env=SHORT_LEASE)
    assert first.wait(60) == -signal.SIGKILL  # the handler killed its worker mid-job
    assert (status_of(job), items("k")) == (
        JobStatus.PROCESSING,
        # Killed inside the step: its write rolled back with it. Between: committed.
        [] if crash == "in-charge" else ["k charge"],
    )
    spawn_worker(env=SHORT_LEASE)
    wait_for(lambda: status_of(job) == JobStatus.COMPLETED, 60)
    assert items("k") == ["k charge", "k ship"]  # each step's write once
    assert job.attempts == 2
    assert len(log.read_text().splitlines()) == 2
    charge = JobStep.objects.get(job_id=job.id, name="charge")
    assert Order.objects.get(item="k charge").pk == charge.result


def test_a_sleep_survives_a_worker_restart_and_the_first_of_two_racing_emits_wins(
    spawn_worker: Callable[..., WorkerProcess],
) -> None:
    job = enqueue("steps.flow", {"tag": "r", "sleep": 2, "key": "race", "timeout": 600})
    first = spawn_worker()
    first.wait_ready()
    wait_for(lambda: status_of(job) == JobStatus.SCHEDULED, 30)
    # Asleep: no worker holds it, and its attempt was not counted.
    assert (job.locked_by, job.lease_expires_at, job.attempts) == ("", None, 0)
    first.signal(signal.SIGTERM)
    assert first.wait(30) == 0
    second = spawn_worker()
    # The sleep ends, the handler resumes and goes on to wait for the event.
    wait_for(
        lambda: JobStep.objects.filter(
            job_id=job.id, name="paid", state=StepState.WAITING
        ).exists(),
        30,
    )
    wait_for(lambda: status_of(job) == JobStatus.SCHEDULED, 30)
    won: list[tuple[str, bool]] = []
    barrier = threading.Barrier(2)

    def emit(payload: str) -> None:
        try:
            barrier.wait(10)
            won.append((payload, emit_event("race", payload)))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=emit, args=(name,)) for name in ("one", "two")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    winners = [payload for payload, first_emit in won if first_emit]
    assert len(won) == 2
    assert len(winners) == 1
    wait_for(lambda: status_of(job) == JobStatus.COMPLETED, 30)
    assert isinstance(job.result, dict)
    assert job.result["paid"] == winners[0]
    assert (job.attempts, items("r")) == (1, ["r charge", "r ship"])
    assert "Traceback" not in second.output()


def test_hundreds_of_sleeping_jobs_hold_no_worker_and_a_plain_job_still_runs(
    spawn_worker: Callable[..., WorkerProcess],
) -> None:
    sleepers = bulk_enqueue("steps.nap", [{"seconds": 3 * 86400}] * 300)
    spawn_worker()
    wait_for(
        lambda: Job.objects.filter(type="steps.nap", status=JobStatus.SCHEDULED).count() == 300,
        120,
    )
    plain = enqueue("tests.echo", {"x": 1})
    wait_for(lambda: status_of(plain) == JobStatus.COMPLETED, 30)
    asleep: Any = Job.objects.filter(pk__in=[job.pk for job in sleepers])
    assert set(asleep.values_list("status", "attempts", "locked_by")) == {
        (JobStatus.SCHEDULED, 0, "")
    }
    assert JobStep.objects.filter(state=StepState.SLEEPING).count() == 300
