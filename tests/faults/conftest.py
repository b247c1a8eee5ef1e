"""Fault injection: real ``sqlq_worker`` processes killed, frozen, cut off from the database,
fed poison and nonsense, on SQLite and PostgreSQL.

Every test here is marked ``faults`` and bounded in time (each well under a minute). They
run by default, in CI too; ``-m "not faults"`` or ``SQLQ_FAULTS=0`` leaves them out.
``SQLQ_FAULTS_REPORT=FILE`` appends each scenario's measured outcome to FILE as JSON lines
(the numbers in docs/explanation/reliability.md come from there).
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from django.db import InterfaceError, OperationalError, connection, connections

from tests.conftest import WorkerProcess, wait_for

HERE = Path(__file__).resolve().parent

T = TypeVar("T")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if os.environ.get("SQLQ_FAULTS") != "0":
        return
    skip = pytest.mark.skip(reason="SQLQ_FAULTS=0")
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(skip)


# -- side effects ----------------------------------------------------------------------------


def runs(path: Path) -> dict[int, list[int]]:
    """What the faults.* handlers recorded in ``path``: job number -> pids that ran it."""
    found: dict[int, list[int]] = defaultdict(list)
    if path.exists():
        for line in path.read_text().splitlines():
            n, pid = line.split()
            found[int(n)].append(int(pid))
    return dict(found)


def pid_of(worker_id: str) -> int:
    """The pid in a default worker id (``host:pid:random``)."""
    return int(worker_id.split(":")[-2])


# -- the database ----------------------------------------------------------------------------


def is_postgresql() -> bool:
    return connections["default"].vendor == "postgresql"


@pytest.fixture
def postgresql() -> None:
    """For scenarios that use a PostgreSQL capability (backends to terminate, snapshots)."""
    if not is_postgresql():
        pytest.skip("pg_stat_activity / pg_terminate_backend are PostgreSQL capabilities")


def backends(query_like: str = "%", *, waiting_for_lock: bool = False) -> list[dict[str, Any]]:
    """Other sessions on the test database (the workers'), by their current or last query:
    the test's own session is left out, and so is every other database's (other developers'
    test runs share the server)."""
    sql = (
        "SELECT pid, state, wait_event_type, query, backend_xmin FROM pg_stat_activity "
        "WHERE datname = current_database() AND pid <> pg_backend_pid() "
        "AND backend_type = 'client backend' AND query LIKE %s"
    )
    params: list[Any] = [query_like]
    if waiting_for_lock:
        sql += " AND wait_event_type = 'Lock'"
    with connections["default"].cursor() as cursor:
        # Inside a transaction, pg_stat_activity is read once and cached: read it afresh.
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(sql, params)
        columns = [c[0] for c in cursor.description]
        return [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]


def terminate(pids: list[int]) -> int:
    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity, pg_terminate_backend(pid) "
                       "WHERE pid = ANY(%s)", [pids])  # fmt: skip
        return int(cursor.fetchone()[0])


# -- logs ------------------------------------------------------------------------------------

# What must never reach a caller or a worker's log as an error.
LOCKED = re.compile(r"database is locked|database table is locked", re.IGNORECASE)


def errors_in(text: str, *, allowed: tuple[str, ...] = ()) -> list[str]:
    """Log lines at ERROR or worse, and tracebacks, from a worker's output (but for those
    that contain one of the ``allowed`` texts)."""
    return [
        line
        for line in text.splitlines()
        if (" ERROR " in line or " CRITICAL " in line or line.startswith("Traceback"))
        and not any(text in line for text in allowed)
    ]


# -- reporting -------------------------------------------------------------------------------


@pytest.fixture
def worker_env(worker_env: dict[str, str]) -> dict[str, str]:
    """The workers here log with level names (tests.faults.settings), so that the tests can
    tell a warning (a retried write) from an error."""
    return {**worker_env, "DJANGO_SETTINGS_MODULE": "tests.faults.settings"}


@pytest.fixture
def report(request: pytest.FixtureRequest) -> Callable[..., None]:
    """report(key=value, ...): print a scenario's measured outcome (and append it to
    $SQLQ_FAULTS_REPORT as one JSON line)."""

    def emit(**values: Any) -> None:
        record = {
            "test": request.node.nodeid,
            "engine": connections["default"].vendor,
            **values,
        }
        line = json.dumps(record, sort_keys=True, default=str)
        print(f"FAULTS-REPORT {line}")
        target = os.environ.get("SQLQ_FAULTS_REPORT")
        if target:
            with open(target, "a") as fh:
                fh.write(line + "\n")

    return emit


# -- a supervisor ----------------------------------------------------------------------------


class Pool:
    """Worker processes kept at ``size``, as a process manager would: a dead one (killed,
    crashed) is replaced. Remembers which pids were killed and which died on their own."""

    def __init__(self, spawn: Callable[..., WorkerProcess], size: int, *args: str,
                 env: dict[str, str] | None = None) -> None:  # fmt: skip
        self.spawn = spawn
        self.args = args
        self.env = env
        self.workers: list[WorkerProcess] = [self._start() for _ in range(size)]
        self.all: list[WorkerProcess] = list(self.workers)
        self.killed: set[int] = set()
        self.died: dict[int, int] = {}  # pid -> exit status, for deaths we did not cause

    def _start(self) -> WorkerProcess:
        return self.spawn(*self.args, env=self.env)

    def wait_ready(self) -> None:
        for worker in self.workers:
            worker.wait_ready()

    def replace_dead(self) -> int:
        """Restart every worker that exited. Returns how many were restarted."""
        restarted = 0
        for index, worker in enumerate(self.workers):
            code = worker.proc.poll()
            if code is None:
                continue
            if worker.pid not in self.killed:
                self.died[worker.pid] = code
            fresh = self._start()
            self.workers[index] = fresh
            self.all.append(fresh)
            restarted += 1
        return restarted

    def kill_one(self, rng: random.Random) -> int:
        """SIGKILL a random live worker and start another in its place. Returns its pid."""
        index = rng.randrange(len(self.workers))
        victim = self.workers[index]
        self.killed.add(victim.pid)
        victim.signal(signal.SIGKILL)
        victim.proc.wait(10)
        fresh = self._start()
        self.workers[index] = fresh
        self.all.append(fresh)
        return victim.pid

    def stop(self, timeout: float = 30.0) -> list[int]:
        """SIGTERM every live worker; return their exit codes."""
        live = [w for w in self.workers if w.proc.poll() is None]
        for worker in live:
            worker.wait_ready()  # its signal handlers are in place
        for worker in live:
            worker.signal(signal.SIGTERM)
        return [worker.wait(timeout) for worker in live]

    def output(self) -> str:
        return "\n".join(worker.output() for worker in self.all)


@pytest.fixture
def pool(spawn_worker: Callable[..., WorkerProcess]) -> Callable[..., Pool]:
    def make(size: int, *args: str, env: dict[str, str] | None = None) -> Pool:
        return Pool(spawn_worker, size, *args, env=env)

    return make  # spawn_worker kills whatever is left at teardown


def seconds_to_exit(
    worker: WorkerProcess, since: float, timeout: float = 10.0
) -> tuple[int, float]:
    """Wait (at most ``timeout``) for ``worker`` to exit; return its status and the seconds
    from ``since`` (a time.monotonic()) to its exit: the fork server's reaping time for a
    worker it forked, else a blocking wait's (Popen's wait with a timeout polls, in steps of
    up to 50 ms)."""
    exited: list[float] = []

    def reap() -> None:
        worker.proc.wait()
        exited.append(time.monotonic())

    waiter = threading.Thread(target=reap, daemon=True)
    waiter.start()
    waiter.join(timeout)
    if not exited:
        raise AssertionError(f"worker did not exit within {timeout}s:\n{worker.output()}")
    status = worker.proc.returncode
    assert status is not None
    at = getattr(worker.proc, "exited_at", None) or exited[0]
    return status, at - since


def until(condition: Callable[[], Any], timeout: float, what: str) -> Any:
    """wait_for with a message that says what did not happen."""
    try:
        return wait_for(condition, timeout=timeout, interval=0.05)
    except AssertionError:
        raise AssertionError(f"not within {timeout}s: {what}") from None


# -- a server restarted mid-drain (PostgreSQL's and MariaDB's) ------------------------------


def reconnecting(query: Callable[[], T]) -> Callable[[], T | None]:
    """``query``, but a connection lost to a server restart reads as "not yet"."""

    def attempt() -> T | None:
        try:
            return query()
        except (OperationalError, InterfaceError):
            connection.close()
            return None

    return attempt


def drain_through_a_restart(
    tmp_path: Path,
    pool: Callable[..., Pool],
    report: Callable[..., None],
    restart_command: str,
    *,
    drain_timeout: float,
) -> None:
    """2 workers drain 3,000 jobs; ``restart_command`` restarts the server when a quarter is
    done. No worker exits, no job fails, every job runs once, and the workers say what they
    rode out."""
    from django_sqlq import bulk_enqueue
    from django_sqlq.models import Job

    path = str(tmp_path / "ran")
    jobs = bulk_enqueue(
        "faults.record",
        [{"n": n, "path": path, "before": 0.005, "after": 0.005} for n in range(3000)],
    )
    workers = pool(2, "--concurrency", "2", env={"SQLQ_TEST_LEASE_SECONDS": "5"})
    until(lambda: Job.objects.completed().count() >= len(jobs) // 4, 60, "a quarter done")
    at_restart = Job.objects.completed().count()
    restart_started = time.monotonic()
    subprocess.run(restart_command, shell=True, check=True, timeout=120)
    restarted = time.monotonic() - restart_started
    connection.close()
    until(
        reconnecting(lambda: Job.objects.completed().count() == len(jobs)),
        drain_timeout,
        "the drain finished after the restart",
    )
    drained = time.monotonic() - restart_started
    assert all(w.proc.poll() is None for w in workers.workers), "a worker exited"
    assert workers.died == {}
    assert not Job.objects.failed().exists()
    # Each job ran once: the outcomes of the attempts in flight at the restart were written
    # after it, by the workers that ran them.
    assert {n: len(p) for n, p in runs(tmp_path / "ran").items()} == dict.fromkeys(
        range(len(jobs)), 1
    )
    assert workers.stop() == [0, 0]
    output = workers.output()
    assert errors_in(output) == []
    assert "database error during" in output or "heartbeat failed" in output
    report(
        jobs=len(jobs),
        completed_when_restarted=at_restart,
        worker_warnings=sum(" WARNING " in line for line in output.splitlines()),
        restart_seconds=round(restarted, 1),
        restart_to_drained_seconds=round(drained, 1),
    )
