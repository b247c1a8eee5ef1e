"""The outcome writer (django_sqlq.outcomes): the end of every attempt, completed or failed,
written in one batch with what follows from it (a chain's next step, the jobs that waited),
each outcome fenced by worker and attempt. Called directly, on every engine."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, connections, transaction

from django_sqlq import enqueue, outcomes, workflows
from django_sqlq.db import ops_for
from django_sqlq.db.columns import ClaimedJob
from django_sqlq.lifecycle import ErrorInfo
from django_sqlq.models import Job, JobStatus
from tests.conftest import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

ERROR = ErrorInfo("RuntimeError", "boom", "Traceback: ...")


def claim(count: int, worker_id: str = "w") -> dict[int, ClaimedJob]:
    jobs = ops_for("default").claim(
        queues=None, worker_id=worker_id, limit=count, lease_seconds=60
    )
    assert len(jobs) == count
    return {job.id: job for job in jobs}


def status(job: Job) -> str:
    return Job.objects.values_list("status", flat=True).get(pk=job.pk)


def test_one_batch_writes_every_kind_of_outcome_and_what_follows():
    done = enqueue("tests.noop", max_attempts=3)
    chained = enqueue("tests.noop", max_attempts=3)
    later = enqueue("tests.noop", max_attempts=3)
    now_again = enqueue("tests.noop", max_attempts=3)
    spent = enqueue("tests.noop", max_attempts=3)
    stopped = enqueue("tests.noop", max_attempts=3)
    stale = enqueue("tests.noop", max_attempts=3)
    held = claim(6)
    claim(1, worker_id="other")  # ``stale``: held by another worker
    after_done = enqueue("tests.noop", depends_on=[done])
    after_spent = enqueue("tests.noop", depends_on=[spent])  # fails with it (its policy)
    then = workflows.continuation(
        "tests.noop",
        {"step": 2},
        queue="default",
        priority=0,
        run_at=None,
        delay=None,
        max_attempts=None,
        timeout=None,
    )

    written = outcomes.write(
        "default",
        [
            outcomes.Completed(held[done.pk], {"ok": 1}),
            outcomes.Completed(held[chained.pk], None, then),
            outcomes.Failed(held[later.pk], ERROR, 30.0),
            outcomes.Failed(held[now_again.pk], ERROR, 0.0),
            outcomes.Failed(held[spent.pk], ERROR, None),
            outcomes.Failed(held[stopped.pk], ERROR, 30.0, cancel=True),
            # This worker's outcome for a job it does not hold: fenced out.
            outcomes.Failed(held[done.pk]._replace(id=stale.pk), ERROR, None),
        ],
        worker_id="w",
    )

    assert written.statuses == {
        done.pk: JobStatus.COMPLETED,
        chained.pk: JobStatus.COMPLETED,
        later.pk: JobStatus.SCHEDULED,
        now_again.pk: JobStatus.PENDING,
        spent.pk: JobStatus.FAILED,
        stopped.pk: JobStatus.CANCELLED,
    }
    for job, expected in written.statuses.items():
        assert Job.objects.get(pk=job).status == expected
    assert status(stale) == JobStatus.PROCESSING
    assert Job.objects.get(pk=done.pk).result == {"ok": 1}
    (step,) = written.continued
    assert Job.objects.get(pk=step).chain_id == chained.pk
    assert written.released == [after_done.pk]
    assert status(after_done) == JobStatus.PENDING
    assert status(after_spent) == JobStatus.FAILED
    failed = Job.objects.get(pk=spent.pk)
    assert failed.last_error.startswith("RuntimeError: boom")
    assert [entry["attempt"] for entry in failed.errors] == [1]


def test_a_failure_after_a_cancel_request_is_written_cancelled():
    job = enqueue("tests.noop", max_attempts=5)
    held = claim(1)
    Job.objects.filter(pk=job.pk).update(cancel_requested_at=Job.objects.get(pk=job.pk).created_at)
    written = outcomes.write(
        "default", [outcomes.Failed(held[job.pk], ERROR, 10.0)], worker_id="w"
    )
    assert written.statuses == {job.pk: JobStatus.CANCELLED}


@pytest.mark.skipif(connection.vendor == "sqlite", reason="row locks: PostgreSQL, MariaDB")
def test_a_batch_never_waits_for_a_job_while_it_holds_another():
    """An enqueue that locks a job of the batch (to depend on it) and then another, while
    the batch is written: the batch writes what it can without waiting, then waits for the
    first job alone. Holding the second while it waited for the first, it would deadlock."""
    first = enqueue("tests.noop", max_attempts=1)
    second = enqueue("tests.noop", max_attempts=1)
    held = claim(2)
    locked, errors = threading.Event(), []

    def other_transaction() -> None:
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                if connection.vendor == "mysql":
                    # This thread's connection is closed after: the setting goes with it.
                    cursor.execute("SET SESSION innodb_lock_wait_timeout = 20")
                    lock = "FOR UPDATE"
                else:
                    cursor.execute("SET LOCAL lock_timeout = '20s'")
                    lock = "FOR NO KEY UPDATE"
                cursor.execute(f"SELECT id FROM sqlq_job WHERE id = %s {lock}", [first.pk])
                locked.set()
                # Until the batch wrote ``second`` (and so let it go), then take it.
                wait_for(lambda: status(second) == JobStatus.FAILED, timeout=20)
                cursor.execute(f"SELECT id FROM sqlq_job WHERE id = %s {lock}", [second.pk])
        except BaseException as exc:
            errors.append(exc)
        finally:
            locked.set()
            connections.close_all()

    thread = threading.Thread(target=other_transaction)
    thread.start()
    assert locked.wait(20)
    written = outcomes.write(
        "default",
        [
            outcomes.Failed(held[first.pk], ERROR, None),
            outcomes.Failed(held[second.pk], ERROR, None),
        ],
        worker_id="w",
    )
    thread.join(30)
    assert errors == []
    assert written.statuses == {first.pk: JobStatus.FAILED, second.pk: JobStatus.FAILED}
