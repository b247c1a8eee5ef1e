"""The SQL under django_sqlq/db/: one statement per claim, the partial index, no double claims."""

from __future__ import annotations

import threading

import pytest
from django.core.management import call_command
from django.db import connection, connections
from django.test.utils import CaptureQueriesContext

from django_sqlq import bulk_enqueue, lifecycle
from django_sqlq.db import ops_for
from django_sqlq.models import Job, JobStatus
from django_sqlq.worker import Worker

pytestmark = pytest.mark.django_db(transaction=True)


def test_claim_is_one_update_returning():
    bulk_enqueue("tests.noop", [{"n": i} for i in range(5)])
    with CaptureQueriesContext(connection) as queries:
        claimed = lifecycle.claim(
            "default", queues=["default"], worker_id="w", limit=3, lease_seconds=30
        )
    assert len(claimed) == 3
    assert len(queries) == 1
    sql = queries[0]["sql"].upper()
    assert sql.startswith("UPDATE") and "RETURNING" in sql
    if connection.vendor == "postgresql":
        assert "FOR UPDATE SKIP LOCKED" in sql
    assert Job.objects.filter(status=JobStatus.PROCESSING, locked_by="w").count() == 3


def test_completing_a_batch_is_one_statement():
    from django_sqlq.db.base import Finished

    bulk_enqueue("tests.noop", [{"n": i} for i in range(50)])
    claimed = lifecycle.claim("default", queues=None, worker_id="w", limit=50, lease_seconds=30)
    with CaptureQueriesContext(connection) as queries:
        done = lifecycle.complete(
            "default",
            [Finished(job.id, job.attempts, {"n": job.id}) for job in claimed],
            worker_id="w",
        )
    assert len(queries) == 1
    assert sorted(done) == sorted(job.id for job in claimed)
    results = dict(Job.objects.values_list("id", "result"))
    assert all(results[job.id] == {"n": job.id} for job in claimed)
    assert set(Job.objects.values_list("status", flat=True)) == {JobStatus.COMPLETED}


