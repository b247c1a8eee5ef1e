"""A second adversary of the workflows (issue 16), written from the user documentation only:
real worker processes completing, failing, timing out and losing the steps and dependencies
that overlapping waiters wait for, while operators cancel, delete, retry and prune.

One finding (completions and failures for good that count off the same waiters deadlocked
on PostgreSQL) is fixed: its test, test_dense_overlapping_waiters_never_deadlock_the_workers,
is a regression test now; the others are behaviour that held."""

from __future__ import annotations

import random
import re
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connections, transaction
from django.test import Client
from django.urls import reverse

import django_sqlq
from django_sqlq import Chain, bulk_enqueue, enqueue
from django_sqlq.models import Job, JobBlocker, JobStatus
from tests.conftest import WorkerProcess, wait_for
from tests.testapp import (  # noqa: F401 (the handlers)
    adversary2_workflow_jobs,
    adversary_workflow_jobs,
    workflow_jobs,
)

pytestmark = pytest.mark.django_db(transaction=True)

FINISHED = (JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELLED)
CHANGELIST = "admin:django_sqlq_job_changelist"


def until(condition: Callable[[], Any], timeout: float, what: str) -> Any:
    try:
        return wait_for(condition, timeout=timeout, interval=0.05)
    except AssertionError:
        raise AssertionError(f"not within {timeout}s: {what}") from None


def ran(path: Path) -> Counter[str]:
    """How many times each name was recorded in ``path`` (wf.record, wf.step)."""
    if not path.exists():
        return Counter()
    return Counter(line.split()[0] for line in path.read_text().splitlines())


def order(path: Path) -> list[str]:
    return [line.split()[0] for line in path.read_text().splitlines()] if path.exists() else []


def rec(path: Path, name: str, **extra: Any) -> dict[str, Any]:
    return {"path": str(path), "name": name, **extra}


def at(moment: datetime | None) -> datetime:
    assert moment is not None
    return moment


def status(job: Job | int) -> str:
    return str(Job.objects.get(pk=job.pk if isinstance(job, Job) else job).status)


def nothing_left() -> bool:
    return not Job.objects.exclude(status__in=FINISHED).exists()


def bad_lines(output: str, allowed: tuple[str, ...] = ()) -> list[str]:
    """Tracebacks, ERROR lines and deadlocks in a worker's output (-v 1)."""
    return [
        line
        for line in output.splitlines()
        if ("ERROR" in line or "Traceback" in line or "deadlock" in line.lower())
        and not any(a in line for a in allowed)
    ]


def workers(
    spawn_worker: Callable[..., WorkerProcess], n: int, *args: str, **env: str
) -> list[WorkerProcess]:
    started = [spawn_worker("--concurrency", "4", "-v", "1", *args, env=env) for _ in range(n)]
    for worker in started:
        worker.wait_ready()
    return started


def stop(started: list[WorkerProcess]) -> str:
    for worker in started:
        worker.signal(signal.SIGTERM)
    for worker in started:
        assert worker.wait(30) == 0, worker.output()
    return "\n".join(w.output() for w in started)


def admin_action(client: Client, action: str, jobs: list[Job]) -> None:
    data = {"action": action, "_selected_action": [j.pk for j in jobs], "index": 0, "post": "yes"}
    response = client.post(reverse(CHANGELIST), data, follow=True)
    assert response.status_code == 200


# -- many workers, overlapping waiters, mixed policies ----------------------------------------


