"""Workers behind a real PgBouncer in transaction mode (PostgreSQL only).

Without ``SQLQ["LISTEN_DATABASE"]`` notifications never reach the worker's LISTEN
connection: it notices at start-up (a NOTIFY to itself goes unheard), says so once, and
polls. With a direct alias for LISTEN, enqueues wake it through notifications.

Needs Debian's ``pgbouncer``; skips without it, except when ``CI=true`` or
``SQLQ_REQUIRE_PGBOUNCER`` is set (``scripts/test`` installs it and sets that).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connections

from django_sqlq import enqueue
from django_sqlq.models import Job, JobStatus
from tests.conftest import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

WARNING = "Notifications do not arrive"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _required() -> bool:
    return os.environ.get("CI") == "true" or bool(os.environ.get("SQLQ_REQUIRE_PGBOUNCER"))


@pytest.fixture
def pgbouncer(engine: str) -> Iterator[int]:
    """A PgBouncer in transaction mode in front of the test's PostgreSQL; yields its port."""
    if engine != "postgresql":
        pytest.skip("poolers are a PostgreSQL matter")
    binary = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
    if not Path(binary).exists():
        if _required():
            pytest.fail("pgbouncer is required (CI=true or SQLQ_REQUIRE_PGBOUNCER) but missing")
        pytest.skip("pgbouncer is not installed (apt-get install pgbouncer)")
    settings = connections["default"].settings_dict
    port = _free_port()
    directory = Path(tempfile.mkdtemp(prefix="sqlq-pgbouncer-"))
    (directory / "userlist.txt").write_text(f'"{settings["USER"]}" ""\n')
    (directory / "pgbouncer.ini").write_text(
        "[databases]\n"
        f"* = host={settings['HOST'] or '127.0.0.1'} port={settings['PORT'] or 5432}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {directory / 'userlist.txt'}\n"
        "pool_mode = transaction\nmax_client_conn = 200\ndefault_pool_size = 20\n"
        "ignore_startup_parameters = extra_float_digits,options\n"
    )
    kwargs: dict[str, Any] = {}
    if os.geteuid() == 0:  # pgbouncer refuses to run as root
        shutil.chown(directory, "postgres")
        kwargs = {"user": "postgres", "group": "postgres"}
    log = (directory / "pgbouncer.log").open("wb")
    process = subprocess.Popen(
        [binary, str(directory / "pgbouncer.ini")], stdout=log, stderr=subprocess.STDOUT, **kwargs
    )
    try:

        def listening() -> bool:
            if process.poll() is not None:
                raise AssertionError((directory / "pgbouncer.log").read_text())
            with socket.socket() as sock:
                return sock.connect_ex(("127.0.0.1", port)) == 0

        wait_for(listening, timeout=15)
        yield port
    finally:
        process.terminate()
        process.wait(10)
        log.close()
        shutil.rmtree(directory, ignore_errors=True)


def test_behind_a_transaction_pooler_the_worker_warns_once_and_polls(pgbouncer, spawn_worker):
    worker = spawn_worker(
        "--poll-interval", "0.2", env={"SQLQ_TEST_PGBOUNCER_PORT": str(pgbouncer)}
    )
    wait_for(lambda: WARNING in worker.output())
    assert "SQLQ['LISTEN_DATABASE']" in worker.output()
    jobs = [enqueue("tests.add", {"a": n, "b": 1}) for n in range(5)]
    wait_for(lambda: Job.objects.filter(status=JobStatus.COMPLETED).count() == len(jobs))
    assert [Job.objects.get(pk=j.pk).result for j in jobs] == [n + 1 for n in range(5)]
    assert worker.output().count(WARNING) == 1


def test_with_a_direct_listen_alias_enqueues_wake_the_worker(pgbouncer, spawn_worker):
    # Polling every 600 s: only a notification can start these jobs within the test.
    worker = spawn_worker(
        "--poll-interval",
        "600",
        "-v",
        "3",
        env={"SQLQ_TEST_PGBOUNCER_PORT": str(pgbouncer), "SQLQ_TEST_LISTEN_DIRECT": "1"},
    )
    wait_for(lambda: "the start-up NOTIFY arrived" in worker.output())
    for n in range(3):
        job = enqueue("tests.add", {"a": n, "b": 1})

        def completed(job: Job = job) -> bool:
            return Job.objects.get(pk=job.pk).status == JobStatus.COMPLETED

        wait_for(completed)
        output = worker.output()
        # The wake-up path: the notification, then the claim that started the job.
        woken = output.rindex("Woken by NOTIFY default")
        assert output.index(f"Job id={job.pk} type=tests.add attempt=1 started") > woken
    assert WARNING not in worker.output()
    assert "database alias 'direct'" in worker.output()
