"""Adversarial tests (issue 26): commands before ``migrate``, and ``--burst`` on a broken
database, in real processes on a throwaway database."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
import time
from typing import Any

import pytest

from tests.conftest import ROOT, pg_params
from tests.forking import run_python


def manage(database: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings_queue",
        "SQLQ_TEST_QUEUE_DB": database,
        "PYTHONPATH": str(ROOT),
    }
    env.pop("PYTEST_CURRENT_TEST", None)
    return run_python(["-m", "django", *args], env=env, timeout=timeout)


def sql(engine: str, database: str, statement: str) -> None:
    if engine == "sqlite":
        with sqlite3.connect(database) as con:
            con.execute(statement)
        return
    if engine == "mysql":
        import MySQLdb

        with contextlib.closing(MySQLdb.connect(db=database, **pg_params())) as con:
            con.cursor().execute(statement)
        return
    import psycopg

    with psycopg.connect(dbname=database, autocommit=True, **pg_params()) as con:
        con.execute(statement)


COMMANDS = [
    ("sqlq_jobs", "list"),
    ("sqlq_jobs", "show", "1"),
    ("sqlq_jobs", "enqueue", "tests.noop"),
    ("sqlq_jobs", "cancel", "1"),
    ("sqlq_queue", "status"),
    ("sqlq_queue", "pause", "default"),
    ("sqlq_queue", "pause", "brandnew", "--new"),
]


def _refused_naming_migrate(done: subprocess.CompletedProcess[str], args: Any) -> None:
    output = done.stdout + done.stderr
    assert done.returncode == 1, (args, output)
    assert "python manage.py migrate --database=queue" in output, (args, output)
    assert "Traceback" not in output, (args, output)


@pytest.mark.django_db
def test_every_command_refuses_a_database_at_0011(fresh_database: str) -> None:
    """One migration behind (0012_database_schedules, this release's): refused, naming it."""
    done = manage(fresh_database, "migrate", "django_sqlq", "0011", "--database", "queue")
    assert done.returncode == 0, done.stderr
    for args in [*COMMANDS, ("sqlq_prune",), ("sqlq_worker", "--burst")]:
        done = manage(fresh_database, *args)
        _refused_naming_migrate(done, args)
        assert "0012_database_schedules" in done.stdout + done.stderr, args


@pytest.mark.django_db
def test_commands_on_a_database_never_migrated(fresh_database: str) -> None:
    """Before any ``migrate`` (a new project's first command): exit 1 naming migrate."""
    for args in [COMMANDS[0], ("sqlq_queue", "status"), ("sqlq_prune",)]:
        done = manage(fresh_database, *args)
        _refused_naming_migrate(done, args)


@pytest.mark.django_db
def test_the_worker_on_a_database_never_migrated_names_the_alias(fresh_database: str) -> None:
    for args in [("sqlq_worker", "--burst"), ("sqlq_worker", "--reload")]:
        done = manage(fresh_database, *args)
        _refused_naming_migrate(done, args)


@pytest.mark.django_db
@pytest.mark.parametrize(
    "breakage",
    [
        "ALTER TABLE sqlq_job RENAME COLUMN trace TO trace_gone",
        "ALTER TABLE sqlq_job RENAME COLUMN lease_expires_at TO lease_gone",
    ],
)
def test_a_burst_worker_on_a_broken_database_stops(
    fresh_database: str, engine: str, breakage: str
) -> None:
    """Fully migrated, then damaged behind Django's back (a half-restored dump, a DBA's
    manual change): a --burst worker must end, exit 1, not loop."""
    done = manage(fresh_database, "migrate", "--database", "queue")
    assert done.returncode == 0, done.stderr
    enq = manage(fresh_database, "sqlq_jobs", "enqueue", "tests.noop")
    assert enq.returncode == 0, enq.stderr
    sql(engine, fresh_database, breakage)
    started = time.monotonic()
    done = manage(fresh_database, "sqlq_worker", "--burst", timeout=90)
    elapsed = time.monotonic() - started
    output = done.stdout + done.stderr
    assert done.returncode == 1, output[-3000:]
    assert elapsed < 45, (elapsed, output[-2000:])