def test_overlapping_waiters_with_mixed_policies_under_3_workers(
    tmp_path: Path, spawn_worker: Callable[..., WorkerProcess]
) -> None:
    rng = random.Random(16)
    log = tmp_path / "runs"
    started = workers(spawn_worker, 3)
    deps = []
    for i in range(60):
        fail = i % 7 == 3
        deps.append(enqueue("wf.record", rec(log, f"d{i}", fail=fail, sleep=0.01), max_attempts=1))
    failing = {d.pk for d in deps if d.payload["fail"]}
    # Enqueued while the workers complete and fail the dependencies.
    first: dict[int, tuple[Job, str, list[Job]]] = {}
    for k in range(40):
        mine = rng.sample(deps, 6)
        policy = rng.choice(["fail", "cancel", "run"])
        job = enqueue(
            "wf.record", rec(log, f"w{k}"), depends_on=mine, on_dependency_failure=policy
        )
        first[job.pk] = (job, policy, mine)
    expected: dict[int, str] = {}
    for pk, (_, policy, mine) in first.items():
        if any(d.pk in failing for d in mine) and policy != "run":
            expected[pk] = JobStatus.FAILED if policy == "fail" else JobStatus.CANCELLED
        else:
            expected[pk] = JobStatus.COMPLETED
    # A second layer over overlapping waiters of the first (the cascade).
    second: dict[int, tuple[Job, str, list[int]]] = {}
    for k in range(20):
        mine_ids = rng.sample(sorted(first), 4)
        policy = rng.choice(["fail", "cancel", "run"])
        job = enqueue(
            "wf.record", rec(log, f"x{k}"), depends_on=mine_ids, on_dependency_failure=policy
        )
        second[job.pk] = (job, policy, mine_ids)
        if any(expected[i] != JobStatus.COMPLETED for i in mine_ids) and policy != "run":
            expected[job.pk] = JobStatus.FAILED if policy == "fail" else JobStatus.CANCELLED
        else:
            expected[job.pk] = JobStatus.COMPLETED
    until(nothing_left, 90, "every job finished")
    output = stop(started)

    got = dict(Job.objects.filter(pk__in=list(expected)).values_list("pk", "status"))
    assert got == expected
    runs = ran(log)
    for pk, (job, _, _) in {**first, **second}.items():
        name = job.payload["name"]
        assert runs[name] == (1 if expected[pk] == JobStatus.COMPLETED else 0), name
    assert JobBlocker.objects.count() == 0
    assert bad_lines(output, allowed=("fails on purpose",)) == []


# -- operators at work while the workers run ---------------------------------------------------


def test_operators_cancel_and_delete_dependencies_and_waiters_while_3_workers_run(
    tmp_path: Path, spawn_worker: Callable[..., WorkerProcess], admin_client: Client
) -> None:
    rng = random.Random(7)
    log = tmp_path / "runs"
    started = workers(spawn_worker, 3)
    deps = [enqueue("wf.record", rec(log, f"d{i}", sleep=0.1)) for i in range(120)]
    waiters = {}
    errors = []
    for round_ in range(12):
        for k in range(5):
            mine = rng.sample(deps, 5)  # those the operator has not deleted
            job = enqueue("wf.record", rec(log, f"w{round_}-{k}"), depends_on=mine)
            waiters[job.pk] = (job, mine)
        try:
            for dep in rng.sample(deps, 3):
                django_sqlq.cancel(dep)
            doomed = rng.sample(deps, 2)
            admin_action(admin_client, "delete_jobs", doomed)
            deps = [d for d in deps if d not in doomed]
            admin_action(
                admin_client, "cancel_jobs", [w for w, _ in rng.sample(list(waiters.values()), 3)]
            )
            for job, _ in rng.sample(list(waiters.values()), 2):
                django_sqlq.cancel(job)
        except Exception as exc:  # a deadlock raised to the operator
            errors.append(f"round {round_}: {exc!r}")
    until(nothing_left, 90, "every job finished")
    output = stop(started)

    assert errors == []
    assert bad_lines(output) == []
    assert not Job.objects.filter(status=JobStatus.BLOCKED).exists()
    assert JobBlocker.objects.count() == 0
    runs = ran(log)
    for pk, (job, mine) in waiters.items():
        check_waiter(runs, pk, job.payload["name"], mine)


def check_waiter(runs: Counter[str], pk: int, name: str, mine: list[Job]) -> None:
    """At most once; completed means it ran; failed (by its policy) means it never ran;
    cancelled may have run (an operator cancelled it while it ran); and it ran only once all
    its dependencies had completed (or were deleted after)."""
    final = status(pk)
    assert runs[name] <= 1, name
    if final == JobStatus.COMPLETED:
        assert runs[name] == 1, name
    if final == JobStatus.FAILED:
        assert runs[name] == 0, name
    if runs[name]:
        left = dict(Job.objects.filter(pk__in=[d.pk for d in mine]).values_list("pk", "status"))
        assert set(left.values()) <= {JobStatus.COMPLETED}, (name, final, left)


# -- chains being run while waiters are enqueued on them ---------------------------------------


