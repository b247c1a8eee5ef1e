"""Migrations that move data: run backwards and forwards on a table that holds rows."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.db import IntegrityError, connection, transaction
from django.db.migrations.executor import MigrationExecutor

from django_sqlq.db import stats
from django_sqlq.models import Job

pytestmark = pytest.mark.django_db(transaction=True)

UUID_MIGRATION = ("django_sqlq", "0004_job_uuid")


def migrate(targets: list[tuple[str, str]]) -> MigrationExecutor:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return MigrationExecutor(connection)


def migrate_recording(targets: list[tuple[str, str]]) -> list[str]:
    """Migrate to ``targets``; the statements it sent."""
    sent: list[str] = []

    def record(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        sent.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        migrate(targets)
    return sent


def test_existing_jobs_get_distinct_random_uuids():
    executor = MigrationExecutor(connection)
    before = sorted(executor.loader.graph.node_map[UUID_MIGRATION].parents)
    leaves = executor.loader.graph.leaf_nodes("django_sqlq")
    executor = migrate([parent.key for parent in before])
    try:
        old_job = executor.loader.project_state([p.key for p in before]).apps.get_model(
            "django_sqlq", "Job"
        )
        assert "uuid" not in {f.name for f in old_job._meta.get_fields()}
        old_job.objects.bulk_create([old_job(type=f"old.job{n}") for n in range(50)])
        migrate([UUID_MIGRATION])
        uuids = list(Job.objects.values_list("uuid", flat=True))
        assert len(uuids) == 50
        assert len(set(uuids)) == 50
        assert all(isinstance(u, uuid.UUID) and u.version == 4 for u in uuids)
    finally:
        migrate(leaves)
    # New rows (the ORM's and enqueue()'s raw INSERT) get theirs too.
    from django_sqlq import enqueue

    assert enqueue("tests.noop").uuid not in set(uuids)
    assert Job.objects.create(type="tests.noop").uuid.version == 7  # since 0013


DIET_MIGRATION = ("django_sqlq", "0013_index_diet")


def job_indexes() -> set[str]:
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, Job._meta.db_table)
    return {name for name, info in constraints.items() if info["index"]}


def test_the_index_diet_drops_the_completed_at_index_and_keeps_existing_uuids():
    executor = MigrationExecutor(connection)
    [before] = executor.loader.graph.node_map[DIET_MIGRATION].parents
    leaves = executor.loader.graph.leaf_nodes("django_sqlq")
    assert not executor.loader.get_migration(*DIET_MIGRATION).atomic  # CONCURRENTLY
    executor = migrate([before.key])
    try:
        assert "sqlq_job_completed_idx" in job_indexes()
        old_job = executor.loader.project_state([before.key]).apps.get_model("django_sqlq", "Job")
        old_job.objects.bulk_create([old_job(type=f"old.job{n}") for n in range(20)])
        old = dict(Job.objects.values_list("id", "uuid"))
        assert {u.version for u in old.values()} == {4}
        sent = migrate_recording([DIET_MIGRATION])
        assert "sqlq_job_completed_idx" not in job_indexes()
        # One statement, that blocks no writer on PostgreSQL; no table rebuilt on SQLite.
        drops = [sql for sql in sent if "sqlq_job_completed_idx" in sql]
        assert len(drops) == 1, sent
        assert ("CONCURRENTLY" in drops[0]) == (connection.vendor == "postgresql")
        rebuilt = [sql for sql in sent if "sqlq_job" in sql and "django_migrations" not in sql]
        assert rebuilt == drops, rebuilt
        assert dict(Job.objects.values_list("id", "uuid")) == old  # nothing rewritten
        migrate([before.key])  # and back: the index is built again
        assert "sqlq_job_completed_idx" in job_indexes()
    finally:
        migrate(leaves)
    assert "sqlq_job_completed_idx" not in job_indexes()


ASLEEP_MIGRATION = ("django_sqlq", "0016_step_records")


def step_indexes() -> dict[str, list[str]]:
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, "sqlq_job_step")
    return {
        name: info["columns"]
        for name, info in constraints.items()
        if info["index"] and not info["unique"] and not info["primary_key"]
    }


def step_table_sql() -> str:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'sqlq_job_step'"
        )
        return str(cursor.fetchone()[0])


def test_a_steps_record_writes_less_and_the_steps_are_kept():
    """0016: the index of every step's wait_key and the one of the steps asleep become one
    index of the steps asleep (state, wait_key); on SQLite the table's ids lose
    AUTOINCREMENT (its sqlite_sequence page, rewritten by every step). Existing steps stay,
    ids included, and back again."""
    from django_sqlq.models import JobStep

    executor = MigrationExecutor(connection)
    [before] = executor.loader.graph.node_map[ASLEEP_MIGRATION].parents
    leaves = executor.loader.graph.leaf_nodes("django_sqlq")
    assert not executor.loader.get_migration(*ASLEEP_MIGRATION).atomic  # CONCURRENTLY
    sqlite = connection.vendor == "sqlite"
    executor = migrate([before.key])
    try:
        assert set(step_indexes()) == {"sqlq_job_step_wait_key_idx", "sqlq_job_step_asleep_idx"}
        assert not sqlite or "AUTOINCREMENT" in step_table_sql()
        JobStep.objects.bulk_create(
            [JobStep(job_id=n, name="charge", result={"n": n}) for n in range(10)]
            + [JobStep(job_id=99, name="paid", kind="event", state="waiting", wait_key="k")]
        )
        columns = ("id", "job_id", "name", "state", "wait_key", "result", "created_at")
        old = list(JobStep.objects.order_by("id").values_list(*columns))
        sent = migrate_recording([ASLEEP_MIGRATION])
        assert step_indexes() == {"sqlq_job_step_asleep_idx": ["state", "wait_key"]}
        indexes = [sql for sql in sent if "INDEX" in sql and "sqlq_job_step" in sql]
        assert len(indexes) == 3 + sqlite, indexes  # 2 drops, a create (+ its copy on SQLite)
        assert all(
            ("CONCURRENTLY" in sql) == (connection.vendor == "postgresql") for sql in indexes
        )
        if sqlite:
            assert "AUTOINCREMENT" not in step_table_sql()
            assert "sqlq_job_step_unique" in step_table_sql()
        else:  # no table rebuilt elsewhere
            assert [sql for sql in sent if "sqlq_job_step" in sql] == indexes
        assert list(JobStep.objects.order_by("id").values_list(*columns)) == old
        newer = JobStep.objects.create(job_id=100, name="charge")
        assert newer.pk > old[-1][0]
        with pytest.raises(IntegrityError):  # (job, name) still unique
            JobStep.objects.create(job_id=100, name="charge")
        migrate([before.key])
        assert set(step_indexes()) == {"sqlq_job_step_wait_key_idx", "sqlq_job_step_asleep_idx"}
        assert not sqlite or "AUTOINCREMENT" in step_table_sql()
        assert JobStep.objects.count() == len(old) + 1
    finally:
        migrate(leaves)
    assert step_indexes() == {"sqlq_job_step_asleep_idx": ["state", "wait_key"]}


WAKE_MIGRATION = ("django_sqlq", "0017_mariadb_wake")


def test_before_the_wake_counter_exists_operators_and_idle_workers_carry_on():
    """MariaDB's wake-up counter (0017) in a project whose code is deployed before it
    migrates: a Retry now still works (its wake-up skipped), and an idle worker's probe
    still sees new jobs. Elsewhere the migration does nothing."""
    from django_sqlq import enqueue, lifecycle
    from django_sqlq.db import ops_for

    executor = MigrationExecutor(connection)
    [before] = executor.loader.graph.node_map[WAKE_MIGRATION].parents
    leaves = executor.loader.graph.leaf_nodes("django_sqlq")
    mariadb = connection.vendor == "mysql"
    with connection.cursor() as cursor:
        tables = connection.introspection.table_names(cursor)
    assert ("sqlq_wake" in tables) == mariadb
    ops = ops_for("default")
    job = enqueue("tests.noop")
    if mariadb:
        woken = ops.data_version()
        Job.objects.filter(pk=job.pk).update(status="failed")
        assert lifecycle.retry_now([job.pk]).changed == 1
        assert ops.data_version()[1] > woken[1]  # the counter moved
    migrate([before.key])
    try:
        with connection.cursor() as cursor:
            assert "sqlq_wake" not in connection.introspection.table_names(cursor)
        Job.objects.filter(pk=job.pk).update(status="failed")
        assert lifecycle.retry_now([job.pk]).changed == 1
        newer = enqueue("tests.noop")
        if mariadb:  # the newest id, without the counter
            assert ops.data_version() == (newer.pk, None)
    finally:
        migrate(leaves)


CONDITIONS_MIGRATION = ("django_sqlq", "0018_status_conditions")


def job_schema() -> list[str]:
    """The jobs table's definition and its indexes', as SQLite keeps them."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT sql FROM sqlite_master WHERE tbl_name = 'sqlq_job' AND sql IS NOT NULL "
            "ORDER BY type DESC, name"
        )
        return [row[0] for row in cursor.fetchall()]


