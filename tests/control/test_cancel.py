"""Cancel (of waiting and running jobs) and progress (issue 15, parts 2 and 3), on both
engines: the API, the statements that record a cancelled attempt (fenced), and real worker
processes that learn of a cancel while a handler runs."""

from __future__ import annotations

import math
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.db import connections
from django.utils import timezone

from django_sqlq import (
    CancelResult,
    JobCancelled,
    acancel,
    bulk_enqueue,
    cancel,
    enqueue,
    lifecycle,
)
from django_sqlq.control import MAX_PROGRESS_MESSAGE, JobControl, check_progress
from django_sqlq.db import ops_for
from django_sqlq.db.outcomes import Finished
from django_sqlq.jobcontext import JobContext
from django_sqlq.models import Job, JobStatus
from tests.conftest import fail_attempt, run_burst, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

# How long a test waits for a worker to act on a cancel: the worker learns within about a
# second; the rest is margin for a loaded machine (a CI machine three times slower than a
# quiet one, its worker processes still starting). Never a timing assertion: the handlers
# run for 60 s, so a cancel never acted on still fails the wait.
DEADLINE = 30.0


def files(tmp_path: Path, *names: str) -> dict[str, str]:
    return {name: str(tmp_path / name) for name in names}


def status_of(job: Job) -> str:
    return Job.objects.values_list("status", flat=True).get(pk=job.pk)


def claim(worker_id: str = "w1", lease_seconds: float = 60) -> list[Any]:
    return ops_for("default").claim(
        queues=["default"], worker_id=worker_id, limit=10, lease_seconds=lease_seconds
    )


# -- the API ------------------------------------------------------------------------------


def test_cancel_of_a_pending_job_cancels_it_at_once_and_no_worker_runs_it():
    job = enqueue("tests.noop")
    assert cancel(job) is CancelResult.CANCELLED
    job.refresh_from_db()
    assert (job.status, job.cancel_requested_at) == (JobStatus.CANCELLED, None)
    assert job.completed_at is not None
    run_burst()
    job.refresh_from_db()
    assert (job.status, job.attempts) == (JobStatus.CANCELLED, 0)


def test_cancel_of_a_scheduled_job_by_id():
    job = enqueue("tests.noop", delay=3600)
    assert cancel(job.pk) == "cancelled"
    assert status_of(job) == JobStatus.CANCELLED


@pytest.mark.parametrize("handler", ["tests.noop", "tests.boom"])
def test_cancel_of_a_finished_job_changes_nothing(handler):
    job = enqueue(handler, max_attempts=1)
    run_burst()
    before = Job.objects.get(pk=job.pk)
    assert before.is_finished
    assert cancel(job) is CancelResult.FINISHED
    after = Job.objects.get(pk=job.pk)
    assert (after.status, after.updated_at, after.cancel_requested_at) == (
        before.status,
        before.updated_at,
        None,
    )


@pytest.mark.parametrize("job_id", [10**12, 0, -5, 2**63, 2**70])
def test_cancel_of_a_missing_job_says_so(job_id):
    assert cancel(job_id) is CancelResult.MISSING


def test_set_progress_takes_any_real_number():
    from decimal import Decimal
    from fractions import Fraction

    assert check_progress(Fraction(1, 4), "").fraction == 0.25
    assert check_progress(1, "").fraction == 1.0
    with pytest.raises(TypeError):
        check_progress(Decimal("0.5"), "")  # not a numbers.Real: say so rather than guess


@pytest.mark.parametrize("bad", ["12", True, 1.0, None])
def test_cancel_refuses_what_is_not_a_job_or_an_id(bad):
    with pytest.raises(TypeError, match="a Job or a job id"):
        cancel(bad)