@pytest.mark.parametrize("step", ["wf.step", "wf.atomic_step"])
def test_waiters_enqueued_on_chains_while_3_workers_run_them_each_run_once_after_the_end(
    tmp_path: Path, spawn_worker: Callable[..., WorkerProcess], step: str
) -> None:
    log = tmp_path / "steps"
    wlog = tmp_path / "waiters"
    started = workers(spawn_worker, 3)
    firsts = [
        enqueue(step, {"path": str(log), "n": 0, "of": 8, "sleep": 0.02, "tag": f"c{c}"})
        for c in range(6)
    ]
    waiters: list[tuple[Job, int]] = []
    for k in range(60):
        first = firsts[k % len(firsts)]
        waiters.append(
            (enqueue("wf.record", rec(wlog, f"w{k}"), depends_on=[Chain(first.pk)]), first.pk)
        )
    until(nothing_left, 90, "every chain and waiter finished")
    output = stop(started)

    assert bad_lines(output) == []
    runs = ran(wlog)
    for waiter, chain_id in waiters:
        waiter.refresh_from_db()
        name = waiter.payload["name"]
        steps = list(Chain(chain_id).jobs())
        assert [s.chain_index for s in steps] == list(range(8)), name
        assert {s.status for s in steps} == {JobStatus.COMPLETED}
        assert (waiter.status, waiter.attempts, runs[name]) == (JobStatus.COMPLETED, 1, 1), name
        assert at(waiter.started_at) >= at(steps[-1].completed_at), name
    assert JobBlocker.objects.count() == 0


# -- a step that ends badly: cancelled while running, timed out, reaped ----------------------


def chain_waiters(log: Path, first: Job) -> dict[str, Job]:
    return {
        p: enqueue("wf.record", rec(log, p), depends_on=[first.chain], on_dependency_failure=p)
        for p in ("fail", "cancel", "run")
    }


def assert_policies(log: Path, waiters: dict[str, Job], step: Job) -> None:
    until(
        lambda: all(status(w) in FINISHED for w in waiters.values()),
        60,
        "the chain's waiters decided",
    )
    got = {p: status(w) for p, w in waiters.items()}
    assert got == {
        "fail": JobStatus.FAILED,
        "cancel": JobStatus.CANCELLED,
        "run": JobStatus.COMPLETED,
    }
    assert ran(log) == Counter({"run": 1})
    for p in ("fail", "cancel"):
        # It names the dependency: the chain it waited for.
        chain_id = step.chain_id or step.pk
        assert f"chain {chain_id}," in str(Job.objects.get(pk=waiters[p].pk).last_error)


def test_cancelling_a_processing_step_ends_the_chain_and_decides_its_waiters(
    tmp_path: Path, spawn_worker: Callable[..., WorkerProcess]
) -> None:
    started_file, release = tmp_path / "started", tmp_path / "release"
    first = enqueue(
        "advwf.continue_then_block",
        {"path": str(tmp_path / "next"), "started": str(started_file), "release": str(release)},
    )
    log = tmp_path / "waiters"
    waiters = chain_waiters(log, first)
    started = workers(spawn_worker, 1)
    until(lambda: started_file.exists() and started_file.read_text().strip(), 30, "step runs")
    assert django_sqlq.cancel(first) == django_sqlq.CancelResult.REQUESTED
    release.touch()
    until(lambda: status(first) == JobStatus.CANCELLED, 30, "the step cancelled")
    assert_policies(log, waiters, first)
    output = stop(started)
    assert [s.pk for s in Chain(first.pk).jobs()] in ([first.pk], [])
    assert Job.objects.count() == 4  # no next step
    assert not (tmp_path / "next").exists()
    assert bad_lines(output) == []


def test_a_step_that_times_out_ends_the_chain_and_decides_its_waiters(
    tmp_path: Path, spawn_worker: Callable[..., WorkerProcess]
) -> None:
    first = enqueue(
        "advwf.continue_into",
        {
            "target": "advwf.async_sleep",
            "next": {"seconds": 30},
            "options": {"timeout": 1, "max_attempts": 1},
        },
    )
    log = tmp_path / "waiters"
    waiters = chain_waiters(log, first)
    started = workers(spawn_worker, 1)
    until(lambda: Chain(first.pk).jobs().count() == 2, 30, "the second step written")
    step = Chain(first.pk).jobs().last()
    assert step is not None
    until(lambda: status(step) == JobStatus.FAILED, 30, "the step timed out")
    assert_policies(log, waiters, step)
    output = stop(started)
    assert bad_lines(output, allowed=("timed out", "Timeout", "timeout")) == []


