"""The SQL under django_sqlq/db/: one statement per claim, the partial index, no double claims."""

from __future__ import annotations

import re
import threading
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.db import IntegrityError, connection, connections, transaction
from django.db.models.functions import Now
from django.db.models.signals import post_delete
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_sqlq import bulk_enqueue, lifecycle
from django_sqlq.db import ops_for
from django_sqlq.db.columns import INSERT_COLUMNS, JOB_COLUMNS, ClaimedJob
from django_sqlq.db.outcomes import Finished
from django_sqlq.db.postgresql import TIDY_LOCK
from django_sqlq.models import Job, JobStatus
from django_sqlq.worker import Worker
from django_sqlq.worker.maintenance import tidier as worker_module
from django_sqlq.worker.maintenance.tidier import QUIET_MIN
from tests.conftest import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def test_claim_is_one_update_returning():
    bulk_enqueue("tests.noop", [{"n": i} for i in range(5)])
    with CaptureQueriesContext(connection) as queries:
        claimed = ops_for("default").claim(
            queues=["default"], worker_id="w", limit=3, lease_seconds=30
        )
    assert len(claimed) == 3
    if connection.vendor == "mysql":
        # MariaDB has no UPDATE ... RETURNING: one transaction, a locking read of the rows
        # on the claim index, then one UPDATE of the ids it read (returned as read).
        statements = [q["sql"] for q in queries]
        assert len(statements) == 4, statements
        begin, read, update, commit = statements
        assert (begin, commit) == ("BEGIN", "COMMIT"), statements
        assert read.startswith("SELECT "), read
        assert read.endswith("FOR UPDATE SKIP LOCKED"), read
        ids = ", ".join(str(job.id) for job in sorted(claimed, key=lambda job: job.id))
        assert update.startswith("UPDATE sqlq_job SET status = 'processing'"), update
        assert update.endswith(f"WHERE id IN ({ids})"), update
        assert Job.objects.filter(status=JobStatus.PROCESSING, locked_by="w").count() == 3
        return
    assert len(queries) == 1
    sql = queries[0]["sql"].upper()
    assert sql.startswith("UPDATE")
    assert "RETURNING" in sql
    if connection.vendor == "postgresql":
        assert "FOR UPDATE SKIP LOCKED" in sql
    assert Job.objects.filter(status=JobStatus.PROCESSING, locked_by="w").count() == 3