def test_cancel_of_an_unsaved_job_and_an_unknown_alias_are_errors():
    with pytest.raises(ValueError, match="not saved"):
        cancel(Job(type="tests.noop"))
    job = enqueue("tests.noop")
    with pytest.raises(ValueError, match="no such database alias"):
        cancel(job, using="nowhere")
    assert status_of(job) == JobStatus.PENDING


def test_cancel_of_a_running_job_records_a_request_once():
    job = enqueue("tests.noop")
    claim()
    assert cancel(job) is CancelResult.REQUESTED
    first = Job.objects.get(pk=job.pk).cancel_requested_at
    assert first is not None
    assert cancel(job) is CancelResult.REQUESTED
    again = Job.objects.get(pk=job.pk)
    assert (again.status, again.cancel_requested_at) == (JobStatus.PROCESSING, first)


def test_acancel_is_cancel_for_async_code():
    job = enqueue("tests.noop")
    assert async_to_sync(acancel)(job.pk) is CancelResult.CANCELLED
    assert status_of(job) == JobStatus.CANCELLED


# -- the statements that end a cancelled attempt (fenced) -----------------------------------


def test_a_completion_after_a_cancel_request_is_recorded_cancelled():
    job = enqueue("tests.noop")
    (claimed,) = claim()
    lifecycle.request_cancel([job.pk])
    written = ops_for("default").complete_statuses(
        [Finished(job.pk, claimed.attempts, "result")], worker_id="w1"
    )
    assert written == {job.pk: JobStatus.CANCELLED}
    job.refresh_from_db()
    assert (job.status, job.result) == (JobStatus.CANCELLED, "result")


def test_a_failure_after_a_cancel_request_is_cancelled_not_retried():
    job = enqueue("tests.noop", max_attempts=5)
    (claimed,) = claim()
    lifecycle.request_cancel([job.pk])
    error = lifecycle.ErrorInfo.from_exception(RuntimeError("stopped"))
    status = fail_attempt("default", claimed, error, worker_id="w1", retry_in=10)
    assert status == JobStatus.CANCELLED
    job.refresh_from_db()
    assert (job.status, job.attempts) == (JobStatus.CANCELLED, 1)
    assert job.completed_at is not None


def test_a_handler_that_raises_job_cancelled_cancels_its_own_job():
    job = enqueue("tests.noop", max_attempts=5)
    (claimed,) = claim()
    error = lifecycle.ErrorInfo.from_exception(JobCancelled("not needed any more"))
    status = fail_attempt("default", claimed, error, worker_id="w1", retry_in=10, cancel=True)
    assert status == JobStatus.CANCELLED
    assert "JobCancelled: not needed any more" in Job.objects.get(pk=job.pk).last_error


def test_a_worker_that_lost_its_lease_writes_no_cancelled_outcome():
    job = enqueue("tests.noop", max_attempts=5)
    (claimed,) = claim("w1", lease_seconds=1)
    lifecycle.request_cancel([job.pk])
    # w1's lease runs out: the reaper cancels the job (a requested cancel is not run again).
    later = timezone.now() + timedelta(seconds=60)
    assert [row[2] for row in lifecycle.reap("default", now=later)] == [JobStatus.CANCELLED]
    # w1's late outcomes change nothing, nor does its late progress.
    done = Finished(job.pk, claimed.attempts, "late")
    assert ops_for("default").complete_statuses([done], worker_id="w2") == {}
    error = lifecycle.ErrorInfo.from_exception(RuntimeError("late"))
    assert fail_attempt("default", claimed, error, worker_id="w2", retry_in=0) is None
    ops_for("default").write_progress([(job.pk, claimed.attempts, 0.5, "late")], worker_id="w2")
    job.refresh_from_db()
    assert (job.status, job.result, job.progress) == (JobStatus.CANCELLED, None, None)


def test_a_job_given_back_unstarted_after_a_cancel_request_is_cancelled():
    job = enqueue("tests.noop")
    claim()
    lifecycle.request_cancel([job.pk])
    assert lifecycle.release("default", [job.pk], worker_id="w1") == 1
    job.refresh_from_db()
    assert (job.status, job.attempts) == (JobStatus.CANCELLED, 0)


