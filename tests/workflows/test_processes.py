"""Workflows (issue 16) under real ``sqlq_worker`` processes: chains killed with SIGKILL
mid-step, a fan-in released by concurrent completions in several processes, the dependency
failure policies, and chains of atomic steps. The in-process tests are in
tests/workflows/test_workflows.py; the handlers in tests/testapp/workflow_jobs.py.

The kill scenarios use a seeded random (``SQLQ_TEST_SEED`` replays one) and print the seed
in every assertion message.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.db import transaction
from django.db.models import Max

from django_sqlq import Chain, bulk_enqueue, enqueue, lifecycle
from django_sqlq.models import Job, JobBlocker, JobStatus
from tests.conftest import ROOT, WorkerProcess, held_elsewhere, run_burst
from tests.faults.conftest import errors_in, pid_of, runs, until
from tests.testapp import workflow_jobs  # noqa: F401 (registers the handlers)
from tests.testapp.models import Order

pytestmark = pytest.mark.django_db(transaction=True)

#: The workers log with level names, so that errors_in() tells an error from a warning.
LEVELS = {"DJANGO_SETTINGS_MODULE": "tests.faults.settings"}


def names(path: Path) -> list[str]:
    """The names the wf.record runs wrote to ``path``, in the order they ran."""
    return [line.split()[0] for line in path.read_text().splitlines()] if path.exists() else []


def rec(path: Path, name: str, **extra: Any) -> dict[str, Any]:
    return {"path": str(path), "name": name, **extra}


def status_of(job: Job) -> str:
    job.refresh_from_db()
    return job.status


def stop(workers: list[WorkerProcess], *, allowed: tuple[str, ...] = ()) -> None:
    """SIGTERM the workers once they are ready (their handlers installed); each exits 0
    and logged no error (but for those that contain one of the ``allowed`` texts)."""
    for worker in workers:
        worker.wait_ready()
    for worker in workers:
        worker.signal(signal.SIGTERM)
    for worker in workers:
        assert worker.wait(30) == 0, worker.output()
        assert errors_in(worker.output(), allowed=allowed) == [], worker.output()


def seeded() -> tuple[int, random.Random]:
    seed = int(os.environ.get("SQLQ_TEST_SEED", str(time.time_ns() % 2**32)))
    return seed, random.Random(seed)


# -- chains killed mid-step ------------------------------------------------------------------

STEPS = 5
CHAINS = 3
LEASE = "1.5"
#: How long each step sleeps: a kill lands within a step's run, or just after it (before
#: its completion is written, or after).
STEP_SECONDS = {"wf.step": 0.5, "wf.atomic_step": 0.25}


def _chain_payload(handler: str, tmp_path: Path, index: int, started: Path) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "path": str(tmp_path / f"chain-{index}"),
        "n": 0,
        "of": STEPS,
        # Every step: each kill costs the steps it interrupted an attempt.
        "max_attempts": 50,
    }
    if handler == "wf.step":
        # Announces each run in ``started`` before its sleep: the kill lands in the sleep.
        return {**payload, "started": str(started), "sleep": STEP_SECONDS[handler]}
    # An atomic step announces itself in its own log (``path``) first; on SQLite the steps
    # take the write lock in turn, so their sleep is shorter.
    return {**payload, "tag": f"chain-{index}", "sleep": STEP_SECONDS[handler]}


@pytest.mark.parametrize("handler", ["wf.step", "wf.atomic_step"])
def test_chains_survive_kill_9_of_their_worker_at_random_moments(tmp_path, spawn_worker, handler):
    seed, rng = seeded()
    started = tmp_path / "started"
    payloads = [_chain_payload(handler, tmp_path, c, started) for c in range(CHAINS)]
    firsts = [
        enqueue(handler, payload, max_attempts=payload["max_attempts"]) for payload in payloads
    ]
    logs = [tmp_path / f"chain-{c}" for c in range(CHAINS)]
    announced = started if handler == "wf.step" else None
    env = {**LEVELS, "SQLQ_TEST_LEASE_SECONDS": LEASE}

    def last_steps_done() -> int:
        return Job.objects.filter(chain_index=STEPS - 1, status=JobStatus.COMPLETED).count()

    def runs_by(pid: int) -> int:
        found = [runs(announced)] if announced else [runs(log) for log in logs]
        return sum(p == pid for by_step in found for pids in by_step.values() for p in pids)

    # Kill once this many steps (of all chains) completed: 3 or 4 points spread over the
    # chains' lives, each before the last two steps of every chain (so there is always work
    # in flight: with one step left per chain, a loaded machine's worker ran all three
    # between two looks, and the chains ended before the last kill).
    targets = sorted(rng.sample(range(CHAINS * STEPS - 2 * CHAINS), rng.choice((3, 4))))
    killed: set[int] = set()
    for target in targets:
        worker = spawn_worker("--concurrency", str(CHAINS), env=env)

        def reached(pid: int = worker.pid, target: int = target) -> bool:
            return (Job.objects.completed().count() >= target and runs_by(pid) >= 1) or (
                last_steps_done() == CHAINS
            )

        # This worker runs steps (it took over those of the worker killed before it, once
        # their lease ran out) and the target is reached; then a random part of a step more.
        until(reached, 60, f"{target} steps completed, worker {worker.pid} ran one (seed {seed})")
        if last_steps_done() == CHAINS:
            break
        time.sleep(rng.uniform(0, 1.2 * STEP_SECONDS[handler]))  # the kill's moment
        assert worker.proc.poll() is None, f"seed {seed}: worker died on its own\n" + (
            worker.output()
        )
        worker.signal(signal.SIGKILL)
        worker.proc.wait(10)
        killed.add(worker.pid)
    assert len(killed) == len(targets), f"seed {seed}: the chains ended before the last kill"

    last = spawn_worker("--concurrency", str(CHAINS), env=env)
    until(lambda: last_steps_done() == CHAINS, 60, f"every chain ended (seed {seed})")
    stop([last])

    why = f"seed {seed}, killed {sorted(killed)} after {targets} steps completed"
    again = sum(len(pids) - 1 for log in logs for pids in runs(log).values())
    attempts = Counter(Job.objects.values_list("attempts", flat=True))
    print(f"{why}: {again} step runs repeated, attempts per step {dict(attempts)}")
    assert Job.objects.count() == CHAINS * STEPS, why
    for first, log in zip(firsts, logs, strict=True):
        steps = list(Chain(first.pk).jobs())
        assert [s.chain_index for s in steps] == list(range(STEPS)), why
        assert [s.payload["n"] for s in steps] == list(range(STEPS)), why
        assert [s.status for s in steps] == [JobStatus.COMPLETED] * STEPS, why
        ran = runs(log)
        assert set(ran) == set(range(STEPS)), f"{why}: a step completed without running"
        for index, step in enumerate(steps):
            pids = Counter(ran[index])
            finisher = pid_of(step.locked_by)
            assert pids[finisher] >= 1, f"{why}: step {index} completed by a pid that never ran it"
            pids[finisher] -= 1
            # Any other run of the step was in a worker killed before it recorded the step.
            stray = {pid for pid, count in pids.items() if count and pid not in killed}
            assert not stray, f"{why}: step {index} ran again in live workers {stray}"
        if handler == "wf.atomic_step":
            # A killed atomic step's writes were rolled back with its completion: each
            # step's row was committed once, by the attempt that completed it.
            tag = first.payload["tag"]
            committed = sorted(
                Order.objects.filter(item__startswith=f"{tag} ").values_list("item", flat=True)
            )
            assert committed == sorted(
                f"{tag} {s.chain_index} {s.attempts} {pid_of(s.locked_by)}" for s in steps
            ), why


# -- fan-in across processes -----------------------------------------------------------------


def _ready_workers(spawn_worker: Callable[..., WorkerProcess], count: int) -> list[WorkerProcess]:
    workers = [spawn_worker("--concurrency", "4", env=LEVELS) for _ in range(count)]
    for worker in workers:
        worker.wait_ready()
    return workers


def test_a_group_of_100_fans_in_once_when_3_processes_complete_it(tmp_path, spawn_worker):
    log = tmp_path / "runs"
    workers = _ready_workers(spawn_worker, 3)
    # The group and its waiter commit together: all 100 completions count off the waiter,
    # from three processes at once.
    with transaction.atomic():
        group = bulk_enqueue("wf.record", [rec(log, f"t{i}", sleep=0.02) for i in range(100)])
        waiter = group.then("wf.record", rec(log, "waiter"))
    assert (waiter.status, waiter.blockers_left) == (JobStatus.BLOCKED, 100)
    until(lambda: status_of(waiter) == JobStatus.COMPLETED, 60, "the waiter completed")
    stop(workers)

    ran = names(log)
    assert Counter(ran) == Counter([f"t{i}" for i in range(100)] + ["waiter"])
    assert ran[-1] == "waiter"
    assert waiter.attempts == 1
    assert not waiter.blockers_left
    assert (
        Job.objects.filter(pk__in=[j.pk for j in group], status=JobStatus.COMPLETED).count() == 100
    )
    assert JobBlocker.objects.count() == 0
    # The completions came from more than one process.
    pids = {line.split()[1] for line in log.read_text().splitlines()[:-1]}
    assert len(pids) > 1


def test_waiters_on_overlapping_slices_of_a_group_each_run_once_after_theirs(
    tmp_path, spawn_worker
):
    log = tmp_path / "runs"
    workers = _ready_workers(spawn_worker, 3)
    jobs = bulk_enqueue("wf.record", [rec(log, f"t{i}", sleep=0.02) for i in range(100)])
    # Written while the workers already complete the group: each waiter waits for what is
    # not done yet when it commits.
    slices = {f"w{k}": jobs[15 * k : 15 * k + 40] for k in range(5)}
    waiters = {
        name: enqueue("wf.record", rec(log, name), depends_on=deps)
        for name, deps in slices.items()
    }
    until(
        lambda: Job.objects.filter(status=JobStatus.COMPLETED).count() == 105,
        60,
        "the group and its 5 waiters completed",
    )
    stop(workers)

    ran = names(log)
    assert Counter(ran) == Counter([f"t{i}" for i in range(100)] + list(waiters))
    for name, deps in slices.items():
        waiter = Job.objects.get(pk=waiters[name].pk)
        assert (waiter.status, waiter.attempts) == (JobStatus.COMPLETED, 1), name
        assert not waiter.blockers_left, name
        assert ran.index(name) > max(ran.index(dep.payload["name"]) for dep in deps), name
        last_done = Job.objects.filter(pk__in=[d.pk for d in deps]).aggregate(
            at=Max("completed_at")
        )["at"]
        assert waiter.started_at >= last_done, name
    assert JobBlocker.objects.count() == 0


def test_a_request_that_made_a_job_runnable_and_stays_open_holds_up_no_worker(
    tmp_path, spawn_worker, engine
):
    """A request retries a failed job (which wakes idle workers once it commits) and keeps its
    transaction open; meanwhile a worker completes a job that another waits for, which wakes
    workers too. (On MariaDB both wrote one counter row, and the worker's completion waited
    for the request's commit, holding up every later completion of that worker: an
    adversary's request of 20 s left no completion recorded for 24 s.)"""
    if engine == "sqlite":
        pytest.skip("SQLite has one writer at a time: an open write transaction holds up all")
    log = tmp_path / "runs"
    failed = enqueue("wf.record", rec(log, "retried"))
    Job.objects.filter(pk=failed.pk).update(status=JobStatus.FAILED)

    def retry() -> None:  # a request's transaction, which stays open
        assert lifecycle.retry_now([failed.pk]).changed == 1

    with held_elsewhere(retry):
        parent = enqueue("wf.record", rec(log, "parent"))
        child = enqueue("wf.record", rec(log, "child"), depends_on=[parent])
        workers = _ready_workers(spawn_worker, 1)
        done = [parent.pk, child.pk]
        until(
            lambda: Job.objects.filter(pk__in=done, status=JobStatus.COMPLETED).count() == 2,
            20,
            "the job and the one waiting for it completed while the request stays open",
        )
    until(lambda: "retried" in names(log), 30, "the retried job ran once the request committed")
    stop(workers)
    assert sorted(names(log)) == ["child", "parent", "retried"]


# -- failure policies across processes --------------------------------------------------------


def test_a_dependency_that_fails_for_good_decides_each_policy_under_2_workers(
    tmp_path, spawn_worker
):
    log = tmp_path / "runs"
    workers = _ready_workers(spawn_worker, 2)
    with transaction.atomic():
        bad = enqueue("wf.record", rec(log, "bad", fail=True, sleep=0.2), max_attempts=1)
        good = bulk_enqueue("wf.record", [rec(log, f"g{i}", sleep=0.01) for i in range(10)])
        waiters = {
            policy: enqueue(
                "wf.record",
                rec(log, policy),
                depends_on=[bad, good],
                on_dependency_failure=policy,
            )
            for policy in ("fail", "cancel", "run")
        }
        # Waits for the waiter that fails: fails too (the cascade).
        below = enqueue("wf.record", rec(log, "below"), depends_on=[waiters["fail"]])
    everything = [*waiters.values(), below]
    until(
        lambda: (
            not Job.objects.filter(
                pk__in=[j.pk for j in everything], status=JobStatus.BLOCKED
            ).exists()
            and status_of(waiters["run"]) == JobStatus.COMPLETED
        ),
        60,
        "every waiter decided, the 'run' one completed",
    )
    stop(workers, allowed=("bad fails on purpose",))

    assert status_of(bad) == JobStatus.FAILED
    assert {p: status_of(w) for p, w in waiters.items()} == {
        "fail": JobStatus.FAILED,
        "cancel": JobStatus.CANCELLED,
        "run": JobStatus.COMPLETED,
    }
    assert status_of(below) == JobStatus.FAILED
    ran = Counter(names(log))
    assert ran["bad"] == 1
    assert ran["run"] == 1
    assert (ran["fail"], ran["cancel"], ran["below"]) == (0, 0, 0)
    assert waiters["run"].attempts == 1
    for policy in ("fail", "cancel"):
        assert f"job id={bad.pk}" in waiters[policy].last_error
        assert waiters[policy].attempts == 0
    assert f"job id={waiters['fail'].pk}" in below.last_error
    assert JobBlocker.objects.count() == 0


# -- chains of atomic steps --------------------------------------------------------------------


def orders(tag: str) -> list[str]:
    """The Order rows the wf.atomic_step runs tagged ``tag`` committed, without the pid."""
    items = Order.objects.filter(item__startswith=f"{tag} ").values_list("item", flat=True)
    return sorted(item.rsplit(" ", 1)[0] for item in items)


def test_an_atomic_step_that_raises_after_continue_with_writes_nothing(tmp_path):
    # max_attempts=1 for every step of the chain (the handler passes it on).
    first = enqueue(
        "wf.atomic_step",
        {"tag": "t", "n": 0, "of": 3, "fail_at": 1, "max_attempts": 1},
        max_attempts=1,
    )
    waiter = enqueue("wf.record", rec(tmp_path / "runs", "w"), depends_on=[first.chain])
    run_burst()
    steps = list(Chain(first.pk).jobs())
    assert [(s.chain_index, s.status) for s in steps] == [
        (0, JobStatus.COMPLETED),
        (1, JobStatus.FAILED),
    ]
    # Step 1 wrote its row and asked for step 2, then raised: neither was committed.
    assert orders("t") == ["t 0 1"]
    assert Job.objects.filter(type="wf.atomic_step").count() == 2
    assert "fails attempt 1 on purpose" in steps[1].last_error
    assert status_of(waiter) == JobStatus.FAILED


def test_an_atomic_step_that_completes_writes_its_rows_and_its_next_step(tmp_path):
    # max_attempts=2 for every step of the chain (the handler passes it on).
    first = enqueue(
        "wf.atomic_step",
        {"tag": "t", "n": 0, "of": 3, "fail_at": 1, "max_attempts": 2},
        max_attempts=2,
    )
    waiter = enqueue("wf.record", rec(tmp_path / "runs", "w"), depends_on=[first.chain])
    run_burst()
    steps = list(Chain(first.pk).jobs())
    assert [(s.chain_index, s.status, s.attempts) for s in steps] == [
        (0, JobStatus.COMPLETED, 1),
        (1, JobStatus.COMPLETED, 2),
        (2, JobStatus.COMPLETED, 1),
    ]
    # Attempt 1 of step 1 left nothing; attempt 2 committed its row with step 2.
    assert orders("t") == ["t 0 1", "t 1 2", "t 2 1"]
    assert status_of(waiter) == JobStatus.COMPLETED
    assert names(tmp_path / "runs") == ["w"]


# -- enqueues that fan in on running work ------------------------------------------------------

FAN_IN_SECONDS = 5.0


def _finished_before(waiter: Job) -> list[str]:
    """What ``waiter`` depended on that had not completed when it started."""
    late = []
    assert waiter.depends_on is not None
    assert waiter.started_at is not None
    for target in waiter.depends_on:
        if "job" in target:
            deps = Job.objects.filter(pk=target["job"])
        else:
            deps = Job.objects.filter(chain_id=target["chain"]) | Job.objects.filter(
                pk=target["chain"]
            )
        for dep in deps:
            done = dep.completed_at
            if dep.status != JobStatus.COMPLETED or done is None or done > waiter.started_at:
                late.append(f"{target}: job {dep.pk} {dep.status} at {dep.completed_at}")
    return late


@pytest.mark.parametrize("mode", ["view", "calls"])
def test_enqueues_that_fan_in_on_jobs_being_finished_never_deadlock(
    tmp_path, spawn_worker, worker_env, mode, engine
):
    """A process keeps writing jobs that wait for jobs 3 workers are finishing at that
    moment: group.then(), depends_on a part of a group and a fan-in, and on a chain, all
    in one transaction (a view) or each in its own. PostgreSQL: every statement that locks
    several jobs takes them in id order, so neither side deadlocks (issue 27); the caller
    never sees an error and the workers log none."""
    seed, _ = seeded()
    log = tmp_path / "runs"
    workers = _ready_workers(spawn_worker, 3)
    enqueuer = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.faults.fanin_enqueuer",
            str(FAN_IN_SECONDS),
            str(log),
            mode,
            str(seed),
        ],
        cwd=ROOT,
        env={**worker_env, **LEVELS},
        capture_output=True,
        text=True,
        timeout=FAN_IN_SECONDS + 120,
        check=False,
    )
    said = enqueuer.stdout + enqueuer.stderr
    assert enqueuer.returncode == 0, f"seed {seed}: the enqueuer failed\n{said}"
    rounds = int(said.split("rounds ")[1].split()[0])
    waiter_ids = [int(pk) for pk in said.split("waiters ")[1].split()[0].split(",")]
    assert rounds >= 5, said  # the enqueuer's MIN_ROUNDS: it ran to its end
    until(
        lambda: not Job.objects.exclude(status=JobStatus.COMPLETED).exists(),
        90,
        f"every job completed (seed {seed})",
    )
    outputs = [worker.output() for worker in workers]
    stop(workers)

    for output in outputs:
        deadlocks = [line for line in output.splitlines() if "deadlock" in line.lower()]
        if engine == "mysql":
            # MariaDB: a view's transaction that makes several jobs wait can still meet a
            # worker's completion in a deadlock (its uncommitted blocker rows against the
            # completion's release of their waiters); the worker retries its side, nothing
            # is lost and the caller never sees it (docs/reference/mariadb.md).
            deadlocks = [line for line in deadlocks if "retrying in" not in line]
        assert deadlocks == [], f"seed {seed}:\n{output}"
    ran = Counter(names(log))
    assert set(ran.values()) == {1}, f"seed {seed}: ran twice: {ran.most_common(3)}"
    assert sum(ran.values()) == Job.objects.count()
    waiters = list(Job.objects.filter(pk__in=waiter_ids))
    assert len(waiters) == len(waiter_ids)
    for waiter in waiters:
        assert waiter.attempts == 1, waiter
        assert _finished_before(waiter) == [], f"seed {seed}: {waiter} ran early"
    assert JobBlocker.objects.count() == 0
