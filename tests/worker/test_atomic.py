"""Atomic handlers (``@handler(..., atomic=True)``, issue 16 part 2): the handler's writes to
the queue database and its job's completion commit together or not at all.

The handlers are in tests/testapp/atomic_jobs.py: each run writes one Order row named
``"<tag> <attempt> <pid>"`` inside its transaction.
"""

from __future__ import annotations

import signal
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import transaction
from django.utils import timezone

from django_sqlq import cancel, enqueue, handler, registry
from django_sqlq.models import Job, JobStatus
from tests.conftest import held_elsewhere, run_burst
from tests.faults.conftest import errors_in, runs, until
from tests.testapp import atomic_jobs  # noqa: F401 (registers the handlers)
from tests.testapp.models import Order

pytestmark = pytest.mark.django_db(transaction=True)

LEASE = {"SQLQ_TEST_LEASE_SECONDS": "1"}


def rows(tag: str) -> list[str]:
    """The Order rows committed by runs of the jobs tagged ``tag``."""
    return sorted(Order.objects.filter(item__startswith=f"{tag} ").values_list("item", flat=True))


def files(tmp_path: Path) -> dict[str, str]:
    return {name: str(tmp_path / name) for name in ("started", "release", "ended")}


def status_of(job: Job) -> str:
    job.refresh_from_db()
    return job.status


# -- registration ----------------------------------------------------------------------------


def test_an_async_atomic_handler_is_refused_at_registration():
    async def handle(payload: Any) -> None:
        pass

    with pytest.raises(TypeError, match=r"atomic=True.*coroutine function"):
        handler("tests.atomic_async", atomic=True)(handle)
    assert registry.find("tests.atomic_async") is None


def test_atomic_takes_a_bool():
    def handle(payload: Any) -> None:
        pass

    with pytest.raises(TypeError, match=r"atomic=\.\.\.\) takes True or False"):
        handler("tests.atomic_junk", atomic="yes")(handle)  # type: ignore[call-overload]
    assert registry.find("tests.atomic_junk") is None


def test_atomic_is_recorded_on_the_handler():
    assert registry.get("atomic.write").atomic is True
    assert registry.get("faults.record").atomic is False


# -- in a real worker process -----------------------------------------------------------------


def test_the_handlers_writes_and_its_completion_commit_together(tmp_path, spawn_worker):
    paths = files(tmp_path)
    job = enqueue("atomic.write", {"tag": "together", **paths})
    worker = spawn_worker()
    until(lambda: len(runs(Path(paths["started"]))) == 1, 30, "the handler wrote its row")
    # Written, not committed: neither the row nor the completion is visible.
    assert rows("together") == []
    assert status_of(job) == JobStatus.PROCESSING
    Path(paths["release"]).touch()
    until(lambda: status_of(job) == JobStatus.COMPLETED, 30, "the job completed")
    assert rows("together") == [f"together 1 {worker.pid}"]
    assert (job.result, job.attempts) == (worker.pid, 1)
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    assert errors_in(worker.output()) == []


def test_a_frozen_atomic_worker_commits_nothing_and_the_takeover_commits_once(
    tmp_path, spawn_worker, engine
):
    paths = files(tmp_path)
    started, release = Path(paths["started"]), Path(paths["release"])
    job = enqueue("atomic.write", {"tag": "frozen", **paths}, max_attempts=3)
    zombie = spawn_worker("--worker-id", "zombie", env=LEASE)
    until(lambda: runs(started) == {1: [zombie.pid]}, 30, "the first worker wrote its row")
    zombie.signal(signal.SIGSTOP)
    try:
        rescuer = spawn_worker("--worker-id", "rescuer", env=LEASE)
        if engine == "sqlite":
            _frozen_sqlite_writer_is_never_taken_over(job, zombie.pid)
            taker, attempt = zombie, 1
        else:
            # The zombie's row is written, not committed; the rescuer reaps the expired
            # lease and runs attempt 2, which writes its own row.
            until(lambda: len(runs(started)) == 2, 30, "the second worker took the job over")
            job.refresh_from_db()
            assert (job.status, job.locked_by, job.attempts) == (
                JobStatus.PROCESSING,
                "rescuer",
                2,
            )
            assert rows("frozen") == []
            release.touch()
            until(lambda: status_of(job) == JobStatus.COMPLETED, 30, "the takeover completed")
            taker, attempt = rescuer, 2
    finally:
        release.touch()
        zombie.signal(signal.SIGCONT)
    until(lambda: status_of(job) == JobStatus.COMPLETED, 30, "the job completed")
    if engine != "sqlite":
        # Woken, the zombie's handler returns; its completion is fenced out: rolled back.
        until(
            lambda: "atomic handler's writes were rolled back" in zombie.output(),
            30,
            "the zombie tried to complete the job",
        )
    assert rows("frozen") == [f"frozen {attempt} {taker.pid}"]
    job.refresh_from_db()
    assert (job.status, job.attempts, job.result) == (JobStatus.COMPLETED, attempt, taker.pid)
    for worker in (zombie, rescuer):
        worker.wait_ready()
        worker.signal(signal.SIGTERM)
    assert [zombie.wait(), rescuer.wait()] == [0, 0]
    assert rows("frozen") == [f"frozen {attempt} {taker.pid}"]