@pytest.mark.parametrize("cancel_requested", [False, True], ids=["plain", "cancel-requested"])
def test_the_reaper_ends_a_chain_step_whose_worker_was_killed_and_decides_its_waiters(
    tmp_path: Path, spawn_worker: Callable[..., WorkerProcess], cancel_requested: bool
) -> None:
    started_file, release = tmp_path / "started", tmp_path / "release"
    first = enqueue(
        "advwf.continue_into",
        {
            "target": "faults.block",
            "next": {
                "n": 1,
                "path": str(tmp_path / "blocked"),
                "started": str(started_file),
                "release": str(release),
            },
            "options": {"max_attempts": 1},
        },
    )
    log = tmp_path / "waiters"
    waiters = chain_waiters(log, first)
    env = {"SQLQ_TEST_LEASE_SECONDS": "2"}
    doomed = spawn_worker("--queue", "default", env=env)
    until(started_file.exists, 30, "the second step runs")
    step = Chain(first.pk).jobs().last()
    assert step is not None
    assert step.chain_index == 1
    if cancel_requested:
        assert django_sqlq.cancel(step) == django_sqlq.CancelResult.REQUESTED
    doomed.signal(signal.SIGKILL)
    doomed.wait()
    release.touch()
    started = workers(spawn_worker, 1, **env)
    until(lambda: status(step) in FINISHED, 60, "the reaper ended the step")
    assert status(step) == (JobStatus.CANCELLED if cancel_requested else JobStatus.FAILED)
    assert_policies(log, waiters, step)
    output = stop(started)
    assert bad_lines(output) == []


# -- retrying a failed middle step ------------------------------------------------------------


def test_retrying_a_failed_middle_step_continues_the_chain_once_and_leaves_failed_waiters(
    tmp_path: Path, spawn_worker: Callable[..., WorkerProcess], admin_client: Client
) -> None:
    after = tmp_path / "after"
    first = enqueue(
        "advwf.continue_into",
        {
            "target": "advwf2.continue_unless_broken",
            "next": {"path": str(after), "fixed": str(tmp_path / "fixed")},
            "options": {"max_attempts": 1},
        },
    )
    log = tmp_path / "waiters"
    waiters = chain_waiters(log, first)
    started = workers(spawn_worker, 2)
    until(lambda: Chain(first.pk).jobs().count() == 2, 30, "the middle step written")
    middle = Chain(first.pk).jobs().last()
    assert middle is not None
    until(lambda: status(middle) == JobStatus.FAILED, 30, "the middle step failed")
    assert_policies(log, waiters, middle)
    (tmp_path / "fixed").touch()
    admin_action(admin_client, "retry_jobs", [middle])
    until(
        lambda: ran(after) == Counter({"next": 1}),
        30,
        f"the chain went on: {list(Chain(first.pk).jobs().values_list('pk', 'status'))}",
    )
    until(nothing_left, 30, "everything finished")
    output = stop(started)
    steps = list(Chain(first.pk).jobs())
    assert [(s.chain_index, s.status) for s in steps] == [
        (0, JobStatus.COMPLETED),
        (1, JobStatus.COMPLETED),
        (2, JobStatus.COMPLETED),
    ]
    # The waiters the failure decided stay decided; the "run" one ran once.
    assert {p: status(w) for p, w in waiters.items()} == {
        "fail": JobStatus.FAILED,
        "cancel": JobStatus.CANCELLED,
        "run": JobStatus.COMPLETED,
    }
    assert ran(log) == Counter({"run": 1})
    # A waiter enqueued now waits for nothing: the chain is done.
    late = enqueue("tests.noop", {}, depends_on=[first.chain])
    assert late.status == JobStatus.PENDING
    assert bad_lines(output, allowed=("broken until fixed",)) == []


# -- pruning while chains go on -----------------------------------------------------------------


def test_pruning_while_chains_continue_keeps_their_waiters_and_the_chain_page(
    tmp_path: Path, spawn_worker: Callable[..., WorkerProcess], admin_client: Client
) -> None:
    log = tmp_path / "steps"
    wlog = tmp_path / "waiters"
    firsts = [
        enqueue("wf.step", {"path": str(log), "n": 0, "of": 12, "sleep": 0.25, "c": c})
        for c in range(3)
    ]
    early = {
        f.pk: enqueue("wf.record", rec(wlog, f"e{f.pk}"), depends_on=[f.chain]) for f in firsts
    }
    env = {"SQLQ_TEST_KEEP_FINISHED": "1", "SQLQ_TEST_PRUNE_INTERVAL": "0.2"}
    started = workers(spawn_worker, 2, **env)
    until(
        lambda: not Job.objects.filter(pk__in=[f.pk for f in firsts]).exists(),
        60,
        "the first steps pruned",
    )
    # The chains go on without their first job; the chain page still shows them.
    live = [
        f
        for f in firsts
        if Job.objects.filter(chain_id=f.pk).exclude(status__in=FINISHED).exists()
    ]
    assert live, "a chain ended before its first step was pruned: slow the steps down"
    page = admin_client.get(reverse("admin:django_sqlq_job_chain", args=[live[0].pk]))
    assert page.status_code in (200, 404), page.status_code
    until(lambda: all(status(w) in FINISHED for w in early.values()), 90, "the early waiters ran")
    output = stop(started)
    assert {status(w) for w in early.values()} == {JobStatus.COMPLETED}
    assert ran(wlog) == Counter({f"e{f.pk}": 1 for f in firsts})
    assert ran(log) == Counter({str(n): 3 for n in range(12)})
    assert bad_lines(output) == []