def test_completing_a_batch_is_one_statement():
    bulk_enqueue("tests.noop", [{"n": i} for i in range(50)])
    claimed = ops_for("default").claim(queues=None, worker_id="w", limit=50, lease_seconds=30)
    if connection.vendor == "mysql":
        ops_for("default").max_json_bytes()  # the packet: read once per connection, not per batch
    with CaptureQueriesContext(connection) as queries:
        done = ops_for("default").complete_statuses(
            [Finished(job.id, job.attempts, {"n": job.id}) for job in claimed],
            worker_id="w",
        )
    if connection.vendor == "mysql":
        # One transaction: a locking read of the batch's rows this worker still holds,
        # through the primary key (db.mysql_path.by_id), then one UPDATE of them by it.
        statements = [q["sql"] for q in queries]
        assert len(statements) == 4, [sql[:80] for sql in statements]
        begin, read, update, commit = statements
        assert (begin, commit) == ("BEGIN", "COMMIT"), statements
        ids = ", ".join(str(job_id) for job_id in sorted(job.id for job in claimed))
        columns = "id, attempts, cancel_requested_at IS NULL"
        table = "sqlq_job FORCE INDEX (PRIMARY)"
        assert read.startswith(f"SELECT {columns} FROM {table} WHERE id IN ({ids}) AND "), read
        assert read.endswith("ORDER BY id FOR UPDATE"), read
        assert update.startswith("UPDATE sqlq_job SET status = "), update
        assert update.endswith(f"WHERE id IN ({ids})"), update
    else:
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
                batch = ops_for("default").claim(
                    queues=None, worker_id=name, limit=7, lease_seconds=30
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
    """``per_queue`` runnable jobs in each of ``queues``, finished and future jobs beside."""
    _fill_finished_rows(2000)
    for queue in queues:
        jobs = bulk_enqueue("tests.noop", [{} for _ in range(per_queue)], queue=queue)
        # Spread the priorities, so that a plan reading several queues at once must sort.
        Job.objects.filter(pk__in=[job.pk for job in jobs[::3]]).update(priority=5)
    # Jobs for tomorrow (never in the claim's index), and a few scheduled ones already due.
    bulk_enqueue("tests.noop", [{} for _ in range(3000)], delay=86400)
    due = bulk_enqueue("tests.noop", [{} for _ in range(3)], delay=86400)
    Job.objects.filter(pk__in=[job.pk for job in due]).update(scheduled_at=Now())


def _worker_sql(**worker_options: Any) -> dict[str, list[str]]:
    """The statements a real worker runs to find work (captured as executed, parameters in):
    its claims, its promotions of due scheduled jobs, its reads of the next due time."""
    with CaptureQueriesContext(connection) as queries:
        Worker(max_jobs=1, **worker_options).run(burst=True, install_signal_handlers=False)
    found: dict[str, list[str]] = {"claim": [], "promote": [], "next due": []}
    for query in queries:
        sql = query["sql"]
        if connection.vendor == "mysql":
            # MariaDB's claim and promotion are each a locking read, then an UPDATE of the
            # ids it read: the reads are what find the rows.
            if " AS arm, " in sql and "FOR UPDATE SKIP LOCKED" in sql:
                found["claim"].append(sql)
            elif "status = 'scheduled'" in sql and "FOR UPDATE SKIP LOCKED" in sql:
                found["promote"].append(sql)
            elif "MIN(scheduled_at)" in sql:
                found["next due"].append(sql)
            continue
        if "SET status = 'processing'" in sql:
            found["claim"].append(sql)
        elif "SET status = 'pending'" in sql and "status = 'scheduled'" in sql:
            found["promote"].append(sql)
        elif "MIN(scheduled_at)" in sql:
            found["next due"].append(sql)
    assert all(found.values()), [q["sql"] for q in queries]
    return found


def _plan(sql: str) -> str:
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute(f"EXPLAIN QUERY PLAN {sql}")
            return "\n".join(str(row[-1]) for row in cursor.fetchall())
        if connection.vendor == "mysql":
            return _mariadb_plan(cursor, sql)
        cursor.execute(f"EXPLAIN {sql}")
        return "\n".join(str(row[0]) for row in cursor.fetchall())


def _mariadb_plan(cursor: Any, sql: str) -> str:
    """MariaDB's EXPLAIN, a line a table: its access type, the index it reads (not the ones
    it could: possible_keys is left out) and Extra ("Using filesort", "Select tables
    optimized away")."""
    cursor.execute(f"EXPLAIN {sql}")
    columns = [column[0] for column in cursor.description]
    lines = []
    for row in cursor.fetchall():
        step = dict(zip(columns, row, strict=True))
        lines.append(
            f"table={step['table']} type={step['type']} key={step['key']} "
            f"ref={step['ref']} Extra={step['Extra']}"
        )
    return "\n".join(lines)


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
    _forget_sqlite_statistics()
    statements = _worker_sql(**options)
    # Without statistics (a new SQLite database) and with them (after ANALYZE, or PRAGMA
    # optimize; PostgreSQL's autovacuum): with them, SQLite once sorted every pending job.
    for analyzed in (False, True):
        if analyzed:
            with connection.cursor() as cursor:
                cursor.execute(_analyze("sqlq_job"))
        elif connection.vendor not in ("sqlite", "mysql"):
            continue
        for sql in statements["claim"]:
            plan = _plan(sql)
            assert "sqlq_job_claim_idx" in plan, plan
            _assert_no_sort_no_scan(plan)
            if connection.vendor == "mysql":
                # Each queue's arm the claim index's entries of (status, queue), in its
                # order (named: db.mysql_path.CLAIM_INDEX; a range, or a ref of both).
                arms = plan.splitlines()
                assert len(arms) == sql.count(" AS arm, "), plan
                assert all(
                    re.search(r"type=(range|ref) key=sqlq_job_claim_idx ", arm) for arm in arms
                ), plan
        # Future jobs are read only through their own index, oldest first: never scanned.
        for sql in statements["promote"] + statements["next due"]:
            plan = _plan(sql)
            if connection.vendor == "mysql" and "MIN(scheduled_at)" in sql:
                # MariaDB reads MIN(scheduled_at) of one status off the end of the index
                # (status, scheduled_at), and names no index for it.
                assert plan.endswith("Extra=Select tables optimized away"), plan
                continue
            assert "sqlq_job_scheduled_idx" in plan, plan
            _assert_no_sort_no_scan(plan)


def test_the_steps_asleep_are_read_from_their_own_index():
    """emit_event()'s look-up of a key's waiters and the dashboard's count of the jobs asleep
    read the index of the steps asleep, not the done steps every job that takes steps
    leaves behind (which enter no index but the unique one)."""
    from django_sqlq import emit_event
    from django_sqlq.dashboard.queries import asleep_counts
    from django_sqlq.models import JobStep

    # A thousand finished jobs' steps, two thousand future jobs, ten jobs asleep.
    JobStep.objects.bulk_create(
        [JobStep(job_id=n, name=f"step-{i}") for n in range(1000) for i in range(3)]
    )
    later = timezone.now() + timedelta(days=3)
    bulk_enqueue("tests.noop", [{} for _ in range(2000)], run_at=later)
    asleep = bulk_enqueue("tests.noop", [{} for _ in range(10)], run_at=later)
    JobStep.objects.bulk_create(
        [
            JobStep(job_id=job.id, name="paid", kind="event", state="waiting", wait_key=f"k{n}")
            for n, job in enumerate(asleep[:5])
        ]
        + [
            JobStep(job_id=job.id, name="nap", kind="sleep", state="sleeping")
            for job in asleep[5:]
        ]
    )
    with connection.cursor() as cursor:
        cursor.execute(_analyze("sqlq_job_step"))
        cursor.execute(_analyze("sqlq_job"))
    with CaptureQueriesContext(connection) as queries:
        emit_event("k1", {"paid": True})
        asleep_counts("default")
    reads = [
        q["sql"]
        for q in queries
        if "sqlq_job_step" in q["sql"]
        and ("wait_key" in q["sql"].split("WHERE", 1)[-1] or "COUNT" in q["sql"])
        # MariaDB locks the rows it found again by primary key (db.mysql_path.by_id).
        and "FORCE INDEX (PRIMARY)" not in q["sql"]
    ]
    assert len(reads) == 2, [q["sql"] for q in queries]
    for sql in reads:
        plan = _plan(sql)
        assert "sqlq_job_step_asleep_idx" in plan, (sql, plan)
        assert "SCAN sqlq_job_step" not in plan, plan
        assert "Seq Scan on sqlq_job_step" not in plan, plan
        if connection.vendor == "mysql":
            # MariaDB's index (state, wait_key) holds every step, the done ones too: the
            # reads are a range of its sleeping and waiting states (by key for the waiters),
            # never the whole table or index.
            steps = next(line for line in plan.splitlines() if "table=sqlq_job_step " in line)
            assert "key=sqlq_job_step_asleep_idx " in steps, plan
            if "wait_key" in sql:
                assert "type=ref " in steps, plan
                assert "ref=const,const " in steps, plan
            else:
                assert "type=range " in steps, plan
    assert JobStep.objects.get(job_id=asleep[1].id).state == "done"


def test_a_batch_of_completions_too_long_for_one_statement_is_cut():
    """Results of a batch of completions sum past what one statement carries (MariaDB's
    max_allowed_packet, 16 MiB by default: a hundred results of 1 MiB are 100): the batch is
    written in as many UPDATEs as it takes, each result whole. (The server refused the
    statement and closed the connection: the worker retried it for ever.) Here the packet
    is made small; elsewhere the batch is one statement."""
    bulk_enqueue("tests.noop", [{} for _ in range(5)])
    ops = ops_for("default")
    claimed = ops.claim(queues=["default"], worker_id="w", limit=5, lease_seconds=60)
    assert len(claimed) == 5
    mariadb = connection.vendor == "mysql"
    if mariadb:
        connection.ensure_connection()
        connection.connection.sqlq_max_packet = 400_000  # a result's cost: 2 x 60 KB
    results = {job.id: {"blob": f"{job.id}:" + "x" * 60_000} for job in claimed}
    with CaptureQueriesContext(connection) as queries:
        done = ops.complete_statuses(
            [Finished(job.id, job.attempts, results[job.id]) for job in claimed], worker_id="w"
        )
    assert done == dict.fromkeys(results, "completed")
    assert dict(Job.objects.values_list("id", "result")) == results
    updates = [q for q in queries if q["sql"].startswith("UPDATE")]
    assert len(updates) == (3 if mariadb else 1), [q["sql"][:80] for q in updates]
    if mariadb:
        connection.connection.sqlq_max_packet = None  # read again


def _assert_no_sort_no_scan(plan: str) -> None:
    if connection.vendor == "sqlite":
        assert "TEMP B-TREE" not in plan, plan
        assert "SCAN sqlq_job" not in plan, plan
    elif connection.vendor == "mysql":
        # Neither a scan nor a sort of the jobs' table. (The promotion's locking read sorts
        # the ids it picked, at most its LIMIT of them, by id: a derived table, not this one.)
        for line in plan.splitlines():
            if line.startswith("table=sqlq_job "):
                assert "type=ALL " not in line, plan
                assert "type=index " not in line, plan
                assert "Using filesort" not in line, plan
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
    _fill_finished_rows(2000)
    bulk_enqueue("tests.noop", [{} for _ in range(300)])
    claimed = ops_for("default").claim(queues=None, worker_id="w", limit=100, lease_seconds=30)
    with CaptureQueriesContext(connection) as queries:
        ops_for("default").complete_statuses(
            [Finished(job.id, job.attempts, result) for job in claimed], worker_id="w"
        )
    stored = Job.objects.filter(pk__in=[job.id for job in claimed]).values_list("status", "result")
    assert list(stored) == [("completed", result)] * len(claimed)
    assert len(claimed) == 100
    if connection.vendor == "mysql":
        _assert_mariadb_completion_by_id([q["sql"] for q in queries])
        return
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


def _assert_mariadb_completion_by_id(statements: list[str]) -> None:
    """MariaDB's completion: the locking read finds the batch's rows by primary key (named:
    db.mysql_path.by_id; through an index led by status it deadlocked with operators), and
    the UPDATE writes them by primary key. Never the finished rows."""
    read, update = (
        next(sql for sql in statements if sql.startswith(start))
        for start in ("SELECT id, attempts", "UPDATE sqlq_job SET status")
    )
    with connection.cursor() as cursor:
        cursor.execute(_analyze("sqlq_job"))
        cursor.execute(
            "SELECT index_name FROM information_schema.statistics WHERE table_schema = "
            "DATABASE() AND table_name = 'sqlq_job' AND seq_in_index = 1 AND column_name = "
            "'status'"
        )
        status_led = {row[0] for row in cursor.fetchall()}
        assert "sqlq_job_failed_idx" in status_led, status_led
        plans = {sql: _mariadb_plan(cursor, sql) for sql in (read, update)}
    for plan in plans.values():
        assert plan.count("\n") == 0, plan  # one table
        assert "type=range key=PRIMARY " in plan, plan


def _forget_sqlite_statistics() -> None:
    """SQLite keeps ANALYZE's statistics (sqlite_stat1) in the test database across tests,
    which empty the tables, not the statistics: a plan read "without statistics" after
    another test's ANALYZE was read with that test's shape of the table."""
    if connection.vendor != "sqlite":
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM sqlite_master WHERE name = 'sqlite_stat1'")
        if cursor.fetchone():
            cursor.execute("DELETE FROM sqlite_stat1")
            cursor.execute("ANALYZE sqlite_master")  # the planner reloads the (empty) statistics


def _analyze(table: str) -> str:
    return f"ANALYZE TABLE {table}" if connection.vendor == "mysql" else f"ANALYZE {table}"


def test_tidy_vacuums_the_jobs_table_one_worker_at_a_time():
    ops = ops_for("default")
    if connection.vendor != "postgresql":
        assert not ops.needs_tidy
        assert ops.tidy() is False
        return

    assert ops.needs_tidy
    assert ops.tidy() is True
    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT vacuum_count FROM pg_stat_user_tables WHERE relname = 'sqlq_job'")
        assert cursor.fetchone()[0] >= 1
    # Another worker is at it (it holds the lock): this one does not wait, it skips.
    other = connections.create_connection("default")
    try:
        with other.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_lock(%s)", [TIDY_LOCK])
        assert ops.tidy() is False
        with other.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s)", [TIDY_LOCK])
    finally:
        other.close()  # (the server may release a closed session's locks a moment later)
    assert ops.tidy() is True