def _frozen_sqlite_writer_is_never_taken_over(job: Job, pid: int) -> None:
    """On SQLite the frozen atomic handler holds the write lock: no one can reap its job,
    however long past its lease; it completes it when woken (its completion is fenced by
    worker, attempt and status, not by the lease's time)."""

    def long_expired() -> bool:
        job.refresh_from_db()
        expires = job.lease_expires_at
        return expires is not None and expires < timezone.now() - timedelta(seconds=3)

    until(long_expired, 30, "the lease ran out three seconds ago")
    assert (job.status, job.locked_by, job.attempts) == (JobStatus.PROCESSING, "zombie", 1)
    assert rows("frozen") == []
    assert pid > 0


def test_a_timed_out_atomic_handler_is_rolled_back(tmp_path, spawn_worker):
    paths = files(tmp_path)
    job = enqueue("atomic.timed", {"tag": "timed", **paths}, max_attempts=1)
    worker = spawn_worker()
    # Failed at its 1 s timeout while it still runs: on SQLite its transaction's connection
    # was closed under it (the write lock released), on PostgreSQL its completion is fenced.
    until(lambda: status_of(job) == JobStatus.FAILED, 30, "the job timed out")
    assert "JobTimeoutError" in (job.errors[-1]["exception_class"])
    assert rows("timed") == []
    Path(paths["release"]).touch()
    until(lambda: len(runs(Path(paths["ended"]))) == 1, 30, "the abandoned handler went on")
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    assert rows("timed") == []
    job.refresh_from_db()
    assert (job.status, job.attempts) == (JobStatus.FAILED, 1)


def test_an_atomic_handler_stopped_in_a_lock_wait_at_its_timeout_cannot_commit(
    tmp_path, spawn_worker, engine
):
    """At its timeout an atomic handler waits for a row lock another transaction holds; the
    wait is stopped, and the handler, as careless code does, catches the error, writes again
    and returns. None of it commits: the attempt failed at its timeout. (On MariaDB a
    ``KILL QUERY`` left the transaction open: the handler committed its outcome and every
    write made after the timeout, the job recorded completed. Its session is ended now.)"""
    if engine == "sqlite":
        pytest.skip("row locks: PostgreSQL, MariaDB (SQLite has one writer at a time)")
    paths = files(tmp_path)
    Order.objects.create(item="locked row")
    with held_elsewhere(lambda: Order.objects.select_for_update().get(item="locked row")):
        payload = {"tag": "waiter", "locked": "locked row", **paths}
        job = enqueue("atomic.lock_waiter", payload, max_attempts=1)
        worker = spawn_worker()
        until(lambda: status_of(job) == JobStatus.FAILED, 30, "the job timed out")
        until(lambda: len(runs(Path(paths["ended"]))) == 1, 30, "the abandoned handler went on")
        assert rows("waiter") == []
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    job.refresh_from_db()
    assert (job.status, job.attempts) == (JobStatus.FAILED, 1)
    assert job.errors[-1]["exception_class"].endswith("JobTimeoutError")
    assert rows("waiter") == []