def test_a_waiter_on_a_running_chain_whose_first_step_was_pruned(
    tmp_path: Path, spawn_worker: Callable[..., WorkerProcess], admin_client: Client
) -> None:
    log = tmp_path / "steps"
    first = enqueue("wf.step", {"path": str(log), "n": 0, "of": 30, "sleep": 0.2})
    env = {"SQLQ_TEST_KEEP_FINISHED": "1", "SQLQ_TEST_PRUNE_INTERVAL": "0.2"}
    started = workers(spawn_worker, 1, **env)
    until(lambda: not Job.objects.filter(pk=first.pk).exists(), 60, "the first step pruned")
    assert Job.objects.filter(chain_id=first.pk).exclude(status__in=FINISHED).exists()
    response = admin_client.get(reverse("admin:django_sqlq_job_chain", args=[first.pk]))
    # The chain is alive: its page lists the steps left (it is not "no job").
    assert response.status_code == 200
    waiter = enqueue("wf.record", rec(tmp_path / "w", "w"), depends_on=[Chain(first.pk)])
    assert waiter.status == JobStatus.BLOCKED
    until(lambda: status(waiter) in FINISHED, 90, "the waiter ran")
    stop(started)
    assert status(waiter) == JobStatus.COMPLETED
    assert ran(log)["29"] == 1


# -- the chain page -----------------------------------------------------------------------------


def long_chain(n: int) -> Job:
    first = enqueue("tests.noop", {})
    Job.objects.filter(pk=first.pk).update(
        chain_id=first.pk, chain_index=0, status=JobStatus.COMPLETED
    )
    Job.objects.bulk_create(
        [
            Job(
                type="tests.noop",
                queue="default",
                payload={},
                status=JobStatus.COMPLETED if i < n - 1 else JobStatus.PENDING,
                chain_id=first.pk,
                chain_index=i,
            )
            for i in range(1, n)
        ],
        batch_size=500,
    )
    return first


def test_the_chain_page_of_2000_steps_shows_500_and_the_last(admin_client: Client) -> None:
    first = long_chain(2000)
    last = Job.objects.get(chain_id=first.pk, chain_index=1999)
    waiter = enqueue("tests.noop", {}, depends_on=[first.chain])
    assert waiter.status == JobStatus.BLOCKED
    url = reverse("admin:django_sqlq_job_chain", args=[first.pk])
    response = admin_client.get(url)
    assert response.status_code == 200
    page = response.content.decode()
    rows = re.findall(r'class="[^"]*sqlq-step" data-job="(\d+)"', page)
    assert len(rows) == 501
    assert rows[-1] == str(last.pk)
    assert str(waiter.pk) in page
    # A later step's id leads to the chain's page.
    later = admin_client.get(reverse("admin:django_sqlq_job_chain", args=[last.pk]), follow=True)
    assert later.status_code == 200
    assert (
        len(re.findall(r'class="[^"]*sqlq-step" data-job="(\d+)"', later.content.decode())) == 501
    )


def test_the_chain_page_needs_the_view_permission(client: Client) -> None:
    first = long_chain(3)
    user = User.objects.create_user("nosy", password="x", is_staff=True)
    client.force_login(user)
    response = client.get(reverse("admin:django_sqlq_job_chain", args=[first.pk]))
    assert response.status_code == 403
    assert "tests.noop" not in response.content.decode()


def test_a_fan_in_over_chains_under_3_workers_runs_once_after_every_chain_end(
    tmp_path: Path, spawn_worker: Callable[..., WorkerProcess]
) -> None:
    log = tmp_path / "steps"
    wlog = tmp_path / "w"
    with transaction.atomic():
        group = bulk_enqueue(
            "wf.step",
            [{"path": str(log), "n": 0, "of": 5, "sleep": 0.01, "g": g} for g in range(30)],
        )
        fan_in = group.then("wf.record", rec(wlog, "fan"))
    started = workers(spawn_worker, 3)
    until(lambda: status(fan_in) in FINISHED, 90, "the fan-in ran")
    output = stop(started)
    fan_in.refresh_from_db()
    assert (fan_in.status, ran(wlog)) == (JobStatus.COMPLETED, Counter({"fan": 1}))
    last_done = max(at(j.completed_at) for j in Job.objects.filter(type="wf.step"))
    assert Job.objects.filter(type="wf.step").count() == 150
    assert at(fan_in.started_at) >= last_done
    assert bad_lines(output) == []


