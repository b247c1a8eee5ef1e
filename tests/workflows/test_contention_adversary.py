"""Enqueues with dependencies beside workers and an operator, from outside (issue 27):
real ``sqlq_worker`` processes finish jobs while other processes enqueue jobs that wait for
them in awkward shapes (tests/faults/contention_procs.py: diamonds, several enqueues in one
transaction in different orders, chains still running, atomic handlers, progress) and an
operator cancels, deletes, retries and runs-now jobs, ids in random order; nobody may see
or log a deadlock, every job other than a victim completes exactly once and never before
what it waits for, and nothing is left blocked. PostgreSQL (row locks).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import pytest

from django_sqlq.models import Job, JobBlocker, JobStatus
from tests.conftest import ROOT, WorkerProcess
from tests.faults.conftest import errors_in, until

LEVELS = {"DJANGO_SETTINGS_MODULE": "tests.faults.settings"}


def _seed() -> int:
    return int(os.environ.get("SQLQ_TEST_SEED", str(time.time_ns() % 2**32)))


# ============================== PostgreSQL: no deadlock ===================================

pg = pytest.mark.skipif(
    os.environ.get("SQLQ_TEST_ENGINE", "sqlite") != "postgresql",
    reason="the deadlocks are PostgreSQL's",
)


def _log_names(path: Path) -> Counter[str]:
    if not path.exists():
        return Counter()
    return Counter(line.split()[0] for line in path.read_text().splitlines())


def _completed_by(dep: Job, moment: datetime | None) -> bool:
    """``dep`` completed, no later than ``moment`` (a completed job without completed_at,
    or a waiter that ran without started_at, fails the test)."""
    if dep.status != JobStatus.COMPLETED:
        return False
    assert dep.completed_at is not None, dep
    assert moment is not None, f"compared with {dep}: no start time"
    return dep.completed_at <= moment


def _ran_early(waiter: Job) -> list[str]:
    """What ``waiter`` waited for that had not completed when it started (a dependency
    that is a victim, cancelled, failed or deleted, is fine under policy "run")."""
    late = []
    assert waiter.depends_on is not None, waiter  # a waiter: it was enqueued with some
    for target in waiter.depends_on:
        if "job" in target:
            deps = list(Job.objects.filter(pk=target["job"]))
        else:
            deps = list(Job.objects.filter(pk=target["chain"])) + list(
                Job.objects.filter(chain_id=target["chain"])
            )
        for dep in deps:
            if dep.payload.get("name", "").startswith("victim"):
                if _completed_by(dep, waiter.started_at):
                    continue
                if waiter.dependency_policy == "run":
                    continue
            if not _completed_by(dep, waiter.started_at):
                late.append(
                    f"{target}: job {dep.pk} {dep.payload.get('name')} {dep.status} "
                    f"attempts {dep.attempts} started {dep.started_at} completed "
                    f"{dep.completed_at}; waiter {waiter.payload.get('name')} policy "
                    f"{waiter.dependency_policy} started {waiter.started_at} "
                    f"created {waiter.created_at} by {waiter.locked_by}, dep by {dep.locked_by}"
                )
    return late


def _spawn(
    spawn_worker: Callable[..., WorkerProcess], count: int, env: dict[str, str]
) -> list[WorkerProcess]:
    workers = [spawn_worker("--concurrency", "4", env={**LEVELS, **env}) for _ in range(count)]
    for worker in workers:
        worker.wait_ready()
    return workers


def _run(args: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.faults.contention_procs", *args],
        cwd=ROOT,
        env={**env, **LEVELS},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


SECONDS = 8


@pg
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("mode", "enqueuers", "operator", "lease"),
    [("view", 1, True, "1")],
    ids=["view-operator-lease1s"],
)
def test_awkward_fan_ins_beside_workers_and_an_operator_never_deadlock(
    tmp_path, spawn_worker, worker_env, mode, enqueuers, operator, lease
):
    seed = _seed()
    env = {**worker_env, "SQLQ_TEST_LEASE_SECONDS": lease}
    workers = _spawn(spawn_worker, 3, env)
    log = tmp_path / "runs"
    procs = [
        (_run(["enqueue", str(SECONDS), str(log), f"{mode}{k}x", str(seed + k)], env), "enqueue")
        for k in range(enqueuers)
    ]
    if operator:
        procs.append((_run(["operate", str(SECONDS + 3), str(seed)], env), "operate"))
    said: dict[str, list[str]] = {}
    for proc, kind in procs:
        out, _ = proc.communicate(timeout=SECONDS + 60)
        said.setdefault(kind, []).append(out)
        assert proc.returncode == 0, f"seed {seed}: the {kind} process failed\n{out}"
    waiter_ids: list[int] = []
    for out in said["enqueue"]:
        waiter_ids += [int(pk) for pk in out.split("waiters ")[1].split()[0].split(",")]
    print(f"seed {seed}: {said}")

    open_statuses = (
        JobStatus.BLOCKED,
        JobStatus.PENDING,
        JobStatus.SCHEDULED,
        JobStatus.PROCESSING,
    )
    left = Job.objects.filter(status__in=open_statuses).values_list(
        "pk", "status", "payload__name"
    )
    until(
        lambda: not Job.objects.filter(status__in=open_statuses).exists(),
        60,
        f"nothing left to run (seed {seed}): {list(left)[:10]}",
    )
    outputs = [w.output() for w in workers]
    for w in workers:
        w.signal(signal.SIGTERM)
    for w in workers:
        assert w.wait(30) == 0, w.output()
    for output in outputs:
        assert "deadlock" not in output.lower(), f"seed {seed}:\n{output}"
        assert errors_in(output) == [], f"seed {seed}:\n{output}"

    names = _log_names(log)
    regular = Job.objects.exclude(payload__name__startswith="victim")
    not_done = list(
        regular.exclude(status=JobStatus.COMPLETED).values_list("pk", "status", "last_error")
    )
    assert not_done == [], f"seed {seed}"
    twice = {n: c for n, c in names.items() if c > 1 and not n.startswith("victim")}
    assert twice == {}, f"seed {seed}: ran more than once"
    assert sum(c for n, c in names.items() if not n.startswith("victim")) == regular.count()
    for waiter in Job.objects.filter(pk__in=waiter_ids):
        assert waiter.attempts == 1, (seed, waiter)
        early = _ran_early(waiter)
        if early:
            made = [
                ln
                for out in said["enqueue"]
                for ln in out.splitlines()
                if ln.startswith(f"W {waiter.pk} ")
            ]
            early.append(f"at enqueue: {made}")
        assert early == [], f"seed {seed}: {waiter} ran early:\n" + "\n".join(early)
    assert JobBlocker.objects.count() == 0, f"seed {seed}"
    assert len(waiter_ids) > 20, said


@pg
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("mode", "enqueuers"), [("view", 2)])
def test_an_operator_on_every_job_beside_fan_ins_never_deadlocks(
    tmp_path, spawn_worker, worker_env, mode, enqueuers
):
    """The operator cancels, deletes, retries and runs-now any job (running chain steps,
    blocked waiters, group members) while enqueues fan in on them: results vary, but no
    process sees or logs a deadlock and nothing is left blocked."""
    seed = _seed()
    env = {**worker_env, "SQLQ_TEST_LEASE_SECONDS": "1", "ADV27_SCOPE": "all"}
    workers = _spawn(spawn_worker, 3, env)
    log = tmp_path / "runs"
    procs = [
        (
            _run(["enqueue", str(SECONDS), str(log), f"{mode}{k}x", str(seed + k)], env),
            "enqueue",
        )
        for k in range(enqueuers)
    ]
    procs.append((_run(["operate", str(SECONDS + 2), str(seed), "all"], env), "operate"))
    for proc, kind in procs:
        out, _ = proc.communicate(timeout=SECONDS + 60)
        assert proc.returncode == 0, f"seed {seed}: the {kind} process failed\n{out}"
        assert "deadlock" not in out.lower(), f"seed {seed}: {kind}\n{out}"
    open_statuses = (JobStatus.PENDING, JobStatus.SCHEDULED, JobStatus.PROCESSING)
    until(
        lambda: not Job.objects.filter(status__in=open_statuses).exists(),
        60,
        f"nothing left to run (seed {seed})",
    )
    outputs = [w.output() for w in workers]
    for w in workers:
        w.signal(signal.SIGTERM)
    for w in workers:
        assert w.wait(30) == 0, w.output()
    for output in outputs:
        assert "deadlock" not in output.lower(), f"seed {seed}:\n{output}"
    blocked = list(Job.objects.filter(status=JobStatus.BLOCKED).values_list("pk", "depends_on"))
    assert blocked == [], f"seed {seed}"
    assert JobBlocker.objects.count() == 0, f"seed {seed}"
