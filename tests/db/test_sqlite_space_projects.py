"""SQLite files that give space back, tried as projects configure SQLite (issue 27): a new
database gets ``auto_vacuum = INCREMENTAL`` whatever the project's OPTIONS, created by
``migrate``, a worker or ``check``; the ``-wal`` file stays bounded; W002 and its one-time
command. Each scenario is a real project (a settings module in tmp_path) driven through
manage.py commands in subprocesses.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, WorkerProcess
from tests.faults.conftest import until
from tests.forking import run_python

LEVELS = {"DJANGO_SETTINGS_MODULE": "tests.faults.settings"}


def _seed() -> int:
    return int(os.environ.get("SQLQ_TEST_SEED", str(time.time_ns() % 2**32)))


sqlite_only = pytest.mark.skipif(
    os.environ.get("SQLQ_TEST_ENGINE", "sqlite") != "sqlite",
    reason="each test makes SQLite projects of its own: once, in the SQLite runs",
)
pytestmark = sqlite_only


# ============================== SQLite: space given back ===================================

SQLITE = "django.db.backends.sqlite3"


def _project(
    tmp_path: Path,
    databases: dict[str, Any],
    sqlq: dict[str, Any] | None = None,
    routers: list[str] | None = None,
) -> dict[str, str]:
    """A project: a settings module in tmp_path; returns the env of its manage.py."""
    settings = tmp_path / "space_project_settings.py"
    settings.write_text(
        "SECRET_KEY = 'x'\nUSE_TZ = True\nDEFAULT_AUTO_FIELD = 'django.db.models.BigAutoField'\n"
        "INSTALLED_APPS = ['django.contrib.contenttypes', 'django.contrib.auth', "
        "'django_sqlq', 'tests.testapp']\n"
        f"DATABASES = {databases!r}\n"
        f"SQLQ = { ({'QUEUES': ['default'], 'POLL_INTERVAL': 0.05, **(sqlq or {})})!r}\n"
        f"DATABASE_ROUTERS = {(routers or [])!r}\n"
        # tests.testapp's tasks.py declares @task functions on these queues.
        "TASKS = {'default': {'BACKEND': 'django_sqlq.backend.SQLQBackend', "
        "'QUEUES': ['default', 'emails', 'reports']}}\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SQLQ_TEST", "DJANGO"))}
    env["DJANGO_SETTINGS_MODULE"] = "space_project_settings"
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(ROOT)])
    return env


def _manage(
    env: dict[str, str], *args: str, stdin: str | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    done = run_python(["-m", "django", *args], env=env, input=stdin)
    if check:
        assert done.returncode == 0, f"{args}: {done.stdout}\n{done.stderr}"
    return done


def _script(env: dict[str, str], code: str) -> str:
    done = run_python(["-c", "import django; django.setup()\n" + code], env=env)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    return done.stdout


def _pragma(path: Path, name: str) -> Any:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(f"PRAGMA {name}").fetchone()[0]
    finally:
        conn.close()


def _db(path: Path, options: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"ENGINE": SQLITE, "NAME": str(path), "OPTIONS": dict(options or {})}


INIT_COMMANDS: dict[str, dict[str, Any]] = {
    "wal": {"init_command": "PRAGMA journal_mode=WAL"},
    "lower, spaces, quotes": {"init_command": "  pragma JOURNAL_MODE = 'wal' ;  "},
    "many pragmas": {
        "init_command": "PRAGMA journal_mode=WAL;PRAGMA synchronous=NORMAL;"
        "PRAGMA foreign_keys=ON;PRAGMA cache_size=-20000;PRAGMA temp_store=MEMORY;",
        "transaction_mode": "IMMEDIATE",
    },
    "newlines, exclusive": {
        "init_command": "\n  PRAGMA journal_mode = WAL ;\n  PRAGMA synchronous = 1 ;\n",
        "transaction_mode": "EXCLUSIVE",
    },
    "page_size first, deferred": {
        "init_command": "PRAGMA page_size=8192; PRAGMA journal_mode=WAL;",
        "transaction_mode": "DEFERRED",
    },
    "delete journal": {"init_command": "PRAGMA journal_mode=DELETE"},
    "wal then a select": {"init_command": "PRAGMA journal_mode=WAL; SELECT 1;"},
    "busy_timeout and mmap": {
        "init_command": "PRAGMA busy_timeout=5000; PRAGMA mmap_size=0; PRAGMA journal_mode=WAL",
        "timeout": 20,
    },
}


CASES = [(name, "migrate") for name in INIT_COMMANDS] + [
    ("wal", "worker"),
    ("many pragmas", "check"),
    ("newlines, exclusive", "empty file"),
]


@pytest.mark.parametrize(("name", "first"), CASES, ids=[f"{n}-{f}" for n, f in CASES])
def test_a_new_database_gets_incremental_auto_vacuum(tmp_path, name, first):
    options = INIT_COMMANDS[name]
    path = tmp_path / "db.sqlite3"
    env = _project(tmp_path, {"default": _db(path, options)})
    if first == "worker":
        # The worker connects first (to a file with no tables yet): it may refuse to run.
        _manage(env, "sqlq_worker", "--burst", check=False)
    elif first == "check":
        _manage(env, "check", "--database", "default", check=False)
    elif first == "empty file":
        path.touch()
    _manage(env, "migrate", "-v", "0")
    assert _pragma(path, "auto_vacuum") == 2, options
    assert _pragma(path, "page_count") > 0
    out = _manage(env, "check", "--database", "default")
    assert "W002" not in out.stdout + out.stderr
    # The queue works on it.
    _script(
        env,
        "from django_sqlq import enqueue; from tests.conftest import run_burst\n"
        "j = enqueue('tests.noop'); run_burst(); j.refresh_from_db()\n"
        "assert j.status == 'completed'",
    )
    assert _pragma(path, "auto_vacuum") == 2


def test_init_command_that_sets_auto_vacuum_none_is_overridden(tmp_path):
    """The docs: 'That holds whatever your OPTIONS["init_command"] says'."""
    path = tmp_path / "db.sqlite3"
    env = _project(
        tmp_path,
        {
            "default": _db(
                path, {"init_command": "PRAGMA auto_vacuum=NONE; PRAGMA journal_mode=WAL"}
            )
        },
    )
    _manage(env, "migrate", "-v", "0")
    assert _pragma(path, "auto_vacuum") == 2


def test_an_empty_wal_file_made_by_an_older_release_is_fixed(tmp_path):
    """A file whose header was written (WAL, auto_vacuum 0) but that has no table yet."""
    path = tmp_path / "db.sqlite3"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.close()
    assert _pragma(path, "auto_vacuum") == 0
    env = _project(tmp_path, {"default": _db(path, {"init_command": "PRAGMA journal_mode=WAL"})})
    _manage(env, "migrate", "-v", "0")
    assert _pragma(path, "auto_vacuum") == 2


def test_a_separate_queue_database_gets_it(tmp_path):
    main, queue = tmp_path / "main.sqlite3", tmp_path / "queue.sqlite3"
    wal = {
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        "transaction_mode": "IMMEDIATE",
    }
    env = _project(
        tmp_path,
        {"default": _db(main, wal), "queue": _db(queue, wal)},
        sqlq={"DATABASE": "queue"},
        routers=["django_sqlq.routers.QueueRouter"],
    )
    _manage(env, "migrate", "-v", "0")
    _manage(env, "migrate", "-v", "0", "--database", "queue")
    assert _pragma(queue, "auto_vacuum") == 2
    out = _manage(env, "check", "--database", "queue")
    assert "W002" not in out.stdout + out.stderr
    _script(
        env,
        "from django_sqlq import enqueue; from tests.conftest import run_burst\n"
        "j = enqueue('tests.noop'); run_burst(); j.refresh_from_db()\n"
        "assert j.status == 'completed'",
    )


PRAGMA_OVERRIDES = {
    "upper case": (
        {"auto_vacuum": "INCREMENTAL", "journal_mode": "WAL", "busy_timeout": 10000},
        2,
    ),
    "integer": ({"auto_vacuum": 2, "journal_mode": "wal", "busy_timeout": 10000}, 2),
    "full": ({"auto_vacuum": "full", "journal_mode": "wal", "busy_timeout": 10000}, 1),
    "without it": ({"journal_mode": "wal", "busy_timeout": 10000}, 0),
}


@pytest.mark.parametrize(
    ("pragmas", "expected"), list(PRAGMA_OVERRIDES.values()), ids=list(PRAGMA_OVERRIDES)
)
def test_sqlite_pragmas_overrides(tmp_path, pragmas, expected):
    path = tmp_path / "db.sqlite3"
    env = _project(
        tmp_path,
        {"default": _db(path, {"init_command": "PRAGMA journal_mode=WAL"})},
        sqlq={"SQLITE_PRAGMAS": pragmas},
    )
    _manage(env, "migrate", "-v", "0")
    assert _pragma(path, "auto_vacuum") == expected
    out = _manage(env, "check", "--database", "default")
    said = out.stdout + out.stderr
    # W002 warns only when SQLITE_PRAGMAS asks for incremental (docs/reference/checks.md).
    assert ("W002" in said) == False, said  # noqa: E712


def test_w002_and_its_one_time_command(tmp_path):
    path = tmp_path / "db.sqlite3"
    env = _project(tmp_path, {"default": _db(path, {"init_command": "PRAGMA journal_mode=WAL"})})
    _manage(env, "migrate", "-v", "0")
    # An older release's database: tables, auto_vacuum NONE, and some pruned jobs' pages.
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA auto_vacuum = NONE")
    conn.execute("VACUUM")
    conn.close()
    assert _pragma(path, "auto_vacuum") == 0
    _script(
        env,
        "from django_sqlq import bulk_enqueue\n"
        "bulk_enqueue('tests.noop', [{'pad': 'x' * 2000} for _ in range(3000)])",
    )
    out = _manage(env, "check", "--database", "default")
    said = out.stdout + out.stderr
    assert "django_sqlq.W002" in said, said
    assert "PRAGMA auto_vacuum = INCREMENTAL; VACUUM;" in said, said
    # Not without --database (the docs: only with check --database and migrate).
    assert "W002" not in (lambda o: o.stdout + o.stderr)(_manage(env, "check"))
    # migrate says it too.
    said = (lambda o: o.stdout + o.stderr)(_manage(env, "migrate"))
    assert "W002" in said, said
    # The one-time command, through dbshell as the docs show.
    shell = _manage(env, "dbshell", stdin="PRAGMA auto_vacuum = INCREMENTAL;\nVACUUM;\n")
    assert shell.stderr == "", shell.stderr
    assert _pragma(path, "auto_vacuum") == 2
    said = (lambda o: o.stdout + o.stderr)(_manage(env, "check", "--database", "default"))
    assert "W002" not in said, said
    # And the file now shrinks once the jobs have run and been pruned (sqlq_prune gives
    # the pages back with incremental_vacuum; the checkpoint at the last close writes them).
    size = path.stat().st_size
    _manage(env, "sqlq_worker", "--burst", "--concurrency", "4")
    _manage(env, "sqlq_prune", "--older-than", "0")
    assert path.stat().st_size < size / 2, (size, path.stat().st_size)


def test_w002_on_a_read_only_uri(tmp_path):
    """An older database opened read-only (a URI with mode=ro): the check still reads it
    and warns; it does not crash."""
    path = tmp_path / "db.sqlite3"
    env = _project(tmp_path, {"default": _db(path)})
    _manage(env, "migrate", "-v", "0")
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA auto_vacuum = NONE")
    conn.execute("VACUUM")
    conn.close()
    ro = {"default": {"ENGINE": SQLITE, "NAME": f"file:{path}?mode=ro", "OPTIONS": {"uri": True}}}
    env = _project(tmp_path, ro)
    out = _manage(env, "check", "--database", "default", check=False)
    said = out.stdout + out.stderr
    assert "Traceback" not in said, said
    assert "W002" in said, said


def test_a_read_only_connection_to_a_new_file_then_a_normal_one(tmp_path):
    path = tmp_path / "db.sqlite3"
    path.touch()
    ro = {"default": {"ENGINE": SQLITE, "NAME": f"file:{path}?mode=ro", "OPTIONS": {"uri": True}}}
    said = (lambda o: o.stdout + o.stderr)(
        _manage(_project(tmp_path, ro), "check", "--database", "default", check=False)
    )
    assert "Traceback" not in said, said
    env = _project(tmp_path, {"default": _db(path, {"init_command": "PRAGMA journal_mode=WAL"})})
    _manage(env, "migrate", "-v", "0")
    assert _pragma(path, "auto_vacuum") == 2


def test_memory_database(tmp_path):
    env = _project(tmp_path, {"default": {"ENGINE": SQLITE, "NAME": ":memory:"}})
    out = _script(
        env,
        "from django.core.management import call_command\n"
        "from django.db import connection\n"
        "call_command('migrate', verbosity=0)\n"
        "call_command('check', databases=['default'])\n"
        "from django_sqlq import enqueue; from tests.conftest import run_burst\n"
        "j = enqueue('tests.noop'); run_burst(); j.refresh_from_db()\n"
        "assert j.status == 'completed'\n"
        "with connection.cursor() as c:\n"
        "    c.execute('PRAGMA auto_vacuum'); print('av', c.fetchone()[0])\n",
    )
    assert "av 2" in out, out


@pytest.mark.parametrize("limit", [None, 1048576])
def test_the_wal_file_is_cut_back_after_a_burst(tmp_path, limit):
    """A burst of jobs (one big bulk_enqueue transaction, more than the limit of WAL) run by
    a real worker; once it is over, the -wal file is back under journal_size_limit while
    the worker still holds its connections (so the file is not simply deleted)."""
    path = tmp_path / "db.sqlite3"
    sqlq: dict[str, Any] = {}
    if limit:
        sqlq["SQLITE_PRAGMAS"] = {
            "auto_vacuum": "incremental",
            "journal_mode": "wal",
            "busy_timeout": 10000,
            "synchronous": "normal",
            "journal_size_limit": limit,
        }
    env = _project(
        tmp_path, {"default": _db(path, {"init_command": "PRAGMA journal_mode=WAL"})}, sqlq=sqlq
    )
    _manage(env, "migrate", "-v", "0")
    worker = WorkerProcess(["--concurrency", "2"], tmp_path / "worker.log", env)
    try:
        worker.wait_ready()
        _script(
            env,
            "from django_sqlq import bulk_enqueue\n"
            "bulk_enqueue('tests.noop', [{'pad': 'x' * 3000} for _ in range(2500)])",
        )
        wal = Path(f"{path}-wal")
        peak = wal.stat().st_size
        bound = limit or 4 * 1024 * 1024
        assert peak >= min(bound, 4 * 1024 * 1024), peak  # the burst did grow it

        def done() -> bool:
            conn = sqlite3.connect(path)
            try:
                left: int = conn.execute(
                    "SELECT count(*) FROM sqlq_job WHERE status != 'completed'"
                ).fetchone()[0]
                return left == 0
            finally:
                conn.close()

        until(done, 60, "the burst ran")
        # One more job after the burst: the next write after a checkpoint cuts the file.
        _script(env, "from django_sqlq import enqueue\nenqueue('tests.noop')")
        # SQLite checkpoints (and so resets the -wal file) only once it holds
        # wal_autocheckpoint (1000) pages: a limit below that cannot cut it further.
        bound = max(bound, 1000 * (4096 + 24) + 32)
        until(
            lambda: wal.exists() and wal.stat().st_size <= bound,
            20,
            f"the -wal file back under {bound} (peak {peak}, "
            f"now {wal.stat().st_size if wal.exists() else None})",
        )
        assert worker.proc.poll() is None
    finally:
        worker.stop()


def test_several_processes_open_a_new_file_at_once(tmp_path):
    """Three `check --database` processes and a `migrate` start together on a new file:
    each first connection may find it without tables and VACUUM it; nobody fails and the
    file ends INCREMENTAL."""
    path = tmp_path / "db.sqlite3"
    env = _project(tmp_path, {"default": _db(path, INIT_COMMANDS["many pragmas"])})
    args = [["check", "--database", "default"]] * 3 + [["migrate", "-v", "0"]]
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "django", *a],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for a in args
    ]
    for proc in procs:
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0, out
    assert _pragma(path, "auto_vacuum") == 2