def test_operators_cancel_running_chain_steps_while_3_workers_complete_them(
    tmp_path: Path, spawn_worker: Callable[..., WorkerProcess]
) -> None:
    """The race between a cancel request and the completion that continues the chain."""
    rng = random.Random(3)
    log = tmp_path / "steps"
    wlog = tmp_path / "waiters"
    started = workers(spawn_worker, 3)
    firsts = [
        # Steps of 0.3 s: long enough for the loop below to find some running however fast
        # the workers and however slow the loop on a loaded machine (at 0.05 s, once in CI,
        # every cancel came after its step had finished).
        enqueue("wf.step", {"path": str(log), "n": 0, "of": 10, "sleep": 0.3, "c": c})
        for c in range(12)
    ]
    waiters = {
        f.pk: enqueue("wf.record", rec(wlog, f"w{f.pk}"), depends_on=[f.chain]) for f in firsts
    }
    errors = []
    hit: dict[int, str] = {}  # the steps cancel() said it cancelled or asked to stop
    # Until the chains end (at most 60 s): a count of rounds ran out before a loaded
    # machine's workers had started a step.
    deadline = time.monotonic() + 60
    while (
        time.monotonic() < deadline
        and Job.objects.filter(type="wf.step").exclude(status__in=FINISHED).exists()
    ):
        running = list(Job.objects.filter(type="wf.step", status=JobStatus.PROCESSING)[:20])
        for job in rng.sample(running, min(2, len(running))):
            try:
                result = django_sqlq.cancel(job)
            except Exception as exc:
                errors.append(repr(exc))
            else:
                if result in (
                    django_sqlq.CancelResult.REQUESTED,
                    django_sqlq.CancelResult.CANCELLED,
                ):
                    hit[job.pk] = str(result)
    until(nothing_left, 90, "every chain and waiter finished")
    output = stop(started)

    assert errors == []
    assert bad_lines(output) == []
    for first in firsts:
        steps = list(Chain(first.pk).jobs())
        # (a first step cancelled before it continued has no chain_index)
        indexes = [s.chain_index or 0 for s in steps]
        assert indexes == list(range(len(steps))), first.pk
        # Only the last step may be cancelled: a cancelled step ends the chain.
        assert all(s.status == JobStatus.COMPLETED for s in steps[:-1]), first.pk
        last = steps[-1]
        waiter = Job.objects.get(pk=waiters[first.pk].pk)
        if last.status == JobStatus.COMPLETED:
            assert len(steps) == 10, first.pk
            assert waiter.status == JobStatus.COMPLETED, first.pk
        else:
            assert last.status == JobStatus.CANCELLED, first.pk
            assert waiter.status == JobStatus.FAILED, (first.pk, waiter.last_error)
    assert JobBlocker.objects.count() == 0
    assert hit, "cancel() never found a running step"
    # A cancel requested while the step runs ends it cancelled, whatever its handler returns.
    ended = dict(Job.objects.filter(pk__in=list(hit)).values_list("pk", "status"))
    assert ended == dict.fromkeys(hit, JobStatus.CANCELLED), hit


def test_deleting_the_pending_last_step_of_a_chain_decides_the_chains_waiters(
    tmp_path: Path, spawn_worker: Callable[..., WorkerProcess], admin_client: Client
) -> None:
    first = enqueue(
        "advwf.continue_into",
        {"target": "wf.record", "next": rec(tmp_path / "never", "late"), "delay_seconds": 3600},
    )
    log = tmp_path / "waiters"
    waiters = chain_waiters(log, first)
    started = workers(spawn_worker, 1)
    until(lambda: Chain(first.pk).jobs().count() == 2, 30, "the scheduled second step written")
    step = Chain(first.pk).jobs().last()
    assert step is not None
    assert step.status == JobStatus.SCHEDULED
    assert {status(w) for w in waiters.values()} == {JobStatus.BLOCKED}
    admin_action(admin_client, "delete_jobs", [step])
    assert not Job.objects.filter(pk=step.pk).exists()
    assert_policies(log, waiters, step)
    output = stop(started)
    assert bad_lines(output) == []
    assert JobBlocker.objects.count() == 0


