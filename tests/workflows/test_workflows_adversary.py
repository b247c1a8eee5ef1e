"""Adversarial tests of workflows (chains and dependencies, issue 16), written from the user
documentation only: what careless code, hostile input and real processes do to them.

Five tests here were strict xfails when written (a Job of another database taken for one of
this database, Chain(id) of a later step waiting for ever, the admin's delete skipping
blocked jobs, cancel() of a blocked job deadlocking with a completion on PostgreSQL, and
bulk_enqueue() looking its dependencies up once per job); fixed since, they are regression
tests like the others, the promises that held."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.conf import settings
from django.core.management import call_command
from django.db import connection, connections, transaction
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

import django_sqlq
from django_sqlq import Chain, aenqueue, bulk_enqueue, enqueue
from django_sqlq.exceptions import InvalidJobError
from django_sqlq.jobcontext import JobContext
from django_sqlq.models import Job, JobBlocker, JobStatus
from django_sqlq.testing import inline, run_job, run_jobs
from tests.conftest import WorkerProcess, run_burst, wait_for

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "other"])


def ran(path: Path) -> list[str]:
    """The names recorded by wf.record / the steps recorded by wf.step, in order."""
    if not path.exists():
        return []
    return [line.split()[0] for line in path.read_text().splitlines()]


def rec(path: Path, name: str, **extra: Any) -> dict[str, Any]:
    return {"path": str(path), "name": name, **extra}


def status(job: Job | int) -> str:
    return str(Job.objects.get(pk=job.pk if isinstance(job, Job) else job).status)


def blockers_of(job: Job) -> int:
    return JobBlocker.objects.filter(job_id=job.pk).count()


# -- the boundary: what depends_on accepts and refuses --------------------------------------


@pytest.mark.parametrize(
    "depends_on",
    [
        pytest.param([0], id="zero"),
        pytest.param([-3], id="negative"),
        pytest.param([True], id="bool"),
        pytest.param(["1"], id="str-id"),
        pytest.param([1.0], id="float"),
        pytest.param([None], id="none"),
        pytest.param([{"job": 1}], id="dict"),
        pytest.param([[1]], id="group-of-ids"),
        pytest.param({1}, id="a-set"),
        pytest.param((1,), id="a-tuple"),
        pytest.param("1", id="a-string"),
    ],
)
def test_hostile_depends_on_is_refused_and_writes_nothing(depends_on: Any) -> None:
    dep = enqueue("tests.noop", {})
    with pytest.raises((InvalidJobError, TypeError, ValueError)):
        enqueue("tests.noop", {}, depends_on=depends_on)
    assert list(Job.objects.values_list("pk", flat=True)) == [dep.pk]
    assert JobBlocker.objects.count() == 0


def test_an_unwritten_job_is_refused() -> None:
    with pytest.raises((InvalidJobError, ValueError)):
        enqueue("tests.noop", {}, depends_on=[Job(type="tests.noop")])
    assert Job.objects.count() == 0


def test_a_missing_chain_is_refused_and_writes_nothing() -> None:
    dep = enqueue("tests.noop", {})
    with pytest.raises(InvalidJobError):
        enqueue("tests.noop", {}, depends_on=[dep, Chain(dep.pk + 1000)])
    assert Job.objects.count() == 1
    assert JobBlocker.objects.count() == 0


def test_bulk_enqueue_with_a_missing_dependency_writes_none_of_the_batch() -> None:
    dep = enqueue("tests.noop", {})
    with pytest.raises(InvalidJobError):
        bulk_enqueue("tests.noop", [{}, {}, {}], depends_on=[dep, dep.pk + 99])
    assert Job.objects.count() == 1


def test_a_job_from_another_database_is_not_taken_for_a_job_of_this_one() -> None:
    """A Job written on the "other" database whose id also names a job on "default": waiting
    for it from "default" must not silently wait for the unrelated job with that id."""
    other = override_settings(SQLQ={**settings.SQLQ, "DATABASE": "other"})
    with other:
        elsewhere = enqueue("tests.noop", {})
    assert elsewhere._state.db == "other"
    unrelated = enqueue("tests.noop", {})
    # One id on both databases: the other database's job takes this one's id.
    with connections["other"].cursor() as cursor:
        cursor.execute("DELETE FROM sqlq_job WHERE id = %s", [unrelated.pk])
        cursor.execute("UPDATE sqlq_job SET id = %s WHERE id = %s", [unrelated.pk, elsewhere.pk])
    elsewhere.pk = unrelated.pk
    assert Job.objects.using("default").filter(pk=elsewhere.pk).exists()
    with pytest.raises((InvalidJobError, ValueError)):
        enqueue("tests.noop", {}, depends_on=[elsewhere])


def test_an_empty_depends_on_and_an_empty_group_leave_the_job_runnable() -> None:
    empty = enqueue("tests.noop", {}, depends_on=[])
    group = bulk_enqueue("tests.noop", [])
    fan_in = group.then("tests.noop", {})
    assert status(empty) == JobStatus.PENDING
    assert status(fan_in) == JobStatus.PENDING
    assert JobBlocker.objects.count() == 0


# -- odd shapes that must still wait exactly once ----------------------------------------


def test_duplicates_in_depends_on_release_the_job_once_its_dependency_completes(
    tmp_path: Path,
) -> None:
    dep = enqueue("wf.record", rec(tmp_path / "log", "dep"))
    waiter = enqueue(
        "wf.record",
        rec(tmp_path / "log", "waiter"),
        depends_on=[dep, dep, dep.pk, Chain(dep.pk), dep.chain, [dep], [dep, dep]],
    )
    assert status(waiter) == JobStatus.BLOCKED
    run_jobs()
    assert ran(tmp_path / "log") == ["dep", "waiter"]
    assert status(waiter) == JobStatus.COMPLETED
    assert JobBlocker.objects.count() == 0


def test_a_job_and_its_chain_wait_for_the_chain_end(tmp_path: Path) -> None:
    first = enqueue("wf.step", {"path": str(tmp_path / "steps"), "n": 0, "of": 3})
    waiter = enqueue("wf.record", rec(tmp_path / "log", "waiter"), depends_on=[first, first.chain])
    run_jobs(max_jobs=1)  # step 0 completes: the job is done, its chain is not
    assert status(waiter) == JobStatus.BLOCKED
    run_jobs()
    assert ran(tmp_path / "steps") == ["0", "1", "2"]
    assert ran(tmp_path / "log") == ["waiter"]
    assert JobBlocker.objects.count() == 0


def test_waiting_for_a_middle_step_by_id_waits_for_that_step_only(tmp_path: Path) -> None:
    first = enqueue("wf.step", {"path": str(tmp_path / "steps"), "n": 0, "of": 4})
    run_jobs(max_jobs=2)  # steps 0 and 1 done, step 2 pending
    steps = list(Chain(first.pk).jobs())
    middle = steps[2]
    assert middle.chain_index == 2
    assert middle.chain == Chain(first.pk)
    waiter = enqueue("wf.record", rec(tmp_path / "log", "waiter"), depends_on=[middle.pk])
    assert status(waiter) == JobStatus.BLOCKED
    run_jobs(max_jobs=1)  # the middle step completes; the chain goes on
    assert status(waiter) == JobStatus.PENDING


def test_chain_of_a_middle_step_names_the_whole_chain(tmp_path: Path) -> None:
    first = enqueue("wf.step", {"path": str(tmp_path / "steps"), "n": 0, "of": 3})
    run_jobs(max_jobs=1)
    middle = Chain(first.pk).jobs().get(chain_index=1)
    waiter = enqueue("wf.record", rec(tmp_path / "log", "w"), depends_on=[middle.chain])
    run_jobs(max_jobs=1)  # the middle step completes: the chain still has one step to go
    assert status(waiter) == JobStatus.BLOCKED
    run_jobs()
    assert ran(tmp_path / "log") == ["w"]


def test_chain_of_a_middle_steps_id_is_refused_or_waits_for_the_chain() -> None:
    """Chain(id) takes the first job's id. Chain(middle step's id) names no chain: refused
    as a missing chain, never a wait on a 'chain' that can never be seen to finish."""
    first = enqueue("advwf.recurse", {"n": 0, "of": 3})
    run_jobs(max_jobs=1)
    middle = Chain(first.pk).jobs().get(chain_index=1)
    try:
        waiter = enqueue("tests.noop", {}, depends_on=[Chain(middle.pk)])
    except InvalidJobError:
        return
    run_jobs()
    assert status(waiter) == JobStatus.COMPLETED


# -- transactions, unique keys -------------------------------------------------------------


def test_a_rolled_back_enqueue_leaves_no_blocked_job_and_no_blocker_rows() -> None:
    dep = enqueue("tests.noop", {})
    group = bulk_enqueue("tests.noop", [{}, {}])

    def enqueue_then_fail() -> None:
        with transaction.atomic():
            enqueue("tests.noop", {}, depends_on=[dep, dep.chain])
            group.then("tests.noop", {})
            bulk_enqueue("tests.noop", [{}, {}], depends_on=[group])
            raise ZeroDivisionError

    with pytest.raises(ZeroDivisionError):
        enqueue_then_fail()
    assert Job.objects.blocked().count() == 0
    assert Job.objects.count() == 3
    assert JobBlocker.objects.count() == 0


def test_unique_key_returns_the_blocked_holder_without_new_blockers() -> None:
    a = enqueue("tests.noop", {})
    b = enqueue("tests.noop", {})
    waiter = enqueue("tests.noop", {}, depends_on=[a], unique_key="k")
    again = enqueue("tests.noop", {}, depends_on=[b], unique_key="k")
    assert again.pk == waiter.pk
    assert blockers_of(waiter) == 1
    run_job(a)
    assert status(waiter) == JobStatus.PENDING  # b never became one of its blockers


def test_unique_key_held_by_a_pending_job_is_not_reblocked() -> None:
    dep = enqueue("tests.noop", {})
    holder = enqueue("tests.noop", {}, unique_key="k")
    again = enqueue("tests.noop", {}, depends_on=[dep], unique_key="k")
    assert again.pk == holder.pk
    assert status(holder) == JobStatus.PENDING
    assert blockers_of(holder) == 0


def test_a_blocked_job_holds_its_unique_key_until_it_runs() -> None:
    dep = enqueue("tests.noop", {})
    waiter = enqueue("tests.noop", {}, depends_on=[dep], unique_key="k")
    run_jobs()
    assert status(waiter) == JobStatus.COMPLETED
    fresh = enqueue("tests.noop", {}, unique_key="k")
    assert fresh.pk != waiter.pk


# -- operators: cancel, delete, retry, prune ----------------------------------------------


@pytest.mark.parametrize(
    ("policy", "expected"),
    [("fail", JobStatus.FAILED), ("cancel", JobStatus.CANCELLED), ("run", JobStatus.PENDING)],
)
def test_cancelling_a_pending_dependency_applies_the_policy(policy: str, expected: str) -> None:
    dep = enqueue("tests.noop", {})
    waiter = enqueue("tests.noop", {}, depends_on=[dep], on_dependency_failure=policy)
    django_sqlq.cancel(dep)
    assert status(waiter) == expected
    if policy == "fail":
        assert str(dep.pk) in (Job.objects.get(pk=waiter.pk).last_error or "")
    assert JobBlocker.objects.count() == 0


def test_the_admin_delete_action_on_a_dependency_decides_its_waiters(admin_client: Any) -> None:
    dep = enqueue("tests.noop", {})
    failing = enqueue("tests.noop", {}, depends_on=[dep])
    running = enqueue("tests.noop", {}, depends_on=[dep], on_dependency_failure="run")
    data = {"action": "delete_jobs", "_selected_action": [dep.pk], "index": 0, "post": "yes"}
    admin_client.post(reverse("admin:django_sqlq_job_changelist"), data, follow=True)
    assert not Job.objects.filter(pk=dep.pk).exists()
    assert status(failing) == JobStatus.FAILED
    assert status(running) == JobStatus.PENDING
    assert JobBlocker.objects.count() == 0


def test_the_admin_deletes_a_blocked_job_and_its_blocker_rows(admin_client: Any) -> None:
    dep = enqueue("tests.noop", {})
    waiter = enqueue("tests.noop", {}, depends_on=[dep, dep.chain])
    data = {"action": "delete_jobs", "_selected_action": [waiter.pk], "index": 0, "post": "yes"}
    admin_client.post(reverse("admin:django_sqlq_job_changelist"), data, follow=True)
    assert not Job.objects.filter(pk=waiter.pk).exists()
    assert JobBlocker.objects.count() == 0
    run_jobs()
    assert status(dep) == JobStatus.COMPLETED


def test_a_cancelled_blocked_job_stays_cancelled_when_its_dependency_completes() -> None:
    dep = enqueue("tests.noop", {})
    waiter = enqueue("tests.noop", {}, depends_on=[dep])
    assert django_sqlq.cancel(waiter) == django_sqlq.CancelResult.CANCELLED
    run_jobs()
    assert status(waiter) == JobStatus.CANCELLED
    assert JobBlocker.objects.count() == 0


def test_retrying_a_job_failed_by_its_policy_runs_it_without_waiting(tmp_path: Path) -> None:
    dep = enqueue("wf.record", rec(tmp_path / "log", "dep", fail=True), max_attempts=1)
    waiter = enqueue("wf.record", rec(tmp_path / "log", "waiter"), depends_on=[dep])
    run_jobs()
    assert status(waiter) == JobStatus.FAILED
    admin_retry([waiter])
    assert status(waiter) == JobStatus.PENDING
    run_jobs()
    assert ran(tmp_path / "log") == ["dep", "waiter"]


def test_retrying_a_failed_dependency_does_not_revive_its_failed_waiter(tmp_path: Path) -> None:
    dep = enqueue("wf.record", rec(tmp_path / "log", "dep", fail=True), max_attempts=1)
    waiter = enqueue("wf.record", rec(tmp_path / "log", "waiter"), depends_on=[dep])
    run_jobs()
    admin_retry([dep])
    # A job enqueued now waits for the retried dependency afresh.
    late = enqueue("wf.record", rec(tmp_path / "log", "late"), depends_on=[dep])
    assert status(late) == JobStatus.BLOCKED
    Job.objects.filter(pk=dep.pk).update(payload=rec(tmp_path / "log", "dep"))
    run_jobs()
    assert status(dep) == JobStatus.COMPLETED
    assert status(waiter) == JobStatus.FAILED
    assert status(late) == JobStatus.COMPLETED


def admin_retry(jobs: list[Job]) -> None:
    from django_sqlq import lifecycle

    lifecycle.retry_now([j.pk for j in jobs], alias="default")


def test_prune_never_deletes_blocked_jobs_and_their_wait_survives(tmp_path: Path) -> None:
    old = timezone.now() - timedelta(days=30)
    dep = enqueue("wf.record", rec(tmp_path / "log", "dep"))
    waiter = enqueue("wf.record", rec(tmp_path / "log", "waiter"), depends_on=[dep])
    Job.objects.filter(pk=waiter.pk).update(created_at=old, scheduled_at=old)
    call_command("sqlq_prune", older_than="1")
    assert status(waiter) == JobStatus.BLOCKED
    assert blockers_of(waiter) == 1
    run_jobs()
    assert ran(tmp_path / "log") == ["dep", "waiter"]
    # Finished jobs may go now: the waiter was released before.
    Job.objects.update(completed_at=old, updated_at=old)
    call_command("sqlq_prune", older_than="1")
    assert Job.objects.count() == 0
    assert JobBlocker.objects.count() == 0


def test_pruning_a_completed_dependency_then_waiting_for_it() -> None:
    """A dependency that completed and was pruned is gone: waiting for its id is refused
    (the docs: a missing job id raises InvalidJobError), never a job blocked for ever."""
    dep = enqueue("tests.noop", {})
    run_jobs()
    old = timezone.now() - timedelta(days=30)
    Job.objects.update(completed_at=old, updated_at=old)
    call_command("sqlq_prune", older_than="1")
    with pytest.raises(InvalidJobError):
        enqueue("tests.noop", {}, depends_on=[dep.pk])
    assert Job.objects.blocked().count() == 0


# -- continue_with misused ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("payload", "word"),
    [
        pytest.param({"target": "wf.record", "bad_payload": True}, "JSON", id="not-json"),
        pytest.param({"target": "wf.record", "queue": "nope"}, "nope", id="unknown-queue"),
    ],
)
def test_a_bad_continue_with_fails_the_attempt_and_writes_no_step(
    payload: dict[str, Any], word: str
) -> None:
    job = enqueue("advwf.continue_into", payload, max_attempts=2)
    run_burst(queues=["default"])
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED
    assert job.attempts == 2
    assert word.lower() in (job.last_error or "").lower()
    assert Job.objects.count() == 1
    assert job.chain_id is None


@override_settings(SQLQ={**settings.SQLQ, "CHECK_TYPES": False})
def test_continue_with_an_unregistered_name_writes_a_step_that_fails_clearly() -> None:
    """As enqueue() does with SQLQ["CHECK_TYPES"] off (a producer may not have the
    consumer's handlers), continue_with() accepts a name no handler is registered for: the
    step completes and its next step fails for good, its last_error naming the missing
    handler."""
    first = enqueue("advwf.continue_into", {"target": "no.such.handler"})
    run_burst(queues=["default"])
    steps = list(Chain(first.pk).jobs())
    assert [(j.type, j.status) for j in steps] == [
        ("advwf.continue_into", JobStatus.COMPLETED),
        ("no.such.handler", JobStatus.FAILED),
    ]
    assert "no.such.handler" in (steps[1].last_error or "")


def test_continue_with_from_an_async_handler(tmp_path: Path) -> None:
    first = enqueue("advwf.async_continue", {"path": str(tmp_path / "log")})
    run_burst(queues=["default"])
    assert ran(tmp_path / "log") == ["after-async"]
    assert [j.chain_index for j in Chain(first.pk).jobs()] == [0, 1]


def test_continue_with_from_an_async_handler_under_run_jobs(tmp_path: Path) -> None:
    enqueue("advwf.async_continue", {"path": str(tmp_path / "log")})
    result = run_jobs()
    assert result.completed == 2
    assert ran(tmp_path / "log") == ["after-async"]


def test_continue_with_outside_a_worker_writes_nothing() -> None:
    """A JobContext made by hand (a handler called directly in a test): continue_with has
    no attempt to attach the step to, so it must not write a job."""
    ctx = JobContext(
        job_id=12345, type="advwf.recurse", queue="default", attempt=1, max_attempts=1,
        worker_id="hand",
    )  # fmt: skip
    try:
        from tests.testapp.adversary_workflow_jobs import recurse

        recurse({"n": 0, "of": 5}, ctx)
    except RuntimeError:
        pass
    assert Job.objects.count() == 0


def test_a_step_retried_after_failing_continues_the_chain_once(tmp_path: Path) -> None:
    first = enqueue("advwf.flaky_continue", {"path": str(tmp_path / "log")}, max_attempts=3)
    run_burst(queues=["default"])
    assert status(first) == JobStatus.COMPLETED
    assert ran(tmp_path / "log") == ["next"]
    assert [j.chain_index for j in Chain(first.pk).jobs()] == [0, 1]


def test_an_atomic_chain_in_inline_mode_and_fan_in(tmp_path: Path) -> None:
    with inline():
        group = bulk_enqueue("wf.step", [
            {"path": str(tmp_path / "a"), "n": 0, "of": 3},
            {"path": str(tmp_path / "b"), "n": 0, "of": 2},
        ])  # fmt: skip
        # In inline mode the group ran already, chains included: the fan-in runs at once.
        fan_in = group.then("wf.record", rec(tmp_path / "log", "fan-in"))
    assert ran(tmp_path / "a") == ["0", "1", "2"]
    assert ran(tmp_path / "b") == ["0", "1"]
    assert ran(tmp_path / "log") == ["fan-in"]
    assert status(fan_in) == JobStatus.COMPLETED


def test_inline_mode_applies_the_policy_of_a_dependency_that_failed(tmp_path: Path) -> None:
    with inline():
        dep = enqueue("wf.record", rec(tmp_path / "log", "dep", fail=True), max_attempts=1)
        failing = enqueue("wf.record", rec(tmp_path / "log", "failing"), depends_on=[dep])
        running = enqueue(
            "wf.record", rec(tmp_path / "log", "running"), depends_on=[dep],
            on_dependency_failure="run",
        )  # fmt: skip
    assert status(failing) == JobStatus.FAILED
    assert status(running) == JobStatus.COMPLETED
    assert ran(tmp_path / "log") == ["dep", "running"]


def test_run_jobs_runs_chains_and_fan_ins_to_the_end(tmp_path: Path) -> None:
    group = bulk_enqueue("wf.step", [
        {"path": str(tmp_path / "a"), "n": 0, "of": 3},
        {"path": str(tmp_path / "b"), "n": 0, "of": 2},
    ])  # fmt: skip
    fan_in = group.then("wf.step", {"path": str(tmp_path / "c"), "n": 0, "of": 2})
    last = enqueue("wf.record", rec(tmp_path / "log", "last"), depends_on=[fan_in.chain])
    result = run_jobs()
    assert result.completed == 3 + 2 + 2 + 1
    assert ran(tmp_path / "log") == ["last"]
    assert status(last) == JobStatus.COMPLETED


# -- time: scheduled dependencies and waiters -----------------------------------------------


def test_a_waiter_with_a_future_run_at_is_released_to_scheduled() -> None:
    dep = enqueue("tests.noop", {})
    waiter = enqueue("tests.noop", {}, depends_on=[dep], delay=timedelta(hours=1))
    run_jobs()
    assert status(waiter) == JobStatus.SCHEDULED
    assert run_jobs().ran == 0


def test_a_waiter_whose_run_at_passed_while_blocked_is_released_to_pending() -> None:
    dep = enqueue("tests.noop", {}, delay=timedelta(hours=1))
    waiter = enqueue("tests.noop", {}, depends_on=[dep], delay=timedelta(minutes=1))
    assert run_jobs().ran == 0  # the dependency is scheduled for later
    assert status(waiter) == JobStatus.BLOCKED
    Job.objects.filter(pk=waiter.pk).update(scheduled_at=timezone.now() - timedelta(minutes=5))
    run_job(dep)
    assert status(waiter) == JobStatus.PENDING


def test_a_dependency_scheduled_for_later_keeps_the_waiter_blocked() -> None:
    dep = enqueue("tests.noop", {}, delay=timedelta(hours=1))
    waiter = enqueue("tests.noop", {}, depends_on=[dep])
    run_burst(queues=["default"])
    assert status(waiter) == JobStatus.BLOCKED
    assert status(dep) == JobStatus.SCHEDULED


def test_a_dependency_that_times_out_fails_its_waiter() -> None:
    dep = enqueue("advwf.async_sleep", {"seconds": 5}, timeout=0.2, max_attempts=1)
    waiter = enqueue("tests.noop", {}, depends_on=[dep])
    run_burst(queues=["default"])
    assert status(dep) == JobStatus.FAILED
    assert status(waiter) == JobStatus.FAILED


# -- tasks backend --------------------------------------------------------------------------


def test_the_tasks_backend_reports_a_blocked_job_as_ready() -> None:
    try:
        from django.tasks import TaskResultStatus, default_task_backend
    except ImportError:
        from django_tasks import TaskResultStatus, default_task_backend  # type: ignore[no-redef]

    dep = enqueue("tests.noop", {})
    waiter = enqueue("tests.testapp.tasks.add", {"args": [1, 2], "kwargs": {}}, depends_on=[dep])
    result = default_task_backend.get_result(str(waiter.uuid))
    assert result.status == TaskResultStatus.READY


# -- scale ------------------------------------------------------------------------------------


def test_a_fan_in_over_ten_thousand_jobs() -> None:
    group = bulk_enqueue("tests.noop", [{} for _ in range(10_000)])
    # The group's 10,000 chains are looked up, locked and recorded per chunk of 500 ids, not
    # job by job (three statements per chain before): a fan-in costs about as much as
    # writing its blocker rows.
    with CaptureQueriesContext(connection) as then_queries:
        fan_in = group.then("tests.noop", {})
    with CaptureQueriesContext(connection) as ids_queries:
        by_ids = enqueue("tests.noop", {}, depends_on=[j.pk for j in group])
    chunks = 10_000 // 500
    # Marking a chunk waited for is an UPDATE that returns its rows: one statement, three
    # on MariaDB (a locking read, the UPDATE, a read back: db/mysql.py).
    update = 3 if connection.vendor == "mysql" else 1
    assert len(then_queries) <= (3 + update) * chunks + 10, len(then_queries)
    assert len(ids_queries) <= (1 + update) * chunks + 10, len(ids_queries)
    assert status(fan_in) == JobStatus.BLOCKED
    run_burst(queues=["default"], concurrency=8)
    assert status(fan_in) == JobStatus.COMPLETED
    assert status(by_ids) == JobStatus.COMPLETED
    assert JobBlocker.objects.count() == 0


def test_a_chain_of_a_thousand_steps(django_assert_max_num_queries: Any) -> None:
    first = enqueue("advwf.recurse", {"n": 0, "of": 1000})
    run_burst(queues=["default"])
    with django_assert_max_num_queries(2):
        steps = list(Chain(first.pk).jobs())
    assert [j.chain_index for j in steps] == list(range(1000))
    assert {j.status for j in steps} == {JobStatus.COMPLETED}


def test_a_failure_cascades_down_two_thousand_waiters() -> None:
    """A line of jobs, each waiting for the one before: cancelling the first decides them
    all (fail) in the same call, without a recursion limit."""
    previous = enqueue("tests.noop", {})
    first = previous
    for _ in range(2000):
        previous = enqueue("tests.noop", {}, depends_on=[previous])
    django_sqlq.cancel(first)
    assert Job.objects.blocked().count() == 0
    assert Job.objects.filter(status=JobStatus.FAILED).count() == 2000
    assert JobBlocker.objects.count() == 0


# -- real worker processes ------------------------------------------------------------------


def test_waiters_enqueued_while_their_dependencies_complete_are_all_released(
    spawn_worker: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    """The race between a completion and an enqueue that reads the dependency as not done:
    no waiter may stay blocked for ever."""
    worker = spawn_worker("--queue", "default", "--concurrency", "4")
    worker.wait_ready()
    waiters = []
    for i in range(150):
        dep = enqueue("wf.record", rec(tmp_path / "deps", str(i)))
        waiters.append(enqueue("tests.noop", {}, depends_on=[dep]))
    wait_for(lambda: Job.objects.filter(status=JobStatus.PENDING).count() == 0, 60)
    wait_for(lambda: not Job.objects.exclude(status=JobStatus.COMPLETED).exists(), 60)
    assert JobBlocker.objects.count() == 0
    assert "database error" not in worker.output()


def test_cancelling_waiters_while_their_dependencies_complete(
    spawn_worker: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    worker = spawn_worker("--queue", "default", "--concurrency", "4")
    worker.wait_ready()
    waiters, errors = [], []
    for i in range(200):
        dep = enqueue("wf.record", rec(tmp_path / "deps", str(i)))
        waiter = enqueue("tests.noop", {}, depends_on=[dep])
        try:
            django_sqlq.cancel(waiter)
        except Exception as exc:
            errors.append(repr(exc))
        waiters.append(waiter)
    wait_for(lambda: len(ran(tmp_path / "deps")) == 200, 60)
    wait_for(lambda: not Job.objects.filter(status__in=["pending", "processing"]).exists(), 60)
    assert errors == []
    assert "deadlock" not in worker.output()
    statuses = {status(w) for w in waiters}
    assert statuses <= {JobStatus.CANCELLED, JobStatus.COMPLETED}
    assert JobBlocker.objects.count() == 0


def test_a_sigkilled_step_after_continue_with_writes_its_next_step_once(
    spawn_worker: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    started, release = tmp_path / "started", tmp_path / "release"
    first = enqueue(
        "advwf.continue_then_block",
        {"path": str(tmp_path / "log"), "started": str(started), "release": str(release)},
        max_attempts=3,
    )
    env = {"SQLQ_TEST_LEASE_SECONDS": "2"}
    doomed = spawn_worker("--queue", "default", env=env)
    wait_for(lambda: started.exists() and started.read_text().strip(), 30)
    doomed.signal(signal.SIGKILL)
    doomed.wait()
    assert Job.objects.count() == 1  # continue_with wrote nothing: the attempt never ended
    release.touch()
    spawn_worker("--queue", "default", env=env).wait_ready()
    wait_for(lambda: ran(tmp_path / "log") == ["next"], 60)
    wait_for(lambda: status(first) == JobStatus.COMPLETED, 30)
    assert [j.chain_index for j in Chain(first.pk).jobs()] == [0, 1]


def test_a_dependency_processing_on_a_real_worker_then_completing(
    spawn_worker: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    started, release = tmp_path / "started", tmp_path / "release"
    dep = enqueue(
        "faults.block",
        {"path": str(tmp_path / "log"), "started": str(started), "release": str(release), "n": 1},
    )
    worker = spawn_worker("--queue", "default")
    worker.wait_ready()
    wait_for(started.exists, 30)
    assert status(dep) == JobStatus.PROCESSING
    waiter = enqueue("wf.record", rec(tmp_path / "w", "waiter"), depends_on=[dep])
    assert status(waiter) == JobStatus.BLOCKED
    release.touch()
    wait_for(lambda: ran(tmp_path / "w") == ["waiter"], 30)


# -- async enqueue --------------------------------------------------------------------------


def test_aenqueue_with_depends_on_blocks() -> None:
    dep = enqueue("tests.noop", {})
    waiter = async_to_sync(aenqueue)("tests.noop", {}, depends_on=[dep, dep.chain])
    assert status(waiter) == JobStatus.BLOCKED
    run_jobs()
    assert status(waiter) == JobStatus.COMPLETED


# -- second round: retries, policies through chains, operators racing resolution ------------


def test_a_waiter_retried_after_its_policy_failed_runs_once_when_its_other_dependency_ends(
    tmp_path: Path,
) -> None:
    """[A fails, B pending]: the waiter fails; retried, it runs at once. B completing later
    must not release it a second time."""
    a = enqueue("wf.record", rec(tmp_path / "log", "a", fail=True), max_attempts=1)
    b = enqueue("wf.record", rec(tmp_path / "log", "b"), delay=timedelta(hours=1))
    waiter = enqueue("wf.record", rec(tmp_path / "log", "waiter"), depends_on=[a, b])
    run_jobs()
    assert status(waiter) == JobStatus.FAILED
    admin_retry([waiter])
    run_jobs()
    assert ran(tmp_path / "log") == ["a", "waiter"]
    run_job(b)
    run_jobs()
    assert ran(tmp_path / "log") == ["a", "waiter", "b"]
    assert status(waiter) == JobStatus.COMPLETED
    assert JobBlocker.objects.count() == 0


def test_a_cancelled_blocked_job_retried_runs_once(tmp_path: Path) -> None:
    dep = enqueue("wf.record", rec(tmp_path / "log", "dep"))
    waiter = enqueue("wf.record", rec(tmp_path / "log", "waiter"), depends_on=[dep])
    django_sqlq.cancel(waiter)
    admin_retry([waiter])
    run_jobs()
    assert sorted(ran(tmp_path / "log")) == ["dep", "waiter"]
    assert status(waiter) == JobStatus.COMPLETED
    assert JobBlocker.objects.count() == 0


def test_the_admin_cancel_action_cancels_a_blocked_job(admin_client: Any) -> None:
    dep = enqueue("tests.noop", {})
    waiter = enqueue("tests.noop", {}, depends_on=[dep])
    data = {"action": "cancel_jobs", "_selected_action": [waiter.pk], "index": 0}
    admin_client.post(reverse("admin:django_sqlq_job_changelist"), data, follow=True)
    assert status(waiter) == JobStatus.CANCELLED
    run_jobs()
    assert status(waiter) == JobStatus.CANCELLED


@pytest.mark.parametrize(
    ("policy", "expected"),
    [("fail", JobStatus.FAILED), ("cancel", JobStatus.CANCELLED), ("run", JobStatus.COMPLETED)],
)
def test_a_group_member_whose_chain_fails_midway(
    tmp_path: Path, policy: str, expected: str
) -> None:
    ok = {"target": "wf.record", "next": rec(tmp_path / "log", "ok-next")}
    bad = {"target": "wf.record", "next": rec(tmp_path / "log", "bad-next", fail=True)}
    group = bulk_enqueue("advwf.continue_into", [ok, bad], max_attempts=1)
    fan_in = group.then("wf.record", rec(tmp_path / "log", "fan-in"), on_dependency_failure=policy)
    run_jobs()
    assert status(fan_in) == expected
    if policy == "fail":
        # The dependency named is the failed member's chain (or its failed step).
        failed_step = Chain(group[1].pk).jobs().get(chain_index=1)
        error = Job.objects.get(pk=fan_in.pk).last_error or ""
        assert str(group[1].pk) in error or str(failed_step.pk) in error


def test_a_step_continued_into_the_future_keeps_the_chain_waiter_blocked(tmp_path: Path) -> None:
    first = enqueue(
        "advwf.continue_into",
        {"target": "wf.record", "next": rec(tmp_path / "log", "later"), "delay_seconds": 3600},
    )
    waiter = enqueue("wf.record", rec(tmp_path / "log", "waiter"), depends_on=[first.chain])
    run_jobs()
    later = Chain(first.pk).jobs().get(chain_index=1)
    assert later.status == JobStatus.SCHEDULED
    assert status(waiter) == JobStatus.BLOCKED
    run_job(later)
    run_jobs()
    assert ran(tmp_path / "log") == ["later", "waiter"]


@pytest.mark.parametrize(
    "options",
    [
        pytest.param({"priority": 10**9}, id="priority"),
        pytest.param({"max_attempts": 0}, id="max_attempts"),
        pytest.param({"timeout": -1}, id="timeout"),
        pytest.param({"queue": ""}, id="empty-queue"),
    ],
)
def test_continue_with_bad_options_fails_the_attempt(options: dict[str, Any]) -> None:
    job = enqueue(
        "advwf.continue_into", {"target": "tests.noop", "options": options}, max_attempts=1
    )
    run_burst(queues=["default"])
    assert status(job) == JobStatus.FAILED
    assert Job.objects.count() == 1


def test_an_atomic_step_that_fails_after_continue_with_continues_once_on_retry(
    tmp_path: Path,
) -> None:
    first = enqueue(
        "advwf.atomic_continue",
        {"path": str(tmp_path / "log"), "fail_attempts": 2},
        max_attempts=3,
    )
    run_burst(queues=["default"])
    assert status(first) == JobStatus.COMPLETED
    assert ran(tmp_path / "log") == ["next"]
    assert [j.chain_index for j in Chain(first.pk).jobs()] == [0, 1]


def test_an_atomic_step_failing_for_good_writes_no_step_and_fails_its_chain_waiter(
    tmp_path: Path,
) -> None:
    first = enqueue(
        "advwf.atomic_continue",
        {"path": str(tmp_path / "log"), "fail_attempts": 9},
        max_attempts=2,
    )
    waiter = enqueue("tests.noop", {}, depends_on=[first.chain])
    run_burst(queues=["default"])
    assert status(first) == JobStatus.FAILED
    assert Job.objects.count() == 2
    assert status(waiter) == JobStatus.FAILED


@pytest.mark.parametrize("policy", ["FAIL", "Run", "", "ignore"])
def test_an_unknown_policy_is_refused_and_writes_nothing(policy: str) -> None:
    dep = enqueue("tests.noop", {})
    with pytest.raises(InvalidJobError):
        enqueue("tests.noop", {}, depends_on=[dep], on_dependency_failure=policy)
    assert Job.objects.count() == 1


def test_the_run_policy_releases_and_the_cascade_stops_there(tmp_path: Path) -> None:
    a = enqueue("wf.record", rec(tmp_path / "log", "a", fail=True), max_attempts=1)
    b = enqueue(
        "wf.record", rec(tmp_path / "log", "b"), depends_on=[a], on_dependency_failure="run"
    )
    c = enqueue("wf.record", rec(tmp_path / "log", "c"), depends_on=[b])
    run_jobs()
    assert ran(tmp_path / "log") == ["a", "b", "c"]
    assert status(c) == JobStatus.COMPLETED


def test_bulk_enqueue_waiters_with_unique_keys() -> None:
    dep = enqueue("tests.noop", {})
    first = bulk_enqueue("tests.noop", [{}, {}], depends_on=[dep], unique_key=["k1", "k2"])
    again = bulk_enqueue("tests.noop", [{}, {}], depends_on=[dep], unique_key=["k1", "k3"])
    assert again[0].pk == first[0].pk
    assert JobBlocker.objects.count() == 3
    run_jobs()
    assert Job.objects.exclude(status=JobStatus.COMPLETED).count() == 0


def test_cancelling_a_running_dependency_decides_its_waiter(tmp_path: Path) -> None:
    """A dependency cancelled while it runs (a cancel request): once its worker records the
    cancel, the waiter is decided by its policy."""
    started, release = tmp_path / "started", tmp_path / "release"
    dep = enqueue(
        "faults.block",
        {"path": str(tmp_path / "log"), "started": str(started), "release": str(release), "n": 1},
    )
    waiter = enqueue("tests.noop", {}, depends_on=[dep], on_dependency_failure="cancel")
    worker = threading.Thread(target=lambda: run_burst(queues=["default"]))
    worker.start()
    try:
        wait_for(started.exists, 30)
        django_sqlq.cancel(dep)
    finally:
        release.touch()
        worker.join(60)
    assert status(dep) in (JobStatus.CANCELLED, JobStatus.COMPLETED)
    expected = JobStatus.CANCELLED if status(dep) == JobStatus.CANCELLED else JobStatus.COMPLETED
    wait_for(lambda: status(waiter) == expected or run_jobs().ran, 10)
    assert status(waiter) == expected


def test_a_dependency_whose_worker_is_killed_for_good_decides_its_waiters(
    spawn_worker: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    """The reaper fails a job whose lease expired on its last attempt: its waiters are
    decided in the same transaction."""
    started, release = tmp_path / "started", tmp_path / "release"
    dep = enqueue(
        "faults.block",
        {"path": str(tmp_path / "log"), "started": str(started), "release": str(release), "n": 1},
        max_attempts=1,
    )
    failing = enqueue("tests.noop", {}, depends_on=[dep])
    running = enqueue(
        "wf.record", rec(tmp_path / "w", "runs"), depends_on=[dep], on_dependency_failure="run"
    )
    env = {"SQLQ_TEST_LEASE_SECONDS": "2"}
    doomed = spawn_worker("--queue", "default", env=env)
    wait_for(started.exists, 30)
    doomed.signal(signal.SIGKILL)
    doomed.wait()
    reaper = spawn_worker("--queue", "default", env=env)
    reaper.wait_ready()
    try:
        wait_for(lambda: ran(tmp_path / "w") == ["runs"], 60)
    except AssertionError:  # say what was left (seen once under load, not reproduced)
        jobs = list(Job.objects.values_list("pk", "status", "attempts", "last_error"))
        raise AssertionError(f"{jobs}\n{doomed.output()}\n{reaper.output()}") from None
    assert status(dep) == JobStatus.FAILED
    assert status(failing) == JobStatus.FAILED
    # Its handler has returned; the worker writes its completion just after (in a batch).
    wait_for(lambda: status(running) == JobStatus.COMPLETED, 30)


def test_bulk_enqueue_resolves_a_group_once_for_the_whole_batch() -> None:
    """bulk_enqueue(20 jobs, depends_on=[a group of 500]) reads the group's chains once, not
    once per job: 20 x 10,000 took 141 s on PostgreSQL (16 s on SQLite)."""
    group = bulk_enqueue("tests.noop", [{} for _ in range(500)])
    with counting_queries() as one:
        group.then("tests.noop", {})
    with counting_queries() as twenty:
        waiters = bulk_enqueue("tests.noop", [{} for _ in range(20)], depends_on=[group])
    assert JobBlocker.objects.filter(job_id__in=[w.pk for w in waiters]).count() == 20 * 500
    assert twenty[0] <= one[0] + 50, (one[0], twenty[0])


@contextlib.contextmanager
def counting_queries() -> Iterator[list[int]]:
    """Count the statements run on "default" inside the block (no logging limit)."""
    count = [0]

    def wrapper(execute: Callable[..., Any], *args: Any) -> Any:
        count[0] += 1
        return execute(*args)

    with connections["default"].execute_wrapper(wrapper):
        yield count
