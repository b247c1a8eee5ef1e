"""Workflows (issue 16 part 1): chains (``context.continue_with()``), jobs that wait for
others (``enqueue(..., depends_on=...)``, status ``blocked``), groups and their policies.
In-process workers (``run_burst``) on the test's engine; tests/workflows/test_processes.py
runs real worker processes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from django_sqlq import (
    Chain,
    JobGroup,
    bulk_enqueue,
    cancel,
    enqueue,
    handler,
    outcomes,
)
from django_sqlq.db import ops_for
from django_sqlq.db.outcomes import Finished
from django_sqlq.exceptions import InvalidJobError
from django_sqlq.jobcontext import JobContext
from django_sqlq.models import Job, JobBlocker, JobStatus
from django_sqlq.testing import run_jobs
from tests.conftest import run_burst
from tests.testapp import workflow_jobs  # noqa: F401 (registers the handlers)

pytestmark = pytest.mark.django_db(transaction=True)


def ran(path: Path) -> list[str]:
    """The names (or step numbers) the handlers recorded in ``path``, in order."""
    return [line.split()[0] for line in path.read_text().splitlines()] if path.exists() else []


def status(job: Job) -> str:
    job.refresh_from_db()
    return job.status


def rec(path: Path, name: str, **extra: Any) -> dict[str, Any]:
    return {"path": str(path), "name": name, **extra}


# -- chains ------------------------------------------------------------------------------------


def test_a_chain_runs_each_step_once_in_order_and_records_its_steps(tmp_path):
    path = tmp_path / "runs"
    first = enqueue("wf.step", {"path": str(path), "n": 0, "of": 5})
    run_burst()
    assert ran(path) == ["0", "1", "2", "3", "4"]
    steps = list(Chain(first.pk).jobs())
    assert [s.chain_index for s in steps] == [0, 1, 2, 3, 4]
    assert {s.chain_id for s in steps} == {first.pk}
    assert [s.status for s in steps] == [JobStatus.COMPLETED] * 5
    assert [s.payload["n"] for s in steps] == [0, 1, 2, 3, 4]
    first.refresh_from_db()
    assert first.chain == Chain(first.pk)
    assert steps[3].chain == Chain(first.pk)


def test_a_step_that_fails_after_continue_with_writes_no_next_step(tmp_path):
    path = tmp_path / "runs"
    job = enqueue("wf.continue_then_fail", {"path": str(path)}, max_attempts=1)
    run_burst()
    assert status(job) == JobStatus.FAILED
    assert Job.objects.count() == 1
    assert ran(path) == []
    assert job.chain_id is None


def test_continue_with_twice_fails_the_attempt(tmp_path):
    path = tmp_path / "runs"
    job = enqueue("wf.continue_twice", {"path": str(path)}, max_attempts=1)
    run_burst()
    assert status(job) == JobStatus.FAILED
    assert "already asked to continue" in job.last_error
    assert Job.objects.count() == 1


def test_a_chain_runs_under_run_jobs(tmp_path):
    path = tmp_path / "runs"
    enqueue("wf.step", {"path": str(path), "n": 0, "of": 3})
    result = run_jobs()
    assert result.completed == 3
    assert ran(path) == ["0", "1", "2"]


# -- dependencies ------------------------------------------------------------------------------


def test_a_job_waits_blocked_until_its_dependencies_complete(tmp_path):
    path = tmp_path / "runs"
    a = enqueue("wf.record", rec(path, "a"))
    b = enqueue("wf.record", rec(path, "b"))
    waiter = enqueue("wf.record", rec(path, "w"), depends_on=[a, b.pk])
    assert waiter.status == JobStatus.BLOCKED
    assert status(waiter) == JobStatus.BLOCKED
    assert waiter.blockers_left == 2
    assert waiter.depends_on == [{"job": a.pk}, {"job": b.pk}]
    assert JobBlocker.objects.filter(job_id=waiter.pk).count() == 2
    run_burst()
    assert ran(path)[-1] == "w"
    assert sorted(ran(path)) == ["a", "b", "w"]
    assert status(waiter) == JobStatus.COMPLETED
    assert JobBlocker.objects.count() == 0


def test_a_blocked_job_is_never_claimed(tmp_path):
    path = tmp_path / "runs"
    a = enqueue("wf.record", rec(path, "a"), delay=3600)
    waiter = enqueue("wf.record", rec(path, "w"), depends_on=[a])
    run_burst()
    assert ran(path) == []
    assert status(waiter) == JobStatus.BLOCKED


def test_dependencies_already_complete_leave_the_job_runnable(tmp_path):
    path = tmp_path / "runs"
    a = enqueue("wf.record", rec(path, "a"))
    run_burst()
    waiter = enqueue("wf.record", rec(path, "w"), depends_on=[a])
    assert waiter.status == JobStatus.PENDING
    assert waiter.depends_on == [{"job": a.pk}]
    run_burst()
    assert ran(path) == ["a", "w"]


def test_waiting_for_a_chain_waits_for_its_last_step(tmp_path):
    path = tmp_path / "runs"
    first = enqueue("wf.step", {"path": str(path), "n": 0, "of": 4})
    waiter = enqueue("wf.record", rec(path, "w"), depends_on=[first.chain])
    just_first = enqueue("wf.record", rec(path, "j"), depends_on=[first])
    run_burst()
    order = ran(path)
    assert order.index("w") > order.index("3")
    assert order.index("j") > order.index("0")
    assert status(waiter) == JobStatus.COMPLETED
    assert status(just_first) == JobStatus.COMPLETED


def test_a_chain_already_continued_is_waited_for_to_its_end(tmp_path):
    path = tmp_path / "runs"
    first = enqueue("wf.step", {"path": str(path), "n": 0, "of": 3})
    run_jobs(max_jobs=1)  # step 0 ran and wrote step 1
    waiter = enqueue("wf.record", rec(path, "w"), depends_on=[Chain(first.pk)])
    assert waiter.status == JobStatus.BLOCKED
    run_burst()
    assert ran(path) == ["0", "1", "2", "w"]


def test_a_group_fans_in(tmp_path):
    path = tmp_path / "runs"
    group = bulk_enqueue("wf.record", [rec(path, f"t{i}") for i in range(20)])
    assert isinstance(group, JobGroup)
    assert isinstance(group, list)
    album = group.then("wf.record", rec(path, "album"))
    assert album.status == JobStatus.BLOCKED
    assert album.blockers_left == 20
    run_burst()
    assert ran(path)[-1] == "album"
    assert ran(path).count("album") == 1


@pytest.mark.parametrize(
    ("policy", "expected"),
    [("fail", JobStatus.FAILED), ("cancel", JobStatus.CANCELLED), ("run", JobStatus.COMPLETED)],
)
def test_a_dependency_that_fails_decides_the_job_by_its_policy(tmp_path, policy, expected):
    path = tmp_path / "runs"
    bad = enqueue("wf.record", rec(path, "bad", fail=True), max_attempts=1)
    good = enqueue("wf.record", rec(path, "good"))
    waiter = enqueue(
        "wf.record", rec(path, "w"), depends_on=[bad, good], on_dependency_failure=policy
    )
    run_burst()
    assert status(waiter) == expected
    assert ("w" in ran(path)) is (policy == "run")
    if policy != "run":
        assert f"job id={bad.pk}" in waiter.last_error
    assert JobBlocker.objects.count() == 0


def test_a_failure_cascades_down_a_line_of_waiting_jobs(tmp_path):
    path = tmp_path / "runs"
    bad = enqueue("wf.record", rec(path, "bad", fail=True), max_attempts=1)
    w1 = enqueue("wf.record", rec(path, "w1"), depends_on=[bad])
    w2 = enqueue("wf.record", rec(path, "w2"), depends_on=[w1], on_dependency_failure="cancel")
    run_burst()
    assert status(w1) == JobStatus.FAILED
    assert status(w2) == JobStatus.CANCELLED
    assert ran(path) == ["bad"]


def test_cancelling_a_dependency_decides_the_waiting_job(tmp_path):
    path = tmp_path / "runs"
    a = enqueue("wf.record", rec(path, "a"), delay=3600)
    waiter = enqueue("wf.record", rec(path, "w"), depends_on=[a], on_dependency_failure="cancel")
    cancel(a)
    assert status(waiter) == JobStatus.CANCELLED


def test_a_blocked_job_can_be_cancelled(tmp_path):
    path = tmp_path / "runs"
    a = enqueue("wf.record", rec(path, "a"))
    waiter = enqueue("wf.record", rec(path, "w"), depends_on=[a])
    cancel(waiter)
    assert status(waiter) == JobStatus.CANCELLED
    run_burst()
    assert ran(path) == ["a"]
    assert JobBlocker.objects.count() == 0


def test_depending_on_a_failed_job_fails_at_once(tmp_path):
    path = tmp_path / "runs"
    bad = enqueue("wf.record", rec(path, "bad", fail=True), max_attempts=1)
    run_burst()
    waiter = enqueue("wf.record", rec(path, "w"), depends_on=[bad])
    assert waiter.status == JobStatus.FAILED
    assert status(waiter) == JobStatus.FAILED


@pytest.mark.parametrize(
    "depends_on",
    ["abc", {"job": 1}, [True], [0], ["1"], [1.5], 5, [None]],
)
def test_bad_depends_on_is_refused_and_writes_nothing(depends_on):
    with pytest.raises(InvalidJobError, match="depends_on"):
        enqueue("wf.record", {}, depends_on=depends_on)
    assert Job.objects.count() == 0


def test_a_missing_dependency_is_refused_and_writes_nothing():
    with pytest.raises(InvalidJobError, match="no job with id 987654"):
        enqueue("wf.record", {}, depends_on=[987654])
    with pytest.raises(InvalidJobError, match="no chain 987654"):
        enqueue("wf.record", {}, depends_on=[Chain(987654)])
    assert Job.objects.count() == 0


def test_a_bad_policy_is_refused():
    with pytest.raises(InvalidJobError, match="on_dependency_failure"):
        enqueue("wf.record", {}, on_dependency_failure="ignore")


@handler("wf.waits_on_me", takes_context=True)
def waits_on_me(payload: dict[str, Any], context: JobContext) -> None:
    """While it runs (claimed, processing), enqueue a job that waits for it."""
    enqueue("wf.record", rec(Path(payload["path"]), "after"), depends_on=[context.job_id])


def test_a_job_waited_for_after_its_claim_releases_its_waiter(tmp_path):
    """The worker's one-statement completion leaves out jobs waited for (waited_on), even
    when the wait began after the claim: the waiter is released, not left blocked."""
    path = tmp_path / "runs"
    job = enqueue("wf.waits_on_me", {"path": str(path)})
    run_burst()
    assert status(job) == JobStatus.COMPLETED
    assert ran(path) == ["after"]
    assert not Job.objects.filter(status=JobStatus.BLOCKED).exists()


def test_the_plain_completion_leaves_out_a_job_waited_for():
    job = enqueue("wf.record", {})
    claimed = ops_for("default").claim(queues=None, worker_id="w", limit=1, lease_seconds=60)
    waiter = enqueue("wf.record", {}, depends_on=[job])
    done = [Finished(claimed[0].id, claimed[0].attempts)]
    assert (
        ops_for("default").complete_statuses(done, worker_id="w", unwaited=True, skip_locked=True)
        == {}
    )
    assert status(job) == JobStatus.PROCESSING
    outcome = outcomes.write("default", [outcomes.Completed(claimed[0])], worker_id="w")
    assert outcome.statuses == {job.pk: JobStatus.COMPLETED}
    assert outcome.released == [waiter.pk]
    assert status(waiter) == JobStatus.PENDING


def test_a_chain_named_by_a_later_step_is_that_steps_chain(tmp_path):
    path = tmp_path / "runs"
    first = enqueue("wf.step", {"path": str(path), "n": 0, "of": 3})
    run_jobs(max_jobs=1)  # step 0 ran and wrote step 1
    second = Job.objects.get(chain_id=first.pk, chain_index=1)
    by_step = enqueue("wf.record", rec(path, "w1"), depends_on=[Chain(second.pk)])
    in_group = enqueue("wf.record", rec(path, "w2"), depends_on=[[second]])
    assert by_step.depends_on == [{"chain": first.pk}]
    assert in_group.depends_on == [{"chain": first.pk}]
    run_burst()
    assert status(by_step) == JobStatus.COMPLETED
    assert status(in_group) == JobStatus.COMPLETED
    assert ran(path)[:3] == ["0", "1", "2"]
