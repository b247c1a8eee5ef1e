"""django_sqlq.routers.QueueRouter, the routing checks (E010, E011) and ``Job.objects`` on the
queue database."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.core.checks import CheckMessage, run_checks
from django.db.models import Model
from django.test import override_settings

from django_sqlq import enqueue
from django_sqlq.models import Job, WorkerProcess
from django_sqlq.routers import QueueRouter
from django_sqlq.testing import run_jobs
from tests.conftest import ROOT, pg_params

pytestmark = pytest.mark.django_db(databases=["default", "other"])

ON_OTHER = {**settings.SQLQ, "DATABASE": "other"}
ROUTER = "django_sqlq.routers.QueueRouter"


def ids(messages: Iterable[CheckMessage]) -> set[str]:
    return {m.id for m in messages if m.id and m.id.startswith("django_sqlq")}


# -- Job.objects reads the queue database ---------------------------------------------------


@override_settings(SQLQ=ON_OTHER)
def test_job_objects_reads_the_fresh_database_without_a_router():
    enqueue("tests.echo", {"n": 1})
    assert Job.objects.using("default").count() == 0
    job = Job.objects.get()
    assert job._state.db == "other"
    assert job.payload == {"n": 1}
    assert Job.objects.pending().count() == 1  # the QuerySet's methods too
    assert run_jobs().completed == 1
    assert Job.objects.completed().get().pk == job.pk
    # An explicit alias still wins.
    assert not Job.objects.using("default").exists()
    # Job.objects is typed as its QuerySet (models.py); it is a manager.
    assert not Job.objects.db_manager("default").exists()  # type: ignore[attr-defined]
    assert WorkerProcess.objects.all().db == "other"


def test_job_objects_reads_the_default_database_by_default():
    enqueue("tests.echo", {"n": 1})
    assert Job.objects.get()._state.db == "default"


@override_settings(SQLQ=ON_OTHER, DATABASE_ROUTERS=[ROUTER])
def test_with_the_router_orm_writes_go_to_the_fresh_database_too():
    job = Job(type="tests.echo", payload={"n": 2})
    job.save()
    assert job._state.db == "other"
    assert Job.objects.using("other").filter(pk=job.pk).exists()
    assert not Job.objects.using("default").filter(pk=job.pk).exists()


@override_settings(SQLQ=ON_OTHER, DATABASE_ROUTERS=[ROUTER])
def test_with_the_router_a_job_read_from_the_old_database_stays_there():
    """The move of docs/howto/sqlite-to-postgresql.md: jobs read from the old database with
    Job.objects.using("default"), then saved or deleted one by one. The router sent those
    writes to the new database, where they overwrote or deleted *another* job with the same
    id. An instance's own database wins, as with Django's default routing."""
    old = Job.objects.using("default").create(type="tests.echo", payload={"old": True})
    new = Job.objects.using("other").create(pk=old.pk, type="tests.echo", payload={"new": True})
    moved = Job.objects.using("default").get(pk=old.pk)
    moved.priority = 50
    moved.save()
    assert Job.objects.using("default").get(pk=old.pk).priority == 50
    new.refresh_from_db()
    assert (new.payload, new.priority) == ({"new": True}, 0)
    assert moved._state.db == "default"
    moved.refresh_from_db()  # reads where it came from
    for job in Job.objects.using("default").pending():
        job.delete()
    assert not Job.objects.using("default").exists()
    assert Job.objects.using("other").get().payload == {"new": True}
    # Without an instance, the router still sends everything to the queue database.
    fresh = Job(type="tests.echo", payload={})
    fresh.save()
    assert fresh._state.db == "other"


# -- the router's answers -------------------------------------------------------------------


@override_settings(SQLQ=ON_OTHER)
def test_router_sends_django_sqlq_to_the_fresh_database_and_nothing_else_there():
    from tests.testapp.models import Order

    router = QueueRouter()
    assert router.db_for_read(Job) == "other"
    assert router.db_for_write(WorkerProcess) == "other"
    assert router.db_for_read(Order) is None
    assert router.db_for_write(Order) is None
    assert router.allow_migrate("other", "django_sqlq", model_name="job") is True
    assert router.allow_migrate("default", "django_sqlq", model_name="job") is False
    assert router.allow_migrate("other", "auth", model_name="user") is False
    assert router.allow_migrate("default", "auth", model_name="user") is None
    assert router.allow_relation(Job(), Job()) is True
    assert router.allow_relation(Job(), Order()) is None


def test_router_on_the_default_database_leaves_other_apps_alone():
    router = QueueRouter()
    assert router.allow_migrate("default", "django_sqlq") is True
    assert router.allow_migrate("other", "django_sqlq") is False
    assert router.allow_migrate("default", "auth") is None


# -- the system checks ----------------------------------------------------------------------


@override_settings(SQLQ=ON_OTHER, DATABASE_ROUTERS=[])
def test_a_fresh_database_without_a_router_is_e010():
    messages = run_checks()
    assert ids(messages) == {"django_sqlq.E010"}
    [error] = [m for m in messages if m.id == "django_sqlq.E010"]
    assert "'other'" in error.msg
    assert error.hint is not None
    assert ROUTER in error.hint


@override_settings(SQLQ=ON_OTHER, DATABASE_ROUTERS=["tests.routers.OtherDatabaseRouter"])
def test_a_router_that_only_migrates_is_e010():
    assert ids(run_checks()) == {"django_sqlq.E010"}


class ReadWriteOnly:
    """Routes reads and writes, says nothing about migrate: django_sqlq's tables would be
    created in every database."""

    def db_for_read(self, model: type[Model], **hints: Any) -> str | None:
        return "other" if model._meta.app_label == "django_sqlq" else None

    db_for_write = db_for_read


@override_settings(SQLQ=ON_OTHER, DATABASE_ROUTERS=[f"{__name__}.ReadWriteOnly"])
def test_a_router_that_migrates_django_sqlq_everywhere_is_e011():
    messages = run_checks()
    assert ids(messages) == {"django_sqlq.E011"}
    assert "default" in next(m.msg for m in messages if m.id == "django_sqlq.E011")


@override_settings(SQLQ=ON_OTHER, DATABASE_ROUTERS=[ROUTER])
def test_the_router_passes_the_checks():
    assert ids(run_checks()) == set()


@override_settings(DATABASE_ROUTERS=[])
def test_no_router_is_needed_for_the_default_database():
    assert ids(run_checks()) == set()


# -- migrate --database queue, in a fresh database -----------------------------------------


def tables(engine: str, database: str) -> set[str]:
    if engine == "sqlite":
        import sqlite3

        if not Path(database).exists():
            return set()
        db = sqlite3.connect(database)
        try:
            rows = db.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
        finally:
            db.close()
        return {name for (name,) in rows if not name.startswith("sqlite_")}
    if engine == "mysql":
        import MySQLdb

        db = MySQLdb.connect(db=database, **pg_params())
        try:
            with db.cursor() as cursor:
                cursor.execute("SHOW TABLES")
                return {name for (name,) in cursor.fetchall()}
        finally:
            db.close()
    import psycopg

    with psycopg.connect(dbname=database, **pg_params()) as pg:
        rows = pg.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'").fetchall()
    return {name for (name,) in rows}


def manage(database: str, *args: str, router: bool = True) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings_queue",
        "SQLQ_TEST_QUEUE_DB": database,
        "SQLQ_TEST_QUEUE_ROUTER": "1" if router else "0",
        "PYTHONPATH": str(ROOT),
    }
    env.pop("PYTEST_CURRENT_TEST", None)
    return subprocess.run(
        [sys.executable, "-m", "django", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_migrate_database_queue_creates_only_django_sqlqs_tables(engine, fresh_database):
    done = manage(fresh_database, "migrate", "--database", "queue", "-v", "0")
    assert done.returncode == 0, done.stdout + done.stderr
    assert tables(engine, fresh_database) == {
        "django_migrations",
        "sqlq_job",
        "sqlq_worker",
        "sqlq_queue",
        "sqlq_schedule",
        "sqlq_schedule_tick",
        "sqlq_maintenance",
        "sqlq_job_blocker",
        "sqlq_job_step",
        "sqlq_event",
        *(["sqlq_wake"] if engine == "mysql" else []),  # MariaDB's wake-up counter (0017)
    }


def test_migrate_database_queue_without_a_router_stops_at_the_check(engine, fresh_database):
    done = manage(fresh_database, "migrate", "--database", "queue", router=False)
    assert done.returncode != 0
    assert "django_sqlq.E010" in done.stderr
    assert tables(engine, fresh_database) == set()
