"""SQLite files that give space back (issue 27): a new database gets ``auto_vacuum =
INCREMENTAL`` whatever the project's ``init_command`` says, the ``-wal`` file shrinks back to
``journal_size_limit`` after a burst, and the check W002 names the one-time conversion of an
older database. Real files, opened the way Django opens them."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.utils import load_backend
from django.test import override_settings

from django_sqlq.checks import check_database
from django_sqlq.conf import DEFAULT_SQLITE_PRAGMAS
from django_sqlq.db.sqlite import SQLiteOps
from tests.conftest import ROOT

WAL_LIMIT = int(DEFAULT_SQLITE_PRAGMAS["journal_size_limit"])

# The OPTIONS projects write: none; WAL alone (our docs, many deployment guides); and the
# longer form with a trailing ";", beside Django 5.1+'s transaction_mode.
OPTIONS = {
    "no init_command": {},
    "WAL alone": {"init_command": "PRAGMA journal_mode=WAL"},
    "WAL; synchronous; IMMEDIATE": {
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        "transaction_mode": "IMMEDIATE",
    },
}


@pytest.fixture(autouse=True)
def _sqlite_only(engine: str) -> None:
    if engine != "sqlite":
        pytest.skip("auto_vacuum and the -wal file are SQLite's")


ENGINE = "django.db.backends.sqlite3"


def alias_settings(path: Path | str, options: dict[str, Any]) -> dict[str, Any]:
    """An entry of settings.DATABASES for the file ``path``, Django's defaults filled in."""
    entry = {"ENGINE": ENGINE, "NAME": str(path), "OPTIONS": dict(options)}
    return dict(connections.configure_settings({"default": entry})["default"])


@pytest.fixture
def open_database(django_db_blocker: Any) -> Iterator[Callable[..., BaseDatabaseWrapper]]:
    """Open a SQLite file as Django does for the queue's alias ("default"), with these
    OPTIONS: the project's init_command runs first, then django_sqlq's connection_created
    receiver. Not the suite's own connection: a wrapper of its own, closed afterwards."""
    opened: list[BaseDatabaseWrapper] = []

    def open_(path: Path | str, options: dict[str, Any]) -> BaseDatabaseWrapper:
        backend = load_backend(ENGINE)
        wrapper: BaseDatabaseWrapper = backend.DatabaseWrapper(
            alias_settings(path, options), "default"
        )
        wrapper.ensure_connection()
        opened.append(wrapper)
        return wrapper

    with django_db_blocker.unblock():
        yield open_
        for wrapper in opened:
            wrapper.close()


def read(wrapper: BaseDatabaseWrapper, name: str) -> Any:
    return wrapper.connection.execute(f"PRAGMA {name}").fetchone()[0]


def wal_size(path: Path) -> int:
    wal = Path(f"{path}-wal")
    return wal.stat().st_size if wal.exists() else 0


def fill(wrapper: BaseDatabaseWrapper, megabytes: int) -> None:
    """Write ``megabytes`` of rows in 1 MB transactions."""
    raw = wrapper.connection
    raw.execute("CREATE TABLE IF NOT EXISTS pad (data BLOB)")
    for _ in range(megabytes):
        raw.execute("BEGIN")
        raw.executemany("INSERT INTO pad VALUES (?)", [(b"x" * 1000,)] * 1000)
        raw.execute("COMMIT")


@pytest.mark.parametrize("options", OPTIONS.values(), ids=OPTIONS.keys())
def test_a_new_database_gets_incremental_auto_vacuum_whatever_the_init_command(
    tmp_path, open_database, options
):
    path = tmp_path / "new.sqlite3"
    wrapper = open_database(path, options)
    assert read(wrapper, "auto_vacuum") == 2  # INCREMENTAL
    assert read(wrapper, "journal_mode") == "wal"
    assert read(wrapper, "journal_size_limit") == WAL_LIMIT
    wrapper.close()
    # It is in the file: a plain connection, without django_sqlq, reads it too.
    with sqlite3.connect(path) as plain:
        assert plain.execute("PRAGMA auto_vacuum").fetchone()[0] == 2
    plain.close()