def test_a_cancel_checkpoint_rolls_back_and_a_return_commits_cancelled(spawn_worker, engine):
    if engine == "sqlite":
        # A cancel request is a write: on SQLite it waits for the running atomic handler to
        # commit (it holds the write lock), so a handler waiting for its cancel never sees it.
        pytest.skip("an atomic handler holds SQLite's write lock: cancel() waits for it")
    stopped = enqueue("atomic.until_cancelled", {"tag": "checkpoint", "check": True})
    returned = enqueue("atomic.until_cancelled", {"tag": "returned"})
    worker = spawn_worker("--concurrency", "2")
    until(
        lambda: {status_of(stopped), status_of(returned)} == {JobStatus.PROCESSING},
        30,
        "both jobs started",
    )
    cancel(stopped)
    cancel(returned)
    until(
        lambda: {status_of(stopped), status_of(returned)} == {JobStatus.CANCELLED},
        30,
        "both jobs were cancelled",
    )
    # The checkpoint raised JobCancelled: rolled back. The other ran to its end: its writes
    # commit with its completion, recorded cancelled (as for any handler).
    assert rows("checkpoint") == []
    assert rows("returned") == [f"returned 1 {worker.pid}"]
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0


# -- in this process: what fails the attempt rolls the handler's writes back -------------------


def test_a_handler_that_raises_leaves_no_writes(tmp_path):
    payload = {"tag": "raises", "fail": True, "follow_up": str(tmp_path / "f")}
    job = enqueue("atomic.write", payload, max_attempts=2)
    worker = run_burst(backoff=lambda _: 0.0)
    job.refresh_from_db()
    assert (job.status, job.attempts) == (JobStatus.FAILED, 2)
    assert [e["exception_class"] for e in job.errors] == ["RuntimeError"] * 2
    assert rows("raises") == []
    assert not Job.objects.filter(type="faults.record").exists()  # its enqueue rolled back too
    assert (worker.jobs_done, worker.jobs_failed) == (0, 2)


def test_a_job_enqueued_by_an_atomic_handler_exists_once_it_commits(tmp_path):
    job = enqueue("atomic.write", {"tag": "parent", "follow_up": str(tmp_path / "f")})
    run_burst()
    assert status_of(job) == JobStatus.COMPLETED
    child = Job.objects.get(type="faults.record")
    assert (child.payload["n"], child.status) == (job.pk, JobStatus.COMPLETED)


def test_a_deferred_sqlite_connection_takes_the_write_lock_before_the_handler(engine):
    """On a connection the project set to DEFERRED, take_write_lock() takes the lock at the
    start (BEGIN DEFERRED alone takes none until the first write)."""
    if engine != "sqlite":
        pytest.skip("SQLite's write lock")
    import sqlite3

    from django.db import connection

    from django_sqlq.db import ops_for

    def locked_for_others() -> bool:
        other = sqlite3.connect(connection.settings_dict["NAME"], timeout=0)
        try:
            other.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError:
            return True
        finally:
            other.close()
        return False

    connection.ensure_connection()
    mode = connection.transaction_mode  # type: ignore[attr-defined]
    connection.transaction_mode = "DEFERRED"  # type: ignore[attr-defined]
    try:
        with transaction.atomic():
            assert not locked_for_others()
            ops_for("default").take_write_lock()
            assert locked_for_others()
    finally:
        connection.transaction_mode = mode  # type: ignore[attr-defined]


def test_an_atomic_handler_that_leaves_its_own_block_open_commits_nothing():
    job = enqueue("atomic.left_open", {"tag": "left"}, max_attempts=1)
    run_burst()
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED
    assert job.errors[-1]["exception_class"] == ("django_sqlq.exceptions.TransactionLeftOpenError")
    assert rows("left") == []
    # The runner's connection works for the next job.
    after = enqueue("atomic.write", {"tag": "after"})
    run_burst()
    assert status_of(after) == JobStatus.COMPLETED
    assert len(rows("after")) == 1


def test_an_unstorable_result_rolls_back_and_fails_for_good():
    job = enqueue("atomic.bad_result", {"tag": "bad"}, max_attempts=3)
    run_burst()
    job.refresh_from_db()
    assert (job.status, job.attempts) == (JobStatus.FAILED, 1)
    assert job.errors[-1]["exception_class"] == "django_sqlq.exceptions.PayloadError"
    assert "its writes were rolled back" in job.last_error
    assert rows("bad") == []