def test_retry_of_a_cancelled_job_clears_its_request_and_progress():
    job = enqueue("tests.noop")
    (claimed,) = claim()
    ops_for("default").write_progress([(job.pk, claimed.attempts, 0.5, "half")], worker_id="w1")
    lifecycle.request_cancel([job.pk])
    ops_for("default").complete_statuses([Finished(job.pk, 1)], worker_id="w1")
    assert lifecycle.retry_now([job.pk]).changed == 1
    job.refresh_from_db()
    assert (job.status, job.cancel_requested_at, job.progress) == (JobStatus.PENDING, None, None)
    run_burst()
    assert status_of(job) == JobStatus.COMPLETED


def test_the_cancel_requests_query_probes_the_partial_index(engine):
    ops = ops_for("default")
    sql = (
        f"SELECT id FROM {ops.table} WHERE status = 'processing' "
        "AND cancel_requested_at IS NOT NULL AND locked_by = %s"
    )
    explain = "EXPLAIN QUERY PLAN " if engine == "sqlite" else "EXPLAIN "
    if engine == "mysql":
        _assert_mariadb_reads_the_processing_rows(sql)
        return
    with connections["default"].cursor() as cursor:
        if engine == "postgresql":
            cursor.execute("SET enable_seqscan = off")
        cursor.execute(explain + sql, ["w1"])
        plan = " ".join(str(row) for row in cursor.fetchall())
    assert "sqlq_job_cancel_idx" in plan


def _assert_mariadb_reads_the_processing_rows(sql: str) -> None:
    """MariaDB has no partial index (migration 0015 drops sqlq_job_cancel_idx there): the
    probe reads the processing rows alone, a range of an index led by status (they all are:
    (status, id), (status, scheduled_at), (status, completed_at), the claim's), never the
    table. With running jobs beside a table of finished ones, as a busy worker sees it."""
    finished = bulk_enqueue("tests.noop", [{} for _ in range(2000)])
    Job.objects.filter(pk__in=[job.pk for job in finished]).update(
        status=JobStatus.COMPLETED, completed_at=timezone.now()
    )
    bulk_enqueue("tests.noop", [{} for _ in range(60)])
    claimed = ops_for("default").claim(queues=None, worker_id="w1", limit=20, lease_seconds=60)
    ops_for("default").claim(queues=None, worker_id="w2", limit=20, lease_seconds=60)
    lifecycle.request_cancel([claimed[0].id])
    with connections["default"].cursor() as cursor:
        cursor.execute(
            "SELECT index_name FROM information_schema.statistics WHERE table_schema = "
            "DATABASE() AND table_name = 'sqlq_job' AND seq_in_index = 1 AND column_name = "
            "'status'"
        )
        status_led = {row[0] for row in cursor.fetchall()}
        plans = []
        for analyzed in (False, True):
            if analyzed:
                cursor.execute("ANALYZE TABLE sqlq_job")
            cursor.execute("EXPLAIN " + sql, ["w1"])
            columns = [column[0] for column in cursor.description]
            plans.append([dict(zip(columns, row, strict=True)) for row in cursor.fetchall()])
        cursor.execute(sql, ["w1"])
        assert [row[0] for row in cursor.fetchall()] == [claimed[0].id]
    assert "sqlq_job_failed_idx" in status_led, status_led
    for plan in plans:
        (step,) = plan
        assert step["key"] in status_led, (plan, status_led)
        assert (step["type"], step["ref"]) == ("ref", "const"), plan  # status = 'processing'


# -- progress: validation --------------------------------------------------------------------


@pytest.mark.parametrize("fraction", [math.nan, -0.01, 1.01, math.inf])
def test_set_progress_refuses_a_fraction_out_of_0_to_1(fraction):
    with pytest.raises(ValueError, match="from 0 to 1"):
        JobControl(1, 1).set_progress(fraction, "x")


