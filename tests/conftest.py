from __future__ import annotations

import contextlib
import logging
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.db import connections, transaction
from django.test import Client

from django_sqlq import outcomes
from django_sqlq.compat import LOGGER_NAME
from django_sqlq.db.columns import ClaimedJob
from django_sqlq.lifecycle import ErrorInfo
from django_sqlq.worker import Worker
from tests.forking import ForkedProcess, ForkServer, forking

ROOT = Path(__file__).resolve().parent.parent

# django_sqlq's pytest plugin (the ``sqlq`` fixtures). An installed package loads it through
# its pytest11 entry point (named after the module, so this is then a no-op); an editable
# install made before the entry point existed does not.
pytest_plugins = ["django_sqlq.pytest_plugin"]


# -- tiers (scripts/test) -------------------------------------------------------------------

# Tests marked "processes" run on every engine but in one Python/Django pair (scripts/test
# explains the tiers; `-m "not processes"` leaves them out). A test is marked when it asks for
# one of these fixtures (it starts real processes: sqlq_worker, manage.py, python -c; or makes
# a database of its own)...
PROCESS_FIXTURES = frozenset({"spawn_worker", "worker_env", "fresh_database"})
# ...or lives in one of these modules: the adversaries' suites, which race real workers over
# thousands of rows, an engine's behaviour more than Django's; the how-tos run as a reader
# runs them (a new project and its manage.py commands per page); SQLite projects of their own.
PROCESS_MODULES = (
    "test_*_adversary.py",
    "test_*_adversary2.py",
    "docs/test_docs_snippets.py",
    "db/test_sqlite_space_projects.py",
)


# Tests that do not run on MariaDB, with why (docs/reference/mariadb.md): a setting it refuses
# by design, a limit of the server's configuration. A prefix of node ids.
MARIADB_PENDING = {
    "tests/schedules/test_schedules.py::test_a_worker_on_naive_local_time_enqueues_ticks": (
        "USE_TZ = False is refused on MariaDB (check E007)"
    ),
    "tests/tasks_backend/test_switcher_careless.py::test_aware_run_at_and_run_after_without": (
        "USE_TZ = False is refused on MariaDB (check E007)"
    ),
    "tests/faults/test_handlers.py::test_naive_local_times_agree_with_the_database_clock": (
        "USE_TZ = False is refused on MariaDB (check E007)"
    ),
    "tests/faults/test_input.py::test_with_a_higher_limit_a_50_mb_payload_travels_whole": (
        "needs max_allowed_packet over 100 MiB (docs/reference/mariadb.md); the server's is 16"
    ),
}


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if only := os.environ.get("SQLQ_TEST_ONLY"):
        # SQLQ_TEST_ONLY=db,enqueue: only the tests of these folders of tests/ (scripts/test
        # runs the Django 5.2 pair so on PostgreSQL and MariaDB).
        folders = set(only.split(","))
        left = [item for item in items if item.nodeid.split("/")[1] not in folders]
        if left:
            config.hook.pytest_deselected(items=left)
            items[:] = [item for item in items if item.nodeid.split("/")[1] in folders]
    processes = pytest.mark.processes
    mariadb = os.environ.get("SQLQ_TEST_ENGINE") == "mysql"
    for item in items:
        in_process = PROCESS_FIXTURES.intersection(getattr(item, "fixturenames", ())) or any(
            item.path.match(pattern) for pattern in PROCESS_MODULES
        )
        if in_process:
            item.add_marker(processes)
        if mariadb:
            _mark_mariadb_pending(item)


def _mark_mariadb_pending(item: pytest.Item) -> None:
    """Skip, on MariaDB, what does not run there (MARIADB_PENDING, and say why). Every other
    test runs there, the process tier and the fault suite included."""
    for prefix, why in MARIADB_PENDING.items():
        if item.nodeid.startswith(prefix):
            item.add_marker(pytest.mark.skip(reason=f"MariaDB, pending: {why}"))
            return


