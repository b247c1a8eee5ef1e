"""What sqlq_worker prints: one ready line; at the default verbosity a summary line every
few seconds instead of a line per job; a line per job from -v 2."""

from __future__ import annotations

import re
import signal

import pytest

from django_sqlq import bulk_enqueue, enqueue
from django_sqlq.models import Job
from tests.conftest import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

SUMMARY = re.compile(
    r": (\d+) completed, (\d+) failed, (\d+) retried, \d+ cancelled in [\d.]+s "
    r"\([\d.]+ jobs/s\)"
)


def summed(output: str) -> tuple[int, int, int]:
    totals = [0, 0, 0]
    for match in SUMMARY.finditer(output):
        for i in range(3):
            totals[i] += int(match.group(i + 1))
    return totals[0], totals[1], totals[2]


def test_default_verbosity_prints_one_ready_line_and_summaries_not_a_line_per_job(
    spawn_worker,
):
    worker = spawn_worker("--worker-id", "w1")
    worker.wait_ready()
    bulk_enqueue("tests.noop", [{}] * 20)
    enqueue("tests.boom", max_attempts=1)
    enqueue("tests.boom", max_attempts=2)  # retried later (backoff), then failed
    wait_for(lambda: Job.objects.completed().count() == 20)
    # The summary lines add up to what was done, within a few seconds.
    wait_for(lambda: summed(worker.output())[0] == 20, timeout=30)
    wait_for(lambda: summed(worker.output()) == (20, 2, 1), timeout=60)
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0, worker.output()
    output = worker.output()
    assert [line for line in output.splitlines() if "ready" in line] == ["sqlq_worker w1 ready"]
    assert "completed in" not in output  # no line per job
    # Counted as in the summary lines: jobs failed for good, and attempts to be retried.
    assert "Worker w1 stopped gracefully: 20 done, 2 failed, 1 retried, 0 cancelled" in output


def test_verbosity_2_prints_a_line_per_job(spawn_worker):
    worker = spawn_worker("-v", "2")
    jobs = bulk_enqueue("tests.noop", [{}] * 5)
    wait_for(lambda: worker.output().count("completed in") == 5)
    for job in jobs:
        assert f"Job id={job.pk} type=tests.noop completed in" in worker.output()
    assert worker.output().count(" ready") == 1
    assert "started" not in worker.output().replace("starting", "")  # start lines: -v 3


def test_verbosity_3_also_prints_each_start(spawn_worker):
    worker = spawn_worker("-v", "3")
    job = enqueue("tests.noop")
    wait_for(lambda: "completed in" in worker.output())
    assert f"Job id={job.pk} type=tests.noop attempt=1 started" in worker.output()


def test_verbosity_0_prints_only_the_ready_line_and_errors(spawn_worker):
    worker = spawn_worker("-v", "0", "--worker-id", "quiet")
    bulk_enqueue("tests.noop", [{}] * 5)
    failed = enqueue("tests.boom", max_attempts=1)
    wait_for(lambda: Job.objects.get(pk=failed.pk).status == "failed")
    wait_for(lambda: "failed for good" in worker.output())
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0, worker.output()
    lines = worker.output().splitlines()
    assert lines[0] == "sqlq_worker quiet ready"
    assert len(lines) == 2, lines
    assert "failed for good" in lines[1], lines