def test_concurrent_claims_never_hand_out_the_same_job():
    bulk_enqueue("tests.noop", [{"n": i} for i in range(600)])
    claims: dict[str, list[int]] = {}
    barrier = threading.Barrier(4)

    def claimer(name: str) -> None:
        got: list[int] = []
        try:
            barrier.wait()
            while True:
                batch = lifecycle.claim(
                    "default", queues=None, worker_id=name, limit=7, lease_seconds=30
                )
                if not batch:
                    break
                got.extend(job.id for job in batch)
        finally:
            claims[name] = got
            connections.close_all()

    threads = [threading.Thread(target=claimer, args=(f"w{i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    every = [job_id for got in claims.values() for job_id in got]
    assert len(every) == 600
    assert len(set(every)) == 600
    holders = dict(Job.objects.values_list("id", "locked_by"))
    for name, got in claims.items():
        assert all(holders[job_id] == name for job_id in got)


def _fill_finished_rows(count: int) -> None:
    jobs = bulk_enqueue("tests.noop", [{} for _ in range(count)])
    Job.objects.filter(pk__in=[job.pk for job in jobs]).update(status=JobStatus.COMPLETED)


def _fill_queues(per_queue: int, queues: list[str]) -> None:
    """``per_queue`` runnable jobs in each of ``queues``, by set-based SQL, then ANALYZE."""
    _fill_finished_rows(2000)
    for queue in queues:
        jobs = bulk_enqueue("tests.noop", [{} for _ in range(per_queue)], queue=queue)
        # Spread the priorities, so that a plan reading several queues at once must sort.
        Job.objects.filter(pk__in=[job.pk for job in jobs[::3]]).update(priority=5)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE sqlq_job")


def _worker_claim_sql(**worker_options) -> list[str]:
    """The claim statements a real worker runs (captured as executed, parameters in)."""
    with CaptureQueriesContext(connection) as queries:
        Worker(max_jobs=1, **worker_options).run(burst=True, install_signal_handlers=False)
    claims = [q["sql"] for q in queries if "SET status = 'processing'" in q["sql"]]
    assert claims, [q["sql"] for q in queries]
    return claims


def _plan(sql: str) -> str:
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute(f"EXPLAIN QUERY PLAN {sql}")
            return "\n".join(str(row[-1]) for row in cursor.fetchall())
        cursor.execute(f"EXPLAIN {sql}")
        return "\n".join(str(row[0]) for row in cursor.fetchall())


@pytest.mark.parametrize(
    "options",
    [
        {"queues": ["emails"]},
        {"queues": ["emails", "reports"]},
        {"all_queues": True},
        {"queues": ["default", "emails", "reports"], "exclude_queues": ["reports"]},
        {"all_queues": True, "exclude_queues": ["default"]},
    ],
    ids=["one queue", "two queues", "all queues", "exclusion list", "all but one"],
)
def test_the_workers_claim_reads_its_index_in_order(options):
    """EXPLAIN the statement the worker runs: each queue's runnable jobs are read from the
    claim index in its order; the backlog is never sorted."""
    _fill_queues(1500, ["default", "emails", "reports"])
    for sql in _worker_claim_sql(**options):
        plan = _plan(sql)
        assert "sqlq_job_claim_idx" in plan, plan
        if connection.vendor == "sqlite":
            assert "TEMP B-TREE" not in plan, plan
        else:
            assert "Sort" not in plan, plan
            assert "Seq Scan on sqlq_job" not in plan, plan


def test_a_claim_takes_queues_in_turn():
    """A queue with a few jobs is not starved by one with many: the queues take turns."""
    bulk_enqueue("tests.noop", [{} for _ in range(300)], queue="default")
    bulk_enqueue("tests.noop", [{} for _ in range(3)], queue="emails")
    ops = ops_for("default")
    batches = [
        ops.claim(queues=queues, worker_id="w", limit=10, lease_seconds=30, turn=turn)
        for turn, queues in enumerate([["default", "emails"], ["default", "emails"], None])
    ]
    # Turn 0 starts with "default" (it fills the batch); turn 1 starts with "emails" (its 3
    # jobs, then 7 from "default"); turn 2 serves every queue, and only "default" is left.
    assert [[job.queue for job in batch].count("emails") for batch in batches] == [0, 3, 0]
    assert [len(batch) for batch in batches] == [10, 10, 10]


@pytest.mark.django_db(transaction=True, databases=["default", "other"])
def test_migrations_are_complete():
    call_command("makemigrations", "django_sqlq", check=True, dry_run=True, verbosity=0)


def test_status_check_constraint_refuses_unknown_statuses():
    from django.db import IntegrityError, transaction

    job = bulk_enqueue("tests.noop", [{}, {}])[0]
    with pytest.raises(IntegrityError), transaction.atomic():
        Job.objects.filter(pk=job.pk).update(status="exploded")
    with pytest.raises(IntegrityError), transaction.atomic():
        Job.objects.filter(pk=job.pk).update(priority=1000)


@pytest.mark.parametrize("result", [None, {"sent": True}], ids=["no-results", "results"])
def test_completing_a_batch_looks_rows_up_by_primary_key(result):
    """The batched completion must be driven by the batch's ids (a plan that scans a status
    index once per row of the batch made it 5x slower on SQLite). Batches without results
    take a shorter form of the statement on SQLite: both are checked."""
    from django_sqlq.db.base import Finished

    _fill_finished_rows(2000)
    bulk_enqueue("tests.noop", [{} for _ in range(300)])
    claimed = lifecycle.claim("default", queues=None, worker_id="w", limit=100, lease_seconds=30)
    with CaptureQueriesContext(connection) as queries:
        lifecycle.complete(
            "default", [Finished(job.id, job.attempts, result) for job in claimed], worker_id="w"
        )
    stored = Job.objects.filter(pk__in=[job.id for job in claimed]).values_list("status", "result")
    assert list(stored) == [("completed", result)] * len(claimed) and len(claimed) == 100
    sql = queries[0]["sql"]
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("ANALYZE")
            cursor.execute(f"EXPLAIN QUERY PLAN {sql}")
            plan = " | ".join(str(row[-1]) for row in cursor.fetchall())
            assert "USING INTEGER PRIMARY KEY" in plan, plan
            assert "INDEX sqlq_job" not in plan, plan
        else:
            cursor.execute("ANALYZE sqlq_job")
            cursor.execute(f"EXPLAIN {sql}")
            plan = " | ".join(str(row[0]) for row in cursor.fetchall())
            # By primary key, or through the few processing rows (the lease index): never a
            # scan of the whole table.
            assert "Seq Scan on sqlq_job" not in plan, plan