@pytest.mark.parametrize("fraction", ["0.5", True, None, [0.5]])
def test_set_progress_refuses_what_is_not_a_number(fraction):
    with pytest.raises(TypeError, match="from 0 to 1"):
        JobControl(1, 1).set_progress(fraction, "x")


def test_set_progress_refuses_a_message_that_is_not_text():
    with pytest.raises(TypeError, match="must be a str"):
        JobControl(1, 1).set_progress(0.5, b"bytes")  # type: ignore[arg-type]


def test_a_huge_progress_message_is_capped_and_made_storable():
    progress = check_progress(1, "x" * 1_000_000)
    assert (progress.fraction, len(progress.message)) == (1.0, MAX_PROGRESS_MESSAGE)
    assert progress.message.endswith("…")
    assert check_progress(0, "a\x00b\ud800").message == "a\\x00b\\ud800"


def test_a_context_without_a_worker_validates_and_is_never_cancelled():
    context = JobContext(job_id=1, type="t", queue="q", attempt=1, max_attempts=1, worker_id="w")
    context.set_progress(0.5, "fine")
    context.check_cancelled()
    assert context.cancel_requested is False
    with pytest.raises(ValueError, match="from 0 to 1"):
        context.set_progress(2, "too far")


def test_a_context_checkpoint_raises_once_cancelled():
    control = JobControl(7, 1)
    context = JobContext(
        job_id=7, type="t", queue="q", attempt=1, max_attempts=1, worker_id="w", control=control
    )
    context.check_cancelled()
    assert control.request_cancel() is True
    assert control.request_cancel() is False
    assert context.cancel_requested is True
    with pytest.raises(JobCancelled, match="id=7 was cancelled"):
        context.check_cancelled()


# -- real worker processes ---------------------------------------------------------------------


def test_a_cooperative_handler_stops_within_a_second_of_its_cancel(tmp_path, spawn_worker):
    paths = files(tmp_path, "started", "saw")
    job = enqueue("tests.cancel_cooperative", paths, max_attempts=5)
    worker = spawn_worker("--worker-id", "coop")
    wait_for(Path(paths["started"]).exists, timeout=30)
    assert cancel(job) is CancelResult.REQUESTED
    wait_for(lambda: status_of(job) == JobStatus.CANCELLED, timeout=DEADLINE)
    job.refresh_from_db()
    assert Path(paths["saw"]).exists(), worker.output()  # the handler saw the flag
    assert job.attempts == 1  # not retried
    assert "JobCancelled" in job.last_error
    assert job.locked_by == "coop"
    assert job.progress is not None  # its last progress is kept
    assert 0 < job.progress <= 1


def test_a_handler_that_ignores_its_cancel_is_recorded_cancelled(tmp_path, spawn_worker):
    paths = files(tmp_path, "started", "saw", "release")
    job = enqueue("tests.cancel_ignored", paths, max_attempts=5)
    spawn_worker()
    wait_for(Path(paths["started"]).exists, timeout=30)
    assert cancel(job) is CancelResult.REQUESTED
    wait_for(Path(paths["saw"]).exists, timeout=DEADLINE)  # told, and runs on
    assert status_of(job) == JobStatus.PROCESSING
    Path(paths["release"]).touch()
    wait_for(lambda: status_of(job) == JobStatus.CANCELLED, timeout=DEADLINE)
    job.refresh_from_db()
    assert (job.result, job.attempts, job.last_error) == ("ran to the end", 1, "")


