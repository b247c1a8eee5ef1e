"""The completer (django_sqlq.worker.completer): when a batch of completions is written,
and what happens when the database refuses one of them. No threads: the test calls what
the runners and the main loop call."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from django.db import connection

from django_sqlq import bulk_enqueue, enqueue, registry
from django_sqlq.db import ops_for
from django_sqlq.db.columns import ClaimedJob
from django_sqlq.models import Job, JobStatus
from django_sqlq.worker import Worker
from django_sqlq.worker.completer import FLUSH_BATCH, FLUSH_INTERVAL, Completer, Done


def fake_job(job_id: int) -> ClaimedJob:
    return ClaimedJob(
        id=job_id, queue="default", type="tests.noop", payload="{}", attempts=1,
        max_attempts=3, timeout=None, priority=0, scheduled_at=None,
    )  # fmt: skip


def noop_handler() -> registry.Handler:
    registry.autodiscover()  # as the worker does at start
    return registry.get("tests.noop")


@pytest.fixture
def written(monkeypatch: pytest.MonkeyPatch) -> tuple[Completer, list[list[Done]]]:
    completer = Worker().completer
    batches: list[list[Done]] = []
    monkeypatch.setattr(completer, "write", batches.append)
    return completer, batches


def add(completer: Completer, count: int) -> None:
    handler = noop_handler()
    for i in range(count):
        if not completer.pending:  # as the runners do (RunnerPool._process)
            completer.since = time.monotonic()
        completer.pending.append(Done(fake_job(i), None, handler, 0.0))


def test_nothing_to_write_writes_nothing(written):
    completer, batches = written
    completer.flush(force=True, idle=True)
    assert batches == []


def fresh(completer: Completer) -> None:
    """The oldest pending completion came just now, and stays that fresh: on a loaded
    machine FLUSH_INTERVAL (10 ms) can pass between add() and flush()."""
    completer.since = time.monotonic() + 3600


def test_a_fresh_completion_waits_while_other_jobs_run(written):
    completer, batches = written
    add(completer, 1)
    fresh(completer)
    completer.flush()
    assert batches == []
    assert len(completer.pending) == 1


def test_completions_are_written_when_nothing_else_runs(written):
    completer, batches = written
    add(completer, 2)
    completer.flush(idle=True)
    assert [len(batch) for batch in batches] == [2]
    assert completer.pending == []


def test_a_full_batch_is_written_at_once(written):
    completer, batches = written
    add(completer, FLUSH_BATCH - 1)
    fresh(completer)
    completer.flush()
    assert batches == []
    add(completer, 1)
    completer.flush()
    assert [len(batch) for batch in batches] == [FLUSH_BATCH]


def test_completions_are_written_once_the_oldest_waited_the_flush_interval(written):
    completer, batches = written
    add(completer, 1)
    add(completer, 1)
    completer.since = time.monotonic() - FLUSH_INTERVAL  # the first one's time
    completer.flush()
    assert [len(batch) for batch in batches] == [2]


def test_a_forced_flush_writes_whatever_is_there(written):
    completer, batches = written
    add(completer, 1)
    completer.flush(force=True)
    assert [len(batch) for batch in batches] == [1]


@pytest.fixture
def refuse_marked_results() -> Iterator[None]:
    """A trigger that makes the database refuse a completion whose result holds
    "refuse-me" (as it would refuse a value it cannot store)."""
    table = Job._meta.db_table
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                "CREATE FUNCTION sqlq_test_refuse() RETURNS trigger AS $$ BEGIN "
                "IF NEW.result::text LIKE '%refuse-me%' THEN "
                "RAISE EXCEPTION 'refused by a test trigger'; END IF; RETURN NEW; END $$ "
                "LANGUAGE plpgsql"
            )
            cursor.execute(
                f"CREATE TRIGGER sqlq_test_refuse BEFORE UPDATE ON {table} "
                "FOR EACH ROW EXECUTE FUNCTION sqlq_test_refuse()"
            )
        elif connection.vendor == "mysql":
            # A plain SIGNAL: error 1644, which mysqlclient raises as an OperationalError.
            # The worker took that for a lost connection and retried the batch for ever; it
            # is the statement's own refusal (db.is_transient).
            cursor.execute(
                f"CREATE TRIGGER sqlq_test_refuse BEFORE UPDATE ON {table} FOR EACH ROW "
                "IF NEW.result LIKE '%refuse-me%' THEN SIGNAL SQLSTATE '45000' "
                "SET MESSAGE_TEXT = 'refused by a test trigger'; END IF"
            )
        else:
            cursor.execute(
                f"CREATE TRIGGER sqlq_test_refuse BEFORE UPDATE ON {table} "
                "WHEN NEW.result LIKE '%refuse-me%' "
                "BEGIN SELECT RAISE(ABORT, 'refused by a test trigger'); END"
            )
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"DROP TRIGGER sqlq_test_refuse ON {table}"
                           if connection.vendor == "postgresql"
                           else "DROP TRIGGER sqlq_test_refuse")  # fmt: skip
            if connection.vendor == "postgresql":
                cursor.execute("DROP FUNCTION sqlq_test_refuse()")


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("refuse_marked_results")
def test_a_refused_completion_fails_its_attempt_and_the_others_are_written():
    worker = Worker(worker_id="w-completer", backoff=lambda _: 0)
    jobs = bulk_enqueue("tests.noop", [{}, {}, {}])
    claimed = ops_for("default").claim(
        queues=None, worker_id="w-completer", limit=3, lease_seconds=60
    )
    worker.held.add(job.id for job in claimed)
    first, refused, last = sorted(claimed, key=lambda job: job.id)
    handler = noop_handler()
    worker.completer.write([
        Done(first, {"n": 1}, handler, 0.0),
        Done(refused, "refuse-me", handler, 0.0),
        Done(last, {"n": 3}, handler, 0.0),
    ])  # fmt: skip
    rows = {job.id: job for job in Job.objects.filter(id__in=[job.id for job in jobs])}
    assert rows[first.id].status == JobStatus.COMPLETED
    assert rows[first.id].result == {"n": 1}
    assert rows[last.id].status == JobStatus.COMPLETED
    assert rows[last.id].result == {"n": 3}
    assert rows[refused.id].status == JobStatus.PENDING  # retried: its attempt failed
    assert "refused by a test trigger" in rows[refused.id].last_error
    assert (worker.jobs_done, worker.jobs_failed, worker.jobs_retried) == (2, 1, 1)
    assert worker.held.sorted() == []


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("refuse_marked_results")
def test_the_outcomes_written_before_a_refused_one_are_counted():
    """The plain completions are written (one statement) before the database refuses one
    written with its waiters (a transaction): they are counted and logged as completed,
    not written again one by one and logged as lost."""
    worker = Worker(worker_id="w-completer", backoff=lambda _: 0)
    jobs = bulk_enqueue("tests.noop", [{}, {}, {}])
    claimed = sorted(
        ops_for("default").claim(queues=None, worker_id="w-completer", limit=3, lease_seconds=60),
        key=lambda job: job.id,
    )
    waiter = enqueue("tests.noop", depends_on=[jobs[1]])
    worker.held.add(job.id for job in claimed)
    handler = noop_handler()
    results = [{"n": 0}, "refuse-me", {"n": 2}]
    worker.completer.write(
        [Done(job, r, handler, 0.0) for job, r in zip(claimed, results, strict=True)]
    )
    rows = {job.id: job for job in Job.objects.filter(id__in=[job.id for job in jobs])}
    assert [rows[job.id].status for job in claimed] == [
        JobStatus.COMPLETED,
        JobStatus.PENDING,  # retried: its attempt failed
        JobStatus.COMPLETED,
    ]
    assert "refused by a test trigger" in rows[claimed[1].id].last_error
    assert Job.objects.get(pk=waiter.pk).status == JobStatus.BLOCKED
    assert (worker.jobs_done, worker.jobs_failed, worker.jobs_retried) == (2, 1, 1)
    assert worker.held.sorted() == []


@pytest.mark.django_db(transaction=True)
def test_a_completion_for_a_job_this_worker_no_longer_holds_changes_nothing():
    worker = Worker(worker_id="w-late")
    bulk_enqueue("tests.noop", [{}])
    (job,) = ops_for("default").claim(queues=None, worker_id="w-other", limit=1, lease_seconds=60)
    worker.completer.write([Done(job, 1, noop_handler(), 0.0)])
    row = Job.objects.get(id=job.id)
    assert (row.status, row.locked_by) == (JobStatus.PROCESSING, "w-other")
    assert worker.jobs_done == 0