def test_status_conditions_are_rewritten_in_place_and_still_hold():
    """0018: on SQLite the status conditions of sqlq_job_finished_idx, the unique
    sqlq_job_unique_key_live and the check sqlq_job_status_valid are written as ORs (an IN
    list of three or more literals costs a b-tree look-up at every row an UPDATE changes).
    The two indexes are created again and the check edited in place: no table copied, every
    row kept, and each condition still holds, forwards and back. Elsewhere nothing is
    written."""
    from django_sqlq import enqueue

    executor = MigrationExecutor(connection)
    [before] = executor.loader.graph.node_map[CONDITIONS_MIGRATION].parents
    leaves = executor.loader.graph.leaf_nodes("django_sqlq")
    sqlite = connection.vendor == "sqlite"
    executor = migrate([before.key])
    try:
        if sqlite:
            assert not [sql for sql in job_schema() if '\' OR "status"' in sql]
        old_job = executor.loader.project_state([before.key]).apps.get_model("django_sqlq", "Job")
        old_job.objects.bulk_create(
            [old_job(type="old.job", status="completed", unique_key="k1") for _ in range(5)]
            + [old_job(type="old.job", status="pending", unique_key="k2")]
        )
        columns = ("id", "type", "status", "unique_key", "uuid")
        old = list(Job.objects.order_by("id").values_list(*columns))
        sent = migrate_recording([CONDITIONS_MIGRATION])
        touched = [sql for sql in sent if "sqlq_job" in sql and "django_migrations" not in sql]
        if sqlite:
            schema = job_schema()
            assert all(" IN (" not in sql for sql in schema), schema
            assert len([sql for sql in schema if '\' OR "status"' in sql]) == 3, schema
            assert "\"status\" = 'cancelled')" in schema[0]  # the check, in place
            assert not [sql for sql in touched if "CREATE TABLE" in sql or "INSERT" in sql]
        else:
            assert touched == []
        assert list(Job.objects.order_by("id").values_list(*columns)) == old
        # Each condition still holds.
        with pytest.raises(IntegrityError), transaction.atomic():
            Job.objects.filter(pk=old[0][0]).update(status="bogus")
        assert enqueue("tests.noop", unique_key="k1").created  # k1's jobs are finished
        assert not enqueue("tests.noop", unique_key="k2").created  # k2's is pending
        assert set(Job.objects.filter(stats.finished()).values_list("status", flat=True)) == {
            "completed"
        }
        migrate([before.key])
        if sqlite:
            assert not [sql for sql in job_schema() if '\' OR "status"' in sql]
        with pytest.raises(IntegrityError), transaction.atomic():
            Job.objects.filter(pk=old[0][0]).update(status="bogus")
    finally:
        migrate(leaves)
    if sqlite:
        assert all(" IN (" not in sql for sql in job_schema())