class _Shard:
    """``SQLQ_TEST_SHARD=K/N`` (scripts/test sets it): this run keeps every Nth selected test,
    from the Kth on, so that N runs at once share one tier. Test by test, not module by
    module: a module's slow tests are spread over the shards."""

    def __init__(self, spec: str) -> None:
        number, _, count = spec.partition("/")
        self.number, self.count = int(number), int(count)
        if not 1 <= self.number <= self.count:
            raise pytest.UsageError(f"SQLQ_TEST_SHARD={spec!r}: K/N with 1 <= K <= N")

    def pytest_report_header(self) -> str:
        return f"shard {self.number} of {self.count} (SQLQ_TEST_SHARD)"

    @pytest.hookimpl(trylast=True)  # after `-m` and `-k` deselected: shard what is left
    def pytest_collection_modifyitems(
        self, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        kept: list[pytest.Item] = []
        left: list[pytest.Item] = []
        for index, item in enumerate(items):
            (kept if index % self.count == self.number - 1 else left).append(item)
        if left:
            config.hook.pytest_deselected(items=left)
        items[:] = kept


def pytest_configure(config: pytest.Config) -> None:
    if spec := os.environ.get("SQLQ_TEST_SHARD"):
        config.pluginmanager.register(_Shard(spec), "sqlq-shard")
    _flush_postgresql_with_delete()


def pytest_sessionfinish() -> None:
    ForkServer.stop_started()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The CPU this run spent, and the processes it started (worker processes, manage.py
    commands; the database server's is not here): CI's time is a budget, spent mostly on
    CPU when several runs share 2 cores."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    terminalreporter.write_line(
        f"CPU: this process {own.ru_utime + own.ru_stime:.0f} s, "
        f"the processes it started {children.ru_utime + children.ru_stime:.0f} s "
        f"({ForkServer.forked} forked by the fork server; its zygotes: "
        f"{ForkServer.zygotes or 'none'})"
    )
    for refusal in ForkServer.refusals:
        terminalreporter.write_line(f"fork server: {refusal[:300]}")


def _flush_postgresql_with_delete() -> None:
    """Empty the tables after a ``transaction=True`` test with DELETE, not TRUNCATE.

    Django's PostgreSQL flush TRUNCATEs the tables, which gives each one new files: about
    0.15 s a test on these machines, where DELETE of the few rows a test leaves takes 4 ms,
    and a thousand such tests run per PostgreSQL tier. The foreign keys Django makes are
    deferred, so the order of the DELETEs does not matter inside the flush's transaction.
    Only this test process flushes; the worker processes it starts are untouched."""
    from django.db.backends.postgresql.operations import DatabaseOperations

    truncate = DatabaseOperations.sql_flush

    def sql_flush(
        self: DatabaseOperations,
        style: Any,
        tables: Any,
        *,
        reset_sequences: bool = False,
        allow_cascade: bool = False,
    ) -> list[str]:
        if reset_sequences or allow_cascade or not tables:
            return truncate(
                self, style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade
            )
        return [f"DELETE FROM {self.quote_name(table)};" for table in tables]

    DatabaseOperations.sql_flush = sql_flush  # type: ignore[method-assign,assignment]


def wait_for(condition: Callable[[], Any], timeout: float = 30.0, interval: float = 0.02) -> Any:
    """Poll ``condition`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s: {condition}")
        time.sleep(interval)


@contextlib.contextmanager
def held_elsewhere(hold: Callable[[], Any]) -> Iterator[None]:
    """Run ``hold()`` in a transaction of another connection (a thread of its own: a request,
    an operator, another worker), keep that transaction open while the block runs, then end
    it. For row locks (``select_for_update()``) and writes that others must wait for."""
    held, release = threading.Event(), threading.Event()

    def holder() -> None:
        try:
            with transaction.atomic():
                hold()
                held.set()
                release.wait(60)
        finally:
            connections.close_all()

    thread = threading.Thread(target=holder)
    thread.start()
    try:
        assert held.wait(30), "the other transaction did not take its hold"
        yield
    finally:
        release.set()
        thread.join(30)


def run_burst(**kwargs: Any) -> Worker:
    """Run a ``Worker(**kwargs)`` in this process until no runnable job is left."""
    worker = Worker(**kwargs)
    worker.run(burst=True, install_signal_handlers=False)
    return worker


def fail_attempt(
    alias: str,
    job: ClaimedJob,
    error: ErrorInfo,
    *,
    worker_id: str,
    retry_in: float | None,
    cancel: bool = False,
) -> str | None:
    """Write a failed attempt as the worker does (``django_sqlq.outcomes``): its new status,
    or None when ``worker_id`` no longer held it."""
    written = outcomes.write(
        alias, [outcomes.Failed(job, error, retry_in, cancel)], worker_id=worker_id
    )
    return written.statuses.get(job.id)


@pytest.fixture(autouse=True)
def _restore_sqlq_loggers() -> Iterator[None]:
    """``call_command("sqlq_worker")`` in a test sets the levels of django_sqlq's loggers for
    its verbosity (as the command does for a process it runs): put them back, so that a
    later test's ``caplog`` sees what its own code logs."""
    names = ("django_sqlq", "django_sqlq.worker", "django_sqlq.worker.jobs", LOGGER_NAME)
    saved = {name: logging.getLogger(name).level for name in names}
    yield
    for name, level in saved.items():
        logging.getLogger(name).setLevel(level)


@pytest.fixture
def staff_client(django_user_model: Any) -> Callable[..., Client]:
    """staff_client(codename, ...) -> a logged-in Client of a new staff user who holds these
    permissions of django_sqlq's (``superuser=True``: a superuser)."""
    made = 0

    def make(*codenames: str, superuser: bool = False) -> Client:
        nonlocal made
        made += 1
        user = django_user_model.objects.create_user(
            f"staff{made}", password="pw", is_staff=True, is_superuser=superuser
        )
        for codename in codenames:
            user.user_permissions.add(
                Permission.objects.get(content_type__app_label="django_sqlq", codename=codename)
            )
        client = Client()
        client.force_login(user)
        return client

    return make


@pytest.fixture
def engine() -> str:
    return connections["default"].vendor


class WorkerProcess:
    """A real ``manage.py sqlq_worker`` process whose output goes to a file: forked by the fork
    server (``tests/forkserver.py``, which says what a fork skips), or else started with
    ``subprocess.Popen``."""

    def __init__(self, args: list[str], log: Path, env: dict[str, str]) -> None:
        self.log = log
        self._fh = log.open("wb")
        self.proc: subprocess.Popen[bytes] | ForkedProcess
        argv = ["-m", "django", "sqlq_worker", *args]
        server = forking()
        if server is not None and server.can_fork(argv, env):
            self.proc = server.spawn(argv, env, stdout=log, stderr=log)
            return
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "django", "sqlq_worker", *args],
            cwd=ROOT,
            env=env,
            stdout=self._fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_ready(self, timeout: float = 30.0) -> None:
        def ready() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"worker exited early ({self.proc.returncode}):\n{self.output()}"
                )
            return " ready" in self.output()

        wait_for(ready, timeout)

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def wait(self, timeout: float = 30.0) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"worker did not exit within {timeout}s:\n{self.output()}"
            ) from None

    def stop(self) -> None:
        if self.proc.poll() is None:
            # Its children first (the worker that `--reload` runs in a process group of its
            # own): left behind, they would go on serving the test database.
            subprocess.run(
                ["pkill", "-KILL", "-P", str(self.proc.pid)], check=False, capture_output=True
            )
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
        self._fh.close()