def test_a_worker_tidies_after_many_claims(monkeypatch):
    monkeypatch.setattr(worker_module, "TIDY_EVERY", 20)
    tidied: list[int] = []
    original = type(ops_for("default")).tidy

    def tidy(self: Any) -> Any:
        tidied.append(1)
        return original(self)

    monkeypatch.setattr(type(ops_for("default")), "tidy", tidy)
    bulk_enqueue("tests.noop", [{} for _ in range(60)])
    Worker().run(burst=True, install_signal_handlers=False)
    assert Job.objects.filter(status=JobStatus.COMPLETED).count() == 60
    assert bool(tidied) == (connection.vendor == "postgresql")


def test_a_worker_vacuums_once_its_queue_goes_quiet(spawn_worker):
    """A stream's last jobs leave dead rows that no later claim will tidy: a worker that
    claimed QUIET_MIN jobs since its last VACUUM runs one when the queue goes quiet (issue
    22; this server runs with autovacuum off)."""
    if connection.vendor != "postgresql":
        pytest.skip("VACUUM of the jobs table: PostgreSQL")

    def last_vacuum() -> Any:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT last_vacuum FROM pg_stat_user_tables WHERE relname = 'sqlq_job'"
            )
            return cursor.fetchone()[0]

    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        before = cursor.fetchone()[0]
    bulk_enqueue("tests.noop", [{} for _ in range(QUIET_MIN + 50)])
    worker = spawn_worker()
    wait_for(lambda: Job.objects.filter(status=JobStatus.COMPLETED).count() == QUIET_MIN + 50, 60)
    # The queue is quiet now; the worker's VACUUM follows within QUIET_POLLS poll intervals.
    wait_for(lambda: (last_vacuum() or before) > before, 30)
    assert worker.proc.poll() is None, worker.output()