def race(*actions: Callable[[], Any]) -> list[str]:
    """Run the actions in threads released at once (each on its own connection); the
    errors they raised."""
    barrier = threading.Barrier(len(actions))
    errors: list[str] = []

    def run(action: Callable[[], Any]) -> None:
        try:
            barrier.wait(10)
            action()
        except Exception as exc:
            errors.append(repr(exc))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(a,)) for a in actions]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return errors


@pytest.mark.parametrize("how", ["cancel", "delete"])
@pytest.mark.parametrize("wait_for_chain", [False, True], ids=["job", "chain"])
def test_a_waiter_enqueued_while_its_dependency_is_cancelled_or_deleted_is_never_left_blocked(
    how: str, wait_for_chain: bool
) -> None:
    from django_sqlq import lifecycle

    stuck = []
    for i in range(60):
        dep = enqueue("tests.noop", {}, queue="default")
        target: Any = dep.chain if wait_for_chain else dep
        made: list[Job] = []

        def wait(made: list[Job] = made, target: Any = target) -> None:
            made.append(enqueue("tests.noop", {}, depends_on=[target]))

        def end(dep: Job = dep) -> None:
            if how == "cancel":
                django_sqlq.cancel(dep)
            else:
                lifecycle.delete([dep.pk], alias="default")

        errors = race(wait, end)
        errors = [e for e in errors if "there is no " not in e]  # enqueued after the delete
        assert errors == [], (i, errors)
        for waiter in made:
            if status(waiter) == JobStatus.BLOCKED:
                stuck.append((i, waiter.pk))
    assert stuck == []


def test_a_waiter_enqueued_on_a_chain_whose_failed_last_step_was_retried_waits_for_the_rest(
    tmp_path: Path, spawn_worker: Callable[..., WorkerProcess]
) -> None:
    from django_sqlq import lifecycle

    after = tmp_path / "after"
    first = enqueue(
        "advwf.continue_into",
        {
            "target": "advwf2.continue_unless_broken",
            "next": {"path": str(after), "fixed": str(tmp_path / "fixed")},
            "options": {"max_attempts": 1},
        },
    )
    started = workers(spawn_worker, 1)
    until(lambda: Chain(first.pk).jobs().count() == 2, 30, "the second step written")
    step = Chain(first.pk).jobs().last()
    assert step is not None
    until(lambda: status(step) == JobStatus.FAILED, 30, "the second step failed")
    stop(started)
    lifecycle.retry_now([step.pk], alias="default")
    assert status(step) == JobStatus.PENDING
    # The chain's last step is pending again: a waiter enqueued now waits for it.
    waiter = enqueue("wf.record", rec(tmp_path / "w", "waiter"), depends_on=[first.chain])
    assert waiter.status == JobStatus.BLOCKED
    (tmp_path / "fixed").touch()
    started = workers(spawn_worker, 1)
    until(lambda: status(waiter) in FINISHED, 30, "the waiter decided")
    output = stop(started)
    assert status(waiter) == JobStatus.COMPLETED
    steps = list(Chain(first.pk).jobs())
    assert [s.status for s in steps] == [JobStatus.COMPLETED] * 3
    assert at(Job.objects.get(pk=waiter.pk).started_at) >= at(steps[-1].completed_at)
    assert bad_lines(output) == []