@pytest.mark.parametrize("options", OPTIONS.values(), ids=OPTIONS.keys())
def test_the_file_shrinks_after_rows_are_deleted_and_the_space_reclaimed(
    tmp_path, open_database, options
):
    path = tmp_path / "shrinks.sqlite3"
    wrapper = open_database(path, options)
    fill(wrapper, 8)
    wrapper.connection.execute("PRAGMA wal_checkpoint(PASSIVE)")
    full = path.stat().st_size
    wrapper.connection.execute("DELETE FROM pad")
    assert SQLiteOps(wrapper).reclaim_space(max_pages=100_000) == 0  # no free page left
    wrapper.connection.execute("PRAGMA wal_checkpoint(PASSIVE)")
    assert path.stat().st_size < full / 4, (full, path.stat().st_size)


def test_an_existing_database_with_tables_is_not_vacuumed(tmp_path, open_database):
    """A database with data keeps its mode: converting it rewrites the whole file, which
    django_sqlq never does unasked (the check W002 tells how)."""
    path = tmp_path / "old.sqlite3"
    with sqlite3.connect(path) as plain:
        plain.execute("CREATE TABLE pad (data BLOB)")
        plain.execute("INSERT INTO pad VALUES (randomblob(100))")
    plain.close()
    wrapper = open_database(path, OPTIONS["WAL alone"])
    assert read(wrapper, "auto_vacuum") == 0
    assert wrapper.connection.execute("SELECT count(*) FROM pad").fetchone()[0] == 1


def test_a_read_only_connection_to_a_new_database_still_opens(tmp_path, open_database):
    """The VACUUM that applies auto_vacuum cannot run on a read-only connection: it is
    skipped, and the next writable connection applies it."""
    path = tmp_path / "new.sqlite3"
    with sqlite3.connect(path) as plain:
        plain.execute("PRAGMA journal_mode = WAL")  # the header, and no table
    plain.close()
    reader = open_database(f"file:{path}?mode=ro", OPTIONS["WAL alone"])
    assert read(reader, "auto_vacuum") == 0
    assert read(open_database(path, OPTIONS["WAL alone"]), "auto_vacuum") == 2


def test_the_wal_file_shrinks_to_the_limit_after_a_burst(tmp_path, open_database):
    """A reader holding an old snapshot keeps the automatic checkpoints from restarting the
    -wal file, as a long request or a slow handler does: a burst then grows it far past its
    usual size. Once the reader is gone, the next commits checkpoint it (SQLite's automatic
    PASSIVE checkpoint, the only one the worker runs) and restart it at the limit."""
    path = tmp_path / "burst.sqlite3"
    wrapper = open_database(path, OPTIONS["WAL alone"])
    fill(wrapper, 1)
    reader = sqlite3.connect(path, isolation_level=None)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM pad").fetchone()
    fill(wrapper, 12)
    burst = wal_size(path)
    assert burst > 3 * WAL_LIMIT
    reader.execute("COMMIT")
    reader.close()
    fill(wrapper, 1)  # its commits checkpoint the whole -wal file...
    fill(wrapper, 1)  # ...and the next write restarts it, cut to journal_size_limit
    after = wal_size(path)
    print(f"-wal file: {burst / 1e6:.1f} MB after the burst, {after / 1e6:.1f} MB after")
    assert after <= WAL_LIMIT


# -- in a project: manage.py migrate, sqlq_prune and check --------------------------------------


