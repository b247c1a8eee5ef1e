"""Scenario 10: handlers that misbehave without raising (issue 11).

- A handler that returns with its connection in a state it must not leave it in: autocommit
  off with writes, an atomic block or a savepoint never exited, a cursor never closed, the
  connection closed under the worker. The queue keeps running (on SQLite the database is
  never left write-locked), ``--burst`` ends, SIGTERM finishes, and the job's outcome is
  honest: writes rolled back mean a failed attempt, never a "completed" job whose writes
  were silently lost; the next job's writes are committed.
- A handler's declared ``timeout`` holds although the enqueuing process never imported it,
  and for an async handler that blocks its event loop; a timed-out call waiting in the
  database has its statement interrupted.
- A return value JSON cannot hold fails the job at once: its side effects do not run again.
- A handler that leaves its connection's session refusing writes (read-only, another
  search_path): the worker records outcomes on a fresh connection; no job is left behind.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection, connections
from django.test import override_settings

from django_sqlq import enqueue, registry
from django_sqlq.models import Job, JobStatus
from tests.conftest import WorkerProcess
from tests.faults.conftest import runs, until
from tests.testapp import fault_jobs
from tests.testapp.models import Order

pytestmark = [pytest.mark.faults, pytest.mark.django_db(transaction=True)]

# how -> (the misbehaving job's status, the rows it leaves behind)
LEFT_OPEN = {
    "autocommit": (JobStatus.FAILED, set()),
    "atomic": (JobStatus.FAILED, set()),
    "savepoint": (JobStatus.FAILED, set()),
    "raw_begin": (JobStatus.FAILED, set()),
    "close_in_atomic": (JobStatus.FAILED, set()),  # its writes were lost with it
    "autocommit_no_writes": (JobStatus.COMPLETED, set()),
    "cursor": (JobStatus.COMPLETED, {"cursor-0", "cursor-1", "cursor-2"}),
    "close": (JobStatus.COMPLETED, {"close"}),
}


def items() -> set[str]:
    return set(Order.objects.values_list("item", flat=True))


@pytest.mark.parametrize("how", sorted(LEFT_OPEN))
def test_a_handler_that_leaves_its_connection_open_cannot_hurt_the_queue(how, spawn_worker):
    bad = enqueue("faults.leave_open", {"how": how}, max_attempts=1, priority=10)
    after = [enqueue("faults.write_order", {"item": f"after-{n}"}) for n in range(3)]
    worker = spawn_worker("--burst", "--concurrency", "1")
    assert worker.wait(60) == 0, worker.output()  # --burst ends
    status, rows = LEFT_OPEN[how]
    bad.refresh_from_db()
    assert bad.status == status, bad.last_error
    if status == JobStatus.FAILED:
        assert "TransactionLeftOpenError" in bad.last_error
        assert "uncommitted writes were rolled back" in bad.last_error
    # What the misbehaving job wrote without committing is gone; every later job's write
    # is there, and each of them completed.
    assert items() == rows | {f"after-{n}" for n in range(3)}
    for job in after:
        job.refresh_from_db()
        assert job.status == JobStatus.COMPLETED, job.last_error
    assert "database is locked" not in worker.output()


def _monitoring(engine: str) -> contextlib.AbstractContextManager[object]:
    """A monitoring tool that reads the server's list of transactions every 20 ms (MariaDB's
    ``information_schema.innodb_trx``; nothing elsewhere), until the block ends."""
    if engine != "mysql":
        return contextlib.nullcontext()
    stop = threading.Event()

    def watch() -> None:
        try:
            while not stop.wait(0.02):
                with connection.cursor() as cursor:
                    cursor.execute("SELECT COUNT(*) FROM information_schema.innodb_trx")
                    cursor.fetchall()
        finally:
            connections.close_all()

    @contextlib.contextmanager
    def running() -> Iterator[object]:
        thread = threading.Thread(target=watch)
        thread.start()
        try:
            yield thread
        finally:
            stop.set()
            thread.join(30)

    return running()


def test_handlers_leaving_writes_open_one_after_another_each_fail(spawn_worker, engine):
    """Twelve jobs in a row that write and leave their transaction open, each found so
    within moments of the one before, while a monitoring tool reads the server's list of
    transactions. (On MariaDB the check read ``information_schema.innodb_trx``, a copy that
    InnoDB remakes only when nobody read it for 100 ms: a transaction begun since looked as
    if it had written nothing, and such jobs were recorded completed with their writes
    lost: 14 of 15 in a row; 20 of 20 beside a tool reading it every 50 ms.)"""
    ways = ["raw_begin", "atomic", "autocommit"] * 4
    jobs = [enqueue("faults.leave_open", {"how": how}, max_attempts=1) for how in ways]
    with _monitoring(engine):
        worker = spawn_worker("--burst", "--concurrency", "1")
        assert worker.wait(60) == 0, worker.output()
    for job in jobs:
        job.refresh_from_db()
        assert job.status == JobStatus.FAILED, (job.payload, job.last_error)
        assert "TransactionLeftOpenError" in job.last_error
    assert items() == set()


@pytest.mark.parametrize("how", ["read_only", "search_path"])
@pytest.mark.parametrize("raises", [False, True], ids=["returns", "raises"])
def test_a_handler_that_changes_its_session_cannot_hurt_the_queue(how, raises, spawn_worker):
    # Before, on PostgreSQL: the worker records failures on the runner thread's connection,
    # which the handler had left read-only (or with a search_path without the jobs table):
    # every later failure of that thread went unrecorded, its jobs stayed `processing`
    # until their leases ran out (and ran again on the same connection), and --burst ended
    # with them so.
    bad = enqueue("faults.poison_session", {"how": how, "raise": raises}, max_attempts=1,
                  priority=10)  # fmt: skip
    after = [enqueue("faults.write_order", {"item": f"after-{n}"}, max_attempts=3)
             for n in range(3)]  # fmt: skip
    boom = enqueue("tests.boom", max_attempts=1)
    worker = spawn_worker("--burst", "--concurrency", "1")
    assert worker.wait(60) == 0, worker.output()
    bad.refresh_from_db()
    if raises:
        assert (bad.status, bad.attempts) == (JobStatus.FAILED, 1)
        assert bad.last_error.startswith("ValueError: raised after changing the session")
    else:
        assert bad.status == JobStatus.COMPLETED
    # The next job may lose one attempt to the changed session; none is lost or stuck.
    assert [Job.objects.get(pk=j.pk).status for j in after] == [JobStatus.COMPLETED] * 3
    assert items() == {"after-0", "after-1", "after-2"}
    boom.refresh_from_db()
    assert boom.status == JobStatus.FAILED
    assert "Boom" in boom.last_error


def test_after_a_transaction_left_open_the_worker_still_stops_on_sigterm(spawn_worker):
    worker = spawn_worker("--concurrency", "1")
    worker.wait_ready()
    bad = enqueue("faults.leave_open", {"how": "autocommit"}, max_attempts=1)
    until(lambda: Job.objects.get(pk=bad.pk).status == JobStatus.FAILED, 30, "job failed")
    good = enqueue("faults.write_order", {"item": "later"})
    until(lambda: Job.objects.get(pk=good.pk).status == JobStatus.COMPLETED, 30, "next job")
    assert items() == {"later"}
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0, worker.output()
    assert "database is locked" not in worker.output()


def test_a_handler_timeout_holds_when_the_enqueuer_never_imported_the_handler(
    tmp_path: Path, spawn_worker: Callable[..., WorkerProcess]
) -> None:
    # As in a web process without the handlers' code: the registry does not know the type,
    # and the project set CHECK_TYPES = False for it, as the settings reference says.
    release = tmp_path / "release"  # never created: the worker must abandon the call
    registry.unregister("faults.declared_timeout")
    try:
        with override_settings(SQLQ={**settings.SQLQ, "CHECK_TYPES": False}):
            job = enqueue("faults.declared_timeout", {"release": str(release), "max_seconds": 60},
                          max_attempts=1)  # fmt: skip
    finally:
        registry.register(fault_jobs.declared_timeout, "faults.declared_timeout", timeout=0.5)
    assert job.timeout is None  # only a timeout given to enqueue() is stored
    worker = spawn_worker("--burst")
    assert worker.wait(30) == 0, worker.output()
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED
    assert "JobTimeoutError" in job.last_error
    assert "timeout of 0.5s" in job.last_error


def test_an_async_handler_that_blocks_its_loop_still_times_out(
    tmp_path: Path, spawn_worker: Callable[..., WorkerProcess]
) -> None:
    # Before: asyncio.wait_for never got control back from a coroutine that blocked its
    # loop, so the timeout never fired and the job (and its runner thread) ran on.
    release = tmp_path / "release"  # never created while the worker runs
    job = enqueue("faults.async_block", {"release": str(release)}, max_attempts=1)
    after = enqueue("tests.async_add", {"a": 1, "b": 2})
    worker = spawn_worker("--burst", "--concurrency", "1")
    assert worker.wait(30) == 0, worker.output()
    release.touch()
    job.refresh_from_db()
    after.refresh_from_db()
    assert job.status == JobStatus.FAILED
    assert job.last_error.startswith("django_sqlq.exceptions.JobTimeoutError"), job.last_error
    assert "timeout of 0.5s" in job.last_error
    assert (after.status, after.result) == (JobStatus.COMPLETED, 3)


def test_a_timed_out_handler_waiting_in_the_database_is_interrupted(
    tmp_path: Path, spawn_worker: Callable[..., WorkerProcess]
) -> None:
    # Before: the abandoned call went on waiting in its statement, holding its connection
    # (a PostgreSQL backend), its transaction and its locks for as long as the statement
    # ran: one more per timed-out attempt.
    path = tmp_path / "ends"
    worker = spawn_worker("--concurrency", "1")
    worker.wait_ready()
    job = enqueue("faults.db_hang", {"path": str(path), "seconds": 120}, max_attempts=1)
    after = enqueue("tests.add", {"a": 1, "b": 2})
    # The statement is stopped soon after the timeout, not run for its 120 s (what it wrote
    # says which: the deadline only bounds a slow machine's wait).
    until(lambda: path.exists() and path.read_text().strip(), 60, "the statement ended")
    assert path.read_text().split()[0] == "interrupted", worker.output()
    until(lambda: Job.objects.get(pk=after.pk).status == JobStatus.COMPLETED, 30, "next job")
    # The two outcomes may share a batch, whose plain completion is written first (one
    # statement), then the failure (a transaction of its own): wait for the failure too.
    until(lambda: Job.objects.get(pk=job.pk).status != JobStatus.PROCESSING, 30, "the failure")
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED
    assert "JobTimeoutError" in job.last_error
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0, worker.output()


@pytest.mark.parametrize("kind", ["datetime", "set"])
def test_a_result_that_cannot_be_stored_fails_the_job_at_once(
    kind: str, tmp_path: Path, spawn_worker: Callable[..., WorkerProcess]
) -> None:
    path = tmp_path / "runs"
    job = enqueue("faults.unstorable_result", {"path": str(path), "n": 1, "kind": kind},
                  max_attempts=5)  # fmt: skip
    worker = spawn_worker("--burst")
    assert worker.wait(30) == 0, worker.output()
    job.refresh_from_db()
    assert (job.status, job.attempts) == (JobStatus.FAILED, 1), job.last_error
    assert "return value cannot be stored as JSON" in job.last_error
    assert "failed without retry" in job.last_error
    assert len(runs(path)[1]) == 1  # its side effect ran once


# -- USE_TZ = False with a local time zone ---------------------------------------------------

ZONE = "America/New_York"  # behind UTC: a naive local time read as UTC is hours in the past


def test_naive_local_times_agree_with_the_database_clock(spawn_worker):
    """USE_TZ = False and TIME_ZONE not UTC: naive run_at values are local time, and every
    time the queue writes or compares (claims, retries, the admin's run-now) agrees."""
    import datetime as dt

    from django.test import override_settings

    from django_sqlq import lifecycle

    with override_settings(USE_TZ=False, TIME_ZONE=ZONE):
        now = dt.datetime.now()  # naive, local (Django set the process's zone)
        later = enqueue("tests.noop", run_at=now + dt.timedelta(hours=1))
        delayed = enqueue("tests.noop", delay=3600)
        due = enqueue("tests.noop", run_at=now - dt.timedelta(minutes=1))
        failed = enqueue("tests.boom", max_attempts=1)
        worker = spawn_worker("--burst", env={"SQLQ_TEST_LOCAL_TIME_ZONE": ZONE})
        assert worker.wait(60) == 0, worker.output()
        statuses = {
            name: Job.objects.get(pk=job.pk).status
            for name, job in (("later", later), ("delayed", delayed), ("due", due),
                              ("failed", failed))
        }  # fmt: skip
        assert statuses == {"later": JobStatus.SCHEDULED, "delayed": JobStatus.SCHEDULED,
                            "due": JobStatus.COMPLETED, "failed": JobStatus.FAILED}  # fmt: skip
        # What the database wrote is local time too: within minutes of now, not hours.
        done = Job.objects.get(pk=due.pk)
        assert done.completed_at is not None
        assert abs(done.completed_at - dt.datetime.now()) < dt.timedelta(minutes=5)
        assert abs(Job.objects.get(pk=delayed.pk).scheduled_at - (now + dt.timedelta(hours=1))) \
            < dt.timedelta(minutes=5)  # fmt: skip
        # An operator's retry and run-now make jobs runnable now by the same clock.
        lifecycle.retry_now([failed.pk])
        lifecycle.run_now([later.pk])
        worker = spawn_worker("--burst", env={"SQLQ_TEST_LOCAL_TIME_ZONE": ZONE})
        assert worker.wait(60) == 0, worker.output()
        assert Job.objects.get(pk=later.pk).status == JobStatus.COMPLETED
        assert Job.objects.get(pk=failed.pk).status == JobStatus.FAILED  # ran (and failed) again
        assert Job.objects.get(pk=failed.pk).attempts == 1
        assert Job.objects.get(pk=delayed.pk).status == JobStatus.SCHEDULED