def test_delete_is_one_conditional_statement_even_with_delete_receivers():
    """lifecycle.delete() is one conditional DELETE ... RETURNING: QuerySet.delete() would
    read the rows first once a post_delete receiver exists, and delete a job claimed in
    between."""
    waiting, running = bulk_enqueue("tests.noop", [{}, {}])
    Job.objects.filter(pk=running.pk).update(status=JobStatus.PROCESSING)

    def receiver(**kwargs: object) -> None:
        pass

    post_delete.connect(receiver, sender=Job)
    try:
        with CaptureQueriesContext(connection) as queries:
            outcome = lifecycle.delete([waiting.pk, running.pk], alias="default")
    finally:
        post_delete.disconnect(receiver, sender=Job)
    # The conditional DELETE comes first: nothing read the rows before it. What follows
    # only concerns the deleted pending job's waiters (the blockers table).
    statements = [
        q["sql"]
        for q in queries
        if "sqlq_job_blocker" not in q["sql"] and not q["sql"].startswith(("BEGIN", "COMMIT"))
    ]
    if connection.vendor == "mysql":
        # MariaDB's DELETE takes no index hint: the rows are locked by primary key first
        # (db.mysql_path.by_id), a locking read of ids, not a read of the rows.
        lock, *statements = statements
        assert lock.startswith("SELECT id FROM sqlq_job FORCE INDEX (PRIMARY)"), lock
        assert lock.endswith("FOR UPDATE"), lock
    assert len(statements) == 1
    assert statements[0].upper().startswith("DELETE")
    assert (outcome.changed, outcome.skipped) == (1, 1)
    assert list(Job.objects.values_list("pk", flat=True)) == [running.pk]