def manage(
    database: Path, options: dict[str, Any], *args: str
) -> subprocess.CompletedProcess[str]:
    """``manage.py`` with a "queue" database at ``database`` with these OPTIONS."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings_queue",
        "SQLQ_TEST_QUEUE_DB": str(database),
        "SQLQ_TEST_QUEUE_OPTIONS": json.dumps(options),
        "PYTHONPATH": str(ROOT),
    }
    env.pop("PYTEST_CURRENT_TEST", None)
    done = subprocess.run(
        [sys.executable, "-m", "django", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def auto_vacuum(path: Path) -> int:
    with sqlite3.connect(path) as plain:
        mode = int(plain.execute("PRAGMA auto_vacuum").fetchone()[0])
    plain.close()
    return mode


FINISH_OLD_JOBS = """
from datetime import timedelta
from django.utils import timezone
from django_sqlq import bulk_enqueue
from django_sqlq.models import Job
bulk_enqueue("tests.noop", [{"pad": "x" * 2000} for _ in range(3000)])
Job.objects.update(status="completed", completed_at=timezone.now() - timedelta(days=30))
"""


@pytest.mark.parametrize("options", OPTIONS.values(), ids=OPTIONS.keys())
def test_a_project_database_gives_the_space_of_pruned_jobs_back(tmp_path, options):
    """The user's path: migrate a new database, run jobs, prune them; the file shrinks."""
    path = tmp_path / "project.sqlite3"
    manage(path, options, "migrate", "--database", "queue", "-v", "0")
    assert auto_vacuum(path) == 2
    manage(path, options, "shell", "-c", FINISH_OLD_JOBS)
    full = path.stat().st_size
    done = manage(path, options, "sqlq_prune", "--database", "queue", "--older-than", "1d")
    assert "Deleted 3000 finished job(s)" in done.stdout
    assert path.stat().st_size < full / 2, (full, path.stat().st_size)
    assert not Path(f"{path}-wal").exists() or wal_size(path) <= WAL_LIMIT


def test_the_check_warns_about_a_database_without_incremental_auto_vacuum(tmp_path):
    """A database created before this release: migrated with auto_vacuum = NONE. The check
    names the one-time conversion; once done, it is silent."""
    options = OPTIONS["WAL alone"]
    path = tmp_path / "old.sqlite3"
    with sqlite3.connect(path) as plain:
        plain.execute("PRAGMA journal_mode = WAL")
        plain.execute("CREATE TABLE older_app_table (id INTEGER PRIMARY KEY)")
    plain.close()
    manage(path, options, "migrate", "--database", "queue", "-v", "0")
    assert auto_vacuum(path) == 0
    done = manage(path, options, "check", "--database", "queue")
    assert "django_sqlq.W002" in done.stderr
    assert "auto_vacuum = NONE, not INCREMENTAL" in done.stderr
    assert "python manage.py dbshell --database queue" in done.stderr
    assert "PRAGMA auto_vacuum = INCREMENTAL; VACUUM;" in done.stderr
    # What the hint says, as dbshell would run it.
    with sqlite3.connect(path, isolation_level=None) as plain:
        plain.executescript("PRAGMA auto_vacuum = INCREMENTAL; VACUUM;")
    plain.close()
    assert auto_vacuum(path) == 2
    done = manage(path, options, "check", "--database", "queue")
    assert "W002" not in done.stdout + done.stderr


def test_the_check_is_silent_on_a_new_database(tmp_path):
    path = tmp_path / "new.sqlite3"
    options = OPTIONS["WAL; synchronous; IMMEDIATE"]
    manage(path, options, "migrate", "--database", "queue", "-v", "0")
    done = manage(path, options, "check", "--database", "queue")
    assert "W002" not in done.stdout + done.stderr


def test_the_check_does_not_fail_on_an_unreachable_database(tmp_path, django_db_blocker):
    """A file in a directory that does not exist: no warning, no exception (the command
    that needs the database reports it). In-process: Django's own model checks fail first
    in ``manage.py check``."""
    missing = tmp_path / "no such directory" / "queue.sqlite3"
    connections.settings["queue"] = alias_settings(missing, {})
    try:
        with django_db_blocker.unblock(), override_settings(SQLQ={"DATABASE": "queue"}):
            assert check_database(databases=["queue"]) == []
    finally:
        connections["queue"].close()
        del connections["queue"]
        del connections.settings["queue"]