@pytest.fixture(scope="session")
def _every_mariadb_test_database(django_db_setup: None) -> Iterator[None]:  # noqa: ARG001
    """On MariaDB, every alias's test database exists while processes run. Django's system
    checks, which every worker and command runs at start, connect to each alias there (its
    field checks ask the server's version), so a worker stops at a test database that no
    test of this run asked for (``-k``, one folder). An empty one is enough; dropped at the
    end if created here (after Django's own, which it then leaves alone)."""
    if os.environ.get("SQLQ_TEST_ENGINE") != "mysql":
        yield
        return
    import MySQLdb

    params = connections["default"].get_connection_params()
    server = {key: params[key] for key in ("host", "port", "user", "password") if key in params}
    names = [alias["TEST"]["NAME"] for alias in connections.settings.values()]
    created = []
    with contextlib.closing(MySQLdb.connect(**server)) as admin, admin.cursor() as cursor:
        for name in names:
            cursor.execute(
                "SELECT 1 FROM information_schema.schemata WHERE schema_name = %s", [name]
            )
            if cursor.fetchone() is None:
                cursor.execute(f"CREATE DATABASE `{name}`")
                created.append(name)
    yield
    with contextlib.closing(MySQLdb.connect(**server)) as admin, admin.cursor() as cursor:
        for name in created:
            cursor.execute(f"DROP DATABASE IF EXISTS `{name}`")


@pytest.fixture
def worker_env(_every_mariadb_test_database: None) -> dict[str, str]:
    env = dict(os.environ)
    env["DJANGO_SETTINGS_MODULE"] = "tests.settings"
    env["SQLQ_TEST_USE_TEST_DB"] = "1"
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("PYTEST_CURRENT_TEST", None)
    return env


@pytest.fixture
def spawn_worker(
    tmp_path: Path, worker_env: dict[str, str]
) -> Iterator[Callable[..., WorkerProcess]]:
    started: list[WorkerProcess] = []

    def spawn(*args: str, env: dict[str, str] | None = None) -> WorkerProcess:
        log = tmp_path / f"worker-{len(started)}.log"
        worker = WorkerProcess(list(args), log, {**worker_env, **(env or {})})
        started.append(worker)
        return worker

    yield spawn
    for worker in started:
        worker.stop()


# -- a fresh, empty database (tests that run migrate in a subprocess) -----------------------


def pg_params() -> dict[str, Any]:
    """psycopg.connect() keywords for the test run's PostgreSQL server (MySQLdb.connect()'s
    for its MariaDB server)."""
    params = connections["default"].get_connection_params()
    return {k: params[k] for k in ("host", "port", "user", "password") if k in params}


@pytest.fixture
def fresh_database(engine: str, tmp_path: Path) -> Iterator[str]:
    """A new, empty database on the suite's engine: a file path (SQLite) or a database name
    (PostgreSQL, MariaDB: dropped afterwards)."""
    if engine == "sqlite":
        yield str(tmp_path / "fresh.sqlite3")
        return
    import uuid

    if engine == "mysql":
        import MySQLdb

        name = f"test_sqlq_fresh_{os.getpid()}_{uuid.uuid4().hex[:8]}"
        with contextlib.closing(MySQLdb.connect(**pg_params())) as admin:
            admin.cursor().execute(f"CREATE DATABASE `{name}`")
        try:
            yield name
        finally:
            with contextlib.closing(MySQLdb.connect(**pg_params())) as admin:
                admin.cursor().execute(f"DROP DATABASE IF EXISTS `{name}`")
        return

    import psycopg

    name = f"test_sqlq_fresh_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dbname="postgres", autocommit=True, **pg_params()) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield name
    finally:
        with psycopg.connect(dbname="postgres", autocommit=True, **pg_params()) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
