"""MariaDB's server restarted under running workers (issue 24).

``SQLQ_FAULTS_MARIADB_RESTART=1``: a full server restart in the middle of a drain
(``SQLQ_FAULTS_MARIADB_RESTART_CMD`` restarts it; default: ``start-stop-daemon`` stops the
local ``mariadbd``, waiting for it to exit, and starts it again, as ``.ci/run`` starts it).
Every connection to the server is cut: ``scripts/test`` runs it alone, before the other runs.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from django.db import connection

from django_sqlq import bulk_enqueue
from django_sqlq.models import Job
from tests.faults.conftest import Pool, errors_in, runs, until
from tests.faults.test_postgresql import reconnecting

pytestmark = [pytest.mark.faults, pytest.mark.django_db(transaction=True)]

DAEMON = "/usr/sbin/mariadbd"
RESTART = (
    f"start-stop-daemon --stop --exec {DAEMON} --retry TERM/60/KILL/5 && "
    f"start-stop-daemon --start --oknodo --background --exec {DAEMON}"
)


@pytest.mark.server_restart
@pytest.mark.skipif(
    os.environ.get("SQLQ_FAULTS_MARIADB_RESTART") != "1",
    reason="restarts the MariaDB server: set SQLQ_FAULTS_MARIADB_RESTART=1 (.ci/run does)",
)
@pytest.mark.skipif(connection.vendor != "mysql", reason="MariaDB's server")
def test_server_restart_mid_drain(
    tmp_path: Path, pool: Callable[..., Pool], report: Callable[..., None]
) -> None:
    command = os.environ.get("SQLQ_FAULTS_MARIADB_RESTART_CMD") or RESTART
    path = str(tmp_path / "ran")
    jobs = bulk_enqueue(
        "faults.record",
        [{"n": n, "path": path, "before": 0.005, "after": 0.005} for n in range(3000)],
    )
    workers = pool(2, "--concurrency", "2", env={"SQLQ_TEST_LEASE_SECONDS": "5"})
    until(lambda: Job.objects.completed().count() >= len(jobs) // 4, 60, "a quarter done")
    at_restart = Job.objects.completed().count()
    restart_started = time.monotonic()
    subprocess.run(command, shell=True, check=True, timeout=120)
    restarted = time.monotonic() - restart_started
    connection.close()
    until(
        reconnecting(lambda: Job.objects.completed().count() == len(jobs)),
        120,
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