def dense_overlapping_waiters(tmp_path: Path, spawn_worker: Callable[..., WorkerProcess]) -> str:
    """Deadlock hunt: every completion batch and every failure for good touches waiters that
    other batches touch too, in two layers, with chains that fail midway among the
    dependencies."""
    rng = random.Random(1616)
    log = tmp_path / "runs"
    with transaction.atomic():
        jobs = [
            enqueue("wf.record", rec(log, f"d{i}", fail=i % 4 == 1), max_attempts=1)
            for i in range(160)
        ]
        chains = [
            enqueue(
                "advwf.continue_into",
                {
                    "target": "wf.record",
                    "next": rec(log, f"c{i}", fail=i % 2 == 1),
                    "options": {"max_attempts": 1},
                },
            )
            for i in range(20)
        ]
        bad = {j.pk for j in jobs if j.payload["fail"]} | {
            c.pk for c in chains if c.payload["next"]["fail"]
        }
        expected: dict[int, str] = {}
        names: dict[int, str] = {}
        layer1 = []
        for k in range(80):
            mine = rng.sample(jobs, 15) + rng.sample(chains, 2)
            policy = rng.choice(["fail", "cancel", "run"])
            job = enqueue(
                "wf.record",
                rec(log, f"w{k}"),
                depends_on=[m if m in jobs else m.chain for m in mine],
                on_dependency_failure=policy,
            )
            broken = any(m.pk in bad for m in mine) and policy != "run"
            expected[job.pk] = (
                {"fail": JobStatus.FAILED, "cancel": JobStatus.CANCELLED}[policy]
                if broken
                else JobStatus.COMPLETED
            )
            names[job.pk] = f"w{k}"
            layer1.append(job)
        for k in range(40):
            mine = rng.sample(layer1, 8)
            policy = rng.choice(["fail", "cancel", "run"])
            job = enqueue(
                "wf.record", rec(log, f"x{k}"), depends_on=mine, on_dependency_failure=policy
            )
            broken = any(expected[m.pk] != JobStatus.COMPLETED for m in mine) and policy != "run"
            expected[job.pk] = (
                {"fail": JobStatus.FAILED, "cancel": JobStatus.CANCELLED}[policy]
                if broken
                else JobStatus.COMPLETED
            )
            names[job.pk] = f"x{k}"
    started = [spawn_worker("--concurrency", "8", "-v", "1") for _ in range(3)]
    for worker in started:
        worker.wait_ready()
    until(nothing_left, 120, "every job finished")
    output = stop(started)

    got = dict(Job.objects.filter(pk__in=list(expected)).values_list("pk", "status"))
    assert got == expected
    runs = ran(log)
    for pk, name in names.items():
        assert runs[name] == (1 if expected[pk] == JobStatus.COMPLETED else 0), name
    assert JobBlocker.objects.count() == 0
    return output


def test_dense_overlapping_waiters_never_deadlock_the_workers(
    tmp_path: Path, spawn_worker: Callable[..., WorkerProcess]
) -> None:
    output = dense_overlapping_waiters(tmp_path, spawn_worker)
    assert [line for line in output.splitlines() if "deadlock" in line.lower()] == []
    assert bad_lines(output, allowed=("fails on purpose",)) == []


def test_dense_overlapping_waiters_on_jobs_and_failing_chains_under_3_workers(
    tmp_path: Path, spawn_worker: Callable[..., WorkerProcess]
) -> None:
    """Whatever the deadlocks cost, every waiter ends as its policy says, at most once."""
    dense_overlapping_waiters(tmp_path, spawn_worker)


def test_the_reaper_fails_dependencies_of_a_killed_worker_while_others_complete_theirs(
    tmp_path: Path, spawn_worker: Callable[..., WorkerProcess]
) -> None:
    """The reaper's failures and the healthy workers' completions count off the same
    waiters at once."""
    rng = random.Random(99)
    log = tmp_path / "runs"
    started_file, release = tmp_path / "started", tmp_path / "release"
    env = {"SQLQ_TEST_LEASE_SECONDS": "2"}
    doomed_jobs = [
        enqueue(
            "faults.block",
            {"n": i, "path": str(log), "started": str(started_file), "release": str(release)},
            queue="reports",
            max_attempts=1,
        )
        for i in range(8)
    ]
    good = [enqueue("wf.record", rec(log, f"g{i}", sleep=0.05), queue="emails") for i in range(60)]
    doomed = spawn_worker("--queue", "reports", "--concurrency", "8", "-v", "1", env=env)
    until(lambda: len(ran(started_file)) == 8, 30, "the doomed worker holds its 8 jobs")
    expected: dict[int, str] = {}
    names: dict[int, str] = {}
    for k in range(40):
        mine = rng.sample(good, 8) + rng.sample(doomed_jobs, 1 if k % 2 else 0)
        policy = rng.choice(["fail", "cancel", "run"])
        job = enqueue(
            "wf.record", rec(log, f"w{k}"), depends_on=mine, on_dependency_failure=policy
        )
        broken = k % 2 and policy != "run"
        expected[job.pk] = (
            {"fail": JobStatus.FAILED, "cancel": JobStatus.CANCELLED}[policy]
            if broken
            else JobStatus.COMPLETED
        )
        names[job.pk] = f"w{k}"
    doomed.signal(signal.SIGKILL)
    doomed.wait()
    release.touch()
    healthy = workers(spawn_worker, 2, "--queue", "emails", "--queue", "default", **env)
    until(nothing_left, 90, "every job finished")
    output = stop(healthy)

    assert {status(j) for j in doomed_jobs} == {JobStatus.FAILED}
    got = dict(Job.objects.filter(pk__in=list(expected)).values_list("pk", "status"))
    assert got == expected
    runs = ran(log)
    for pk, name in names.items():
        assert runs[name] == (1 if expected[pk] == JobStatus.COMPLETED else 0), name
    assert JobBlocker.objects.count() == 0
    assert bad_lines(output) == []