def test_named_parameters_through_djangos_cursor():
    """Statements with more than two parameters name them (``%(now)s``) and pass a dict:
    Django's SQLite cursor turns them into ``:now``; psycopg takes them as they are. A name
    used twice is one parameter; ``%%`` is still a literal ``%``; unused names are ignored."""
    cast = "::integer" if connection.vendor == "postgresql" else ""
    sql = f"SELECT %(n)s{cast} * %(n)s{cast}, %(s)s, '100%%'"
    with connection.cursor() as cursor:
        cursor.execute(sql, {"n": 3, "s": "x", "unused": None})
        assert tuple(cursor.fetchone()) == (9, "x", "100%")


def test_every_statement_runs_with_psycopgs_server_side_binding():
    """With ``OPTIONS["server_side_binding"]`` psycopg sends the parameters apart from the
    statement ($1, $2...), a name used several times as one: every queue statement runs so."""
    if connection.vendor != "postgresql":
        pytest.skip("a psycopg option")

    default = connections["default"]
    settings = dict(default.settings_dict)
    settings["OPTIONS"] = {**settings["OPTIONS"], "server_side_binding": True}
    bound = type(default)(settings, alias="default")
    try:
        import psycopg

        bound.ensure_connection()
        assert not isinstance(bound.connection.cursor(), psycopg.ClientCursor)
        ops = type(ops_for("default"))(bound)
        fields = {"queue": "default", "type": "tests.noop", "priority": 0}
        fields |= {"max_attempts": 2, "timeout": None}
        ops.insert_one(payload="{}", fields=fields, delay_seconds=None)
        ops.insert_many(payloads=["{}"] * 4, fields=fields, delay_seconds=None)
        later = {**fields, "scheduled_at": timezone.now() - timedelta(seconds=1)}
        ops.insert_many(payloads=["{}"] * 2, fields=later, delay_seconds=None)
        assert ops.promote(limit=10) == 0  # written pending: their time had come
        assert ops.next_due_in() is None
        jobs = ops.claim(queues=["default", "other"], worker_id="w", limit=5, lease_seconds=30)
        assert len(jobs) == 5
        assert ops.extend_leases(worker_id="w", lease_seconds=60, job_ids=[jobs[0].id]) == 1
        done = [Finished(jobs[0].id, 1, {"ok": 1})]
        assert ops.complete_statuses(done, worker_id="w") == {jobs[0].id: "completed"}
        entry = {"attempt": 1, "message": "boom"}
        assert ops.fail(
            job_id=jobs[1].id, attempt=1, worker_id="w", error="boom", error_entry=entry,
            retry_in=5,
        ) == "scheduled"  # fmt: skip
        assert ops.release([jobs[2].id, jobs[3].id], worker_id="w") == 2
        Job.objects.filter(pk=jobs[4].id).update(lease_expires_at=None)
        assert [row[0] for row in ops.reap()] == [jobs[4].id]
        keyed = {**fields, "unique_key": "k"}
        for window in (None, 60.0):
            new = ops.insert_unique(payload="{}", fields=keyed, delay_seconds=None,
                                    unique_for=window)  # fmt: skip
            assert (new is not None) == (window is None)  # the first holds the key
        sql, params = ops.holder_sql("k")
        with bound.cursor() as cursor:
            cursor.execute(sql, params)
            assert cursor.fetchone() is not None
    finally:
        bound.close()