def test_with_every_wake_slot_held_a_notifier_waits_for_none():
    """MariaDB's wake-up counter (0019): 64 rows, each notifier takes one no other
    transaction holds. With all of them held (here by one transaction), a retry adds
    nothing rather than wait for them (it waited, then failed with 1205 past 64 open
    requests); the next one counts again once they are let go."""
    from django_sqlq import enqueue, lifecycle
    from django_sqlq.db import ops_for
    from tests.conftest import held_elsewhere

    if connection.vendor != "mysql":
        pytest.skip("MariaDB's wake-up counter (elsewhere: NOTIFY, or nothing)")
    ops = ops_for("default")
    jobs = [enqueue("tests.noop") for _ in range(2)]
    Job.objects.filter(pk__in=[job.pk for job in jobs]).update(status="failed")

    def hold_every_slot() -> None:
        with connection.cursor() as cursor:
            cursor.execute("SELECT id FROM sqlq_wake FOR UPDATE")
            assert len(cursor.fetchall()) == 64

    before = ops.data_version()[1]
    with held_elsewhere(hold_every_slot):
        with connection.cursor() as cursor:
            cursor.execute("SET SESSION innodb_lock_wait_timeout = 1")  # a wait would fail
        try:
            assert lifecycle.retry_now([jobs[0].pk]).changed == 1
        finally:
            with connection.cursor() as cursor:
                cursor.execute("SET SESSION innodb_lock_wait_timeout = DEFAULT")
    assert ops.data_version()[1] == before  # nothing added
    assert lifecycle.retry_now([jobs[1].pk]).changed == 1
    assert ops.data_version()[1] == before + 1