def test_an_async_handlers_task_is_cancelled(tmp_path, spawn_worker):
    paths = files(tmp_path, "started", "saw")
    job = enqueue("tests.cancel_async", paths, max_attempts=5)
    spawn_worker()
    wait_for(Path(paths["started"]).exists, timeout=30)
    assert cancel(job) is CancelResult.REQUESTED
    wait_for(lambda: status_of(job) == JobStatus.CANCELLED, timeout=DEADLINE)
    assert Path(paths["saw"]).exists()  # the coroutine got CancelledError
    job.refresh_from_db()
    assert job.attempts == 1
    assert "CancelledError" in job.last_error


def test_an_async_handler_with_a_timeout_is_cancelled_too(tmp_path, spawn_worker):
    paths = files(tmp_path, "started", "saw")
    job = enqueue("tests.cancel_async", paths, max_attempts=5, timeout=120)
    spawn_worker()
    wait_for(Path(paths["started"]).exists, timeout=30)
    cancel(job)
    wait_for(lambda: status_of(job) == JobStatus.CANCELLED, timeout=DEADLINE)
    assert Path(paths["saw"]).exists()


def test_progress_is_visible_from_another_connection_while_the_job_runs(tmp_path, spawn_worker):
    paths = files(tmp_path, "started", "release")
    job = enqueue("tests.progress", paths)
    spawn_worker()
    wait_for(Path(paths["started"]).exists, timeout=30)

    def reported() -> bool:
        row = Job.objects.values("status", "progress", "progress_message").get(pk=job.pk)
        return row == {
            "status": JobStatus.PROCESSING,
            "progress": 0.4,
            "progress_message": "resized 40 of 100",
        }

    wait_for(reported, timeout=DEADLINE)  # this test's connection; the worker's is another
    assert Job.objects.get(pk=job.pk).progress_at is not None
    Path(paths["release"]).touch()
    wait_for(lambda: status_of(job) == JobStatus.COMPLETED, timeout=DEADLINE)

    def kept() -> bool:  # the last report, made just before the end, is written too
        return Job.objects.get(pk=job.pk).progress_message == "resized 100 of 100"

    wait_for(kept, timeout=DEADLINE)
    assert Job.objects.get(pk=job.pk).progress == 1.0


def test_a_job_cancelled_in_the_burst_worker_in_process(tmp_path):
    """The in-process worker (burst) serves the same controls: a cancel requested before
    the job starts is seen at its start, and the handler is never run."""
    paths = files(tmp_path, "started", "saw")
    job = enqueue("tests.cancel_cooperative", paths)
    from django_sqlq.worker import Worker

    worker = Worker()
    original = worker.controls.begin

    def begin(job_id: int, attempt: int) -> JobControl:
        lifecycle.request_cancel([job_id])  # as if an operator clicked just then
        worker.controls.tick()
        return original(job_id, attempt)

    worker.controls.begin = begin  # type: ignore[method-assign]
    worker.run(burst=True, install_signal_handlers=False)
    job.refresh_from_db()
    assert job.status == JobStatus.CANCELLED
    assert not Path(paths["started"]).exists()
    assert "cancelled before it started" in job.last_error


def test_the_service_takes_each_report_once_and_never_loses_the_last():
    control = JobControl(1, 1)
    assert (control.has_progress, control.take_progress()) == (False, None)
    control.set_progress(0.1, "a")
    control.set_progress(0.2, "b")  # replaces "a": only the latest is written
    assert control.take_progress() == (0.2, "b")
    assert control.take_progress() is None
    control.set_progress(0.2, "b")  # the same values again: a new report, written again
    assert control.has_progress
    assert control.take_progress() == (0.2, "b")


def test_a_capped_message_of_wide_characters_is_stored_whole():
    job = enqueue("tests.noop")
    (claimed,) = claim()
    progress = check_progress(0.5, "é€😀" * 1000)
    ops_for("default").write_progress(
        [(job.pk, claimed.attempts, *progress)], worker_id="w1", now=None
    )
    job.refresh_from_db()
    assert (job.progress, job.progress_message) == (0.5, progress.message)
    assert len(job.progress_message or "") == MAX_PROGRESS_MESSAGE