def test_the_column_list_names_every_column_of_the_model():
    """``db/columns.py``'s JOB_COLUMNS is what every INSERT writes from: a field added to Job
    without an entry there would be left to the database (and NOT NULL ones fail)."""
    model = [field.column for field in Job._meta.concrete_fields]
    assert not set(model) - set(JOB_COLUMNS), "columns missing from db/columns.JOB_COLUMNS"
    assert not set(JOB_COLUMNS) - set(model), "db/columns.JOB_COLUMNS names no such column"
    assert list(JOB_COLUMNS) == model  # in the model's order, for the reader
    assert set(ClaimedJob._fields) <= set(model)


def test_every_insert_writes_the_columns_of_the_list():
    with CaptureQueriesContext(connection) as queries:
        bulk_enqueue("tests.noop", [{}])
        bulk_enqueue("tests.noop", [{}, {}], delay=60)
    inserts = [query["sql"] for query in queries if "INSERT INTO" in query["sql"]]
    assert len(inserts) == 2
    for sql in inserts:
        assert f"INSERT INTO sqlq_job ({', '.join(INSERT_COLUMNS)})" in sql


def test_a_new_sqlite_connection_opens_while_another_holds_the_write_lock():
    """Opening a connection to the queue database applies SQLQ["SQLITE_PRAGMAS"], which
    hold ``auto_vacuum = incremental``: sent again to a database that already has it, that
    PRAGMA takes the write lock, so every new connection (a web request, a worker) waited
    for any writer's transaction and then failed with "database is locked". The holder here
    keeps the lock until the new connection has read, longer than the busy timeout."""
    if connection.vendor != "sqlite":
        pytest.skip("SQLite's write lock")
    holding, read = threading.Event(), threading.Event()

    def hold() -> None:
        try:
            with connections["default"].cursor() as cursor:
                cursor.execute("BEGIN IMMEDIATE")
                holding.set()
                read.wait(30)
                cursor.execute("COMMIT")
        finally:
            connections.close_all()

    outcome: dict[str, Any] = {}

    def open_and_read() -> None:
        try:
            outcome["count"] = Job.objects.count()
        except Exception as exc:
            outcome["error"] = exc
        finally:
            read.set()
            connections.close_all()

    holder = threading.Thread(target=hold)
    holder.start()
    assert holding.wait(30)
    reader = threading.Thread(target=open_and_read)
    reader.start()
    reader.join(60)
    holder.join(60)
    assert outcome == {"count": 0}
