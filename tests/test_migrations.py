"""Migrations that move data: run backwards and forwards on a table that holds rows."""

from __future__ import annotations

import uuid

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from django_sqlq.models import Job

pytestmark = pytest.mark.django_db(transaction=True)

UUID_MIGRATION = ("django_sqlq", "0004_job_uuid")


def migrate(targets: list[tuple[str, str]]) -> MigrationExecutor:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return MigrationExecutor(connection)


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
    assert Job.objects.create(type="tests.noop").uuid.version == 4
