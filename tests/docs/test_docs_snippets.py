"""Docs that cannot rot: the Python blocks of the quick start and of every how-to, run the way
a reader runs them, in a new project on the suite's engine (test_every_howto_is_tested).

Each page gets a project made by ``startproject mysite`` and ``startapp shop`` (made once and
copied), with the quick start's files (the how-tos build on its ``shop`` app), then the page's
blocks written where their first lines say, then the commands the page shows (``migrate``, a
worker in ``--burst``, ``pytest`` for the tests a page shows), in subprocesses, and checks
that the jobs completed. The markdown says, in each block's first line (docs/quickstart.md
tells the reader):

- ``# <path>`` (``# shop/jobs.py``, ``# mysite/urls.py``, ``# pytest.ini``): that file. The
  first block of a page that names a file is the whole file; later ones on the same page are
  added to its end. ``# settings.py`` always goes at the end of the project's settings.
  ``# settings.py (Django < 6.1)``: only on those versions.
- ``# manage.py shell``: run with ``python manage.py shell -c``.
- ``# fragment...``: a piece to adapt, not run.

Every Python block of a page in PAGES is one of these (test_every_python_block_says_what_it_is).
The ``python manage.py ...`` lines of a page's shell blocks are run too (``commands()``), with
``--burst`` added to a worker that would otherwise run until stopped.
What the test adds to a project, after the page's settings: the database (a new one on the
suite's engine), and ``shop`` in INSTALLED_APPS (the quick start says to add it).

On PostgreSQL only the pages where the engine changes what the reader does or sees run
(``@every_engine``: the quick start, moving to PostgreSQL, production, retention); the
others run on SQLite, the engine a reader starts on. What a page shows of the queue (its
calls, the worker, the commands) is tested on each engine by the feature's own tests; a
page costs about ten processes, and running each twice cost CI two minutes.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import shutil
import sqlite3
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import django
import pytest
from django.db import connections

from tests.conftest import ROOT, pg_params
from tests.forking import run_python

DOCS = ROOT / "docs"
PAGES = [
    "quickstart.md",
    "howto/admin.md",
    "howto/atomic-handlers.md",
    "howto/cancel-and-progress.md",
    "howto/chains.md",
    "howto/dependencies.md",
    "howto/durable-steps.md",
    "howto/migrate-from-django-tasks-db.md",
    "howto/observability.md",
    "howto/production.md",
    "howto/queue-control.md",
    "howto/recurring-jobs.md",
    "howto/retention.md",
    "howto/retries-priorities-scheduling.md",
    "howto/sqlite-to-postgresql.md",
    "howto/tasks-backend.md",
    "howto/testing.md",
    "howto/transactions.md",
    "howto/unique-jobs.md",
]
# A fence, possibly indented (inside a list item): its info string and its text.
FENCE = re.compile(r"^( *)```(\w*)[^\n]*\n(.*?)^\1```", re.MULTILINE | re.DOTALL)
FILE_LINE = re.compile(
    r"#\s*(?P<path>[\w./-]+\.(?:py|ini))(?:\s*\(Django < (?P<below>[\d.]+)\))?$"
)
SHELL_LINE = "# manage.py shell"
FRAGMENT_LINE = re.compile(r"#\s*fragment\b")


@dataclass
class Block:
    page: str
    line: int  # in the markdown
    language: str
    code: str

    @property
    def first(self) -> str:
        return self.code.splitlines()[0].strip() if self.code.strip() else ""

    @property
    def kind(self) -> str:
        """ "file", "shell", "fragment" or "" (none of these: an error on a tested page)."""
        if FILE_LINE.fullmatch(self.first):
            return "file"
        if self.first == SHELL_LINE:
            return "shell"
        if FRAGMENT_LINE.match(self.first):
            return "fragment"
        return ""

    @property
    def path(self) -> str:
        match = FILE_LINE.fullmatch(self.first)
        assert match
        return match.group("path")

    @property
    def applies(self) -> bool:
        """False for a ``(Django < X.Y)`` block on a newer Django."""
        match = FILE_LINE.fullmatch(self.first)
        below = match and match.group("below")
        if not below:
            return True
        return django.VERSION[:2] < tuple(int(part) for part in below.split("."))


def blocks(page: str) -> list[Block]:
    text = (DOCS / page).read_text()
    found = []
    for match in FENCE.finditer(text):
        indent, language, code = match.groups()
        found.append(
            Block(
                page=page,
                line=text[: match.start()].count("\n") + 1,
                language=language,
                code=textwrap.dedent(code) if indent else code,
            )
        )
    return found


def python_blocks(page: str) -> list[Block]:
    return [block for block in blocks(page) if block.language == "python"]


def test_every_python_block_says_what_it_is() -> None:
    unmarked = [
        f"docs/{block.page}:{block.line}: {block.first!r}"
        for page in PAGES
        for block in python_blocks(page)
        if not block.kind
    ]
    assert not unmarked, (
        "Python blocks whose first line is not '# <file>', '# manage.py shell' or "
        "'# fragment...':\n" + "\n".join(unmarked)
    )


def test_every_howto_is_tested() -> None:
    howtos = sorted(f"howto/{path.name}" for path in (DOCS / "howto").glob("*.md"))
    assert [page for page in howtos if page not in PAGES] == []


def commands(page: str) -> list[list[str]]:
    """The ``python manage.py ...`` lines of the page's shell blocks (``$ `` prompts and
    comments left out), as argument lists after ``manage.py``."""
    found = []
    for block in blocks(page):
        if block.language not in ("bash", "console", "shell", "sh"):
            continue
        for line in block.code.splitlines():
            line = line.strip().removeprefix("$ ")
            if line.startswith("python manage.py "):
                found.append(shlex.split(line, comments=True)[2:])
    return found


def test_the_quickstart_blocks_are_the_files_it_names() -> None:
    assert [block.first for block in python_blocks("quickstart.md")] == [
        "# settings.py",
        "# settings.py (Django < 6.1)",
        "# shop/models.py",
        "# shop/jobs.py",
        "# shop/views.py",
    ]


# -- the project -----------------------------------------------------------------------------


@dataclass
class Project:
    root: Path
    env: dict[str, str]
    engine: str
    database: str  # the test database: a file (SQLite) or a name (PostgreSQL)
    written: set[str] = field(default_factory=set)

    @property
    def settings(self) -> Path:
        return self.root / "mysite" / "settings.py"

    def run(self, *args: str) -> str:
        """Run ``python ARGS`` in the project; its stdout and stderr."""
        done = run_python(list(args), env=self.env, cwd=self.root, timeout=120)
        output = done.stdout + done.stderr
        assert done.returncode == 0, f"{args} failed:\n{output}"
        return output

    def manage(self, *args: str, input: str | None = None) -> str:
        if input is None:
            return self.run("manage.py", *args)
        done = run_python(
            ["manage.py", *args], env=self.env, cwd=self.root, input=input, timeout=120
        )
        assert done.returncode == 0, f"{args} failed:\n{done.stdout}{done.stderr}"
        return done.stdout + done.stderr

    def popen(self, *args: str) -> subprocess.Popen[str]:
        """``python manage.py ARGS`` started in the background."""
        return subprocess.Popen(
            [sys.executable, "manage.py", *args],
            cwd=self.root,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def shell(self, code: str) -> str:
        return self.manage("shell", "-v", "0", "-c", code)

    def pytest(self) -> str:
        """``pytest`` as the reader runs it. Not with ``-W error``: on Python 3.13 and SQLite,
        the testing page's ``Worker().run(burst=True)`` test leaves a connection that
        Python reports unclosed (a ResourceWarning) at exit."""
        return self.run("-m", "pytest", "-q", "-p", "no:cacheprovider")

    def add_settings(self, code: str) -> None:
        self.settings.write_text(self.settings.read_text() + "\n" + code + "\n")

    def write_files(self, page: str) -> None:
        """Write the page's file blocks, in the page's order."""
        self.written = set()
        for block in blocks(page):
            if block.kind == "file" and block.applies:
                self.write(block.path, block.code)

    def run_shell_blocks(self, page: str) -> str:
        """The page's ``# manage.py shell`` blocks, in one session, as a reader pastes them."""
        code = "\n".join(block.code for block in blocks(page) if block.kind == "shell")
        return self.shell(code) if code else ""

    def write(self, path: str, code: str) -> None:
        if path == "settings.py":
            self.add_settings(code)
            return
        target = self.root / path
        if path in self.written:
            code = target.read_text() + "\n\n" + code
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(code)
        self.written.add(path)

    def start(self, page: str, *, shell: bool = True) -> str:
        """The page's files on the quick start's project, on the test database, migrated
        (makemigrations first when the page changes the models); then its shell blocks,
        unless ``shell`` is false: what they printed."""
        if page != "quickstart.md":  # the template has the quick start's files
            self.write_files(page)
        self.add_settings(
            "# The docs tests' database\n" + database_settings(self.engine, self.database)
        )
        if "shop/models.py" in self.written:
            self.manage("makemigrations", "shop", "-v", "0")
        self.manage("migrate", "-v", "0")
        return self.run_shell_blocks(page) if shell else ""

    def rows(self, sql: str, *, sqlite_file: Path | None = None) -> list[tuple[Any, ...]]:
        """``sql``'s rows, read in this process from the test database (or a SQLite file)."""
        if sqlite_file is not None or self.engine == "sqlite":
            with closing(sqlite3.connect(sqlite_file or self.database)) as conn:
                return conn.execute(sql).fetchall()
        if self.engine == "mysql":
            import MySQLdb

            with closing(MySQLdb.connect(db=self.database, **pg_params())) as my:
                cursor = my.cursor()
                cursor.execute(sql)
                return list(cursor.fetchall())
        import psycopg

        with psycopg.connect(dbname=self.database, **pg_params()) as conn:
            return conn.execute(sql).fetchall()

    def jobs(self, **kwargs: Any) -> list[tuple[Any, ...]]:
        """(type, status) of every job, by type."""
        return self.rows("SELECT type, status FROM sqlq_job ORDER BY type, id", **kwargs)


def reader_env() -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DJANGO_", "SQLQ_", "PYTEST_", "COV_CORE_"))
    }
    env["PYTHONPATH"] = str(ROOT)  # django_sqlq from this checkout
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def database_settings(engine: str, name: str, alias: str = "default") -> str:
    """Settings lines that point ``alias`` at the database ``name`` on the suite's engine.
    What the page set for it (``OPTIONS``, ``CONN_MAX_AGE``...) stays when it names the same
    engine."""
    entry: dict[str, Any]
    if engine == "sqlite":
        entry = {"ENGINE": "django.db.backends.sqlite3", "NAME": name}
    elif engine == "mysql":
        params = pg_params()
        entry = {
            "ENGINE": "django.db.backends.mysql",
            "NAME": name,
            "HOST": params.get("host", ""),
            "PORT": str(params.get("port", "")),
            "USER": params.get("user", ""),
            "PASSWORD": params.get("password", ""),
            "OPTIONS": {"charset": "utf8mb4"},  # docs/reference/mariadb.md's
        }
    else:
        params = pg_params()
        entry = {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": name,
            "HOST": params.get("host", ""),
            "PORT": str(params.get("port", "")),
            "USER": params.get("user", ""),
            "PASSWORD": params.get("password", ""),
            # A fresh database per page on a loaded machine: commits need not wait for the
            # disk (durability is not what the pages show).
            "OPTIONS": {"options": "-c synchronous_commit=off"},
        }
    return (
        f"_page = DATABASES.get({alias!r}, {{}})\n"
        f"DATABASES[{alias!r}] = {{\n"
        f"    **(_page if _page.get('ENGINE') == {entry['ENGINE']!r} else {{}}),\n"
        f"    **{entry!r},\n"
        "}"
    )


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``startproject mysite``, ``startapp shop`` and the quick start's files with their
    migration, once for the module: what every page builds on."""
    root = tmp_path_factory.mktemp("docs") / "site"
    root.mkdir()
    project = Project(root, reader_env(), engine="sqlite", database="")
    project.run("-m", "django", "startproject", "mysite", ".")
    project.manage("startapp", "shop")
    project.add_settings('INSTALLED_APPS += ["shop"]  # the quick start\'s app')
    (root / "pytest.ini").write_text("[pytest]\nDJANGO_SETTINGS_MODULE = mysite.settings\n")
    project.write_files("quickstart.md")
    project.manage("makemigrations", "shop", "-v", "0")
    return root


@pytest.fixture(scope="module")
def drop_later() -> Iterator[Callable[[str], None]]:
    """Drops a page's PostgreSQL (or MariaDB) database in a thread of its own while the next
    pages run (a DROP DATABASE waits for a checkpoint: seconds on a loaded machine); all are
    dropped by the end of the module."""
    futures: list[Future[None]] = []
    with ThreadPoolExecutor(max_workers=1) as pool:
        yield lambda name: futures.append(pool.submit(drop_database, name))
    for future in futures:
        future.result()


def drop_database(name: str) -> None:
    if connections["default"].vendor == "mysql":
        import MySQLdb

        with closing(MySQLdb.connect(**pg_params())) as my:
            my.cursor().execute(f"DROP DATABASE IF EXISTS `{name}`")
        return
    import psycopg

    with psycopg.connect(dbname="postgres", autocommit=True, **pg_params()) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def fresh_database(
    engine: str, tmp_path: Path, drop_later: Callable[[str], None]
) -> Iterator[str]:
    """conftest's fresh_database, with the server's database dropped by ``drop_later``."""
    if engine == "sqlite":
        yield str(tmp_path / "fresh.sqlite3")
        return
    name = f"test_sqlq_fresh_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    if engine == "mysql":
        import MySQLdb

        with closing(MySQLdb.connect(**pg_params())) as my:
            my.cursor().execute(f"CREATE DATABASE `{name}`")
    else:
        import psycopg

        with psycopg.connect(dbname="postgres", autocommit=True, **pg_params()) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield name
    finally:
        drop_later(name)


#: A page whose test runs on PostgreSQL too (the module's docstring says which and why).
every_engine = pytest.mark.every_engine


@pytest.fixture
def page_engine(request: pytest.FixtureRequest, engine: str) -> str:
    """The suite's engine, if this page runs on it (before its database is made)."""
    if engine != "sqlite" and request.node.get_closest_marker("every_engine") is None:
        pytest.skip("a page whose reader's path is the same on every engine runs on SQLite")
    return engine


@pytest.fixture
def project(page_engine: str, template: Path, tmp_path: Path, fresh_database: str) -> Project:
    root = tmp_path / "site"
    shutil.copytree(template, root)
    return Project(root, reader_env(), engine=page_engine, database=fresh_database)


# -- the pages -------------------------------------------------------------------------------

pytestmark = pytest.mark.django_db(transaction=True)  # fresh_database, on the suite's server

PLACE_ORDER = (
    "from django.test import RequestFactory\n"
    "from shop.views import place_order\n"
    "request = RequestFactory().post('/', {{'email': '{email}', 'item': 'teapot'}})\n"
    "print(place_order(request).status_code)\n"
)


@every_engine
def test_quickstart(project: Project) -> None:
    project.start("quickstart.md")
    project.manage("check", "--fail-level", "WARNING")
    # Step 3: the view places an order and enqueues its confirmation.
    assert project.shell(PLACE_ORDER.format(email="ada@example.com")).strip() == "201"
    assert project.rows("SELECT type, queue, status FROM sqlq_job") == [
        ("shop.send_order_confirmation", "emails", "pending")
    ]
    # Step 4: a worker, as the page runs it; the console mail backend prints the email.
    out = project.manage("sqlq_worker", "--burst")
    assert "Subject: Your order" in out
    assert "To: ada@example.com" in out
    [(status, result, attempts)] = project.rows("SELECT status, result, attempts FROM sqlq_job")
    assert (status, json.loads(result) if isinstance(result, str) else result, attempts) == (
        "completed",
        {"sent_to": "ada@example.com"},
        1,
    )
    assert project.rows("SELECT confirmation_sent_at IS NOT NULL FROM shop_order") == [(True,)]


def test_testing(project: Project) -> None:
    project.start("howto/testing.md")
    out = project.pytest()
    assert re.search(r"\b7 passed\b", out), out


def test_recurring_jobs(project: Project) -> None:
    project.start("howto/recurring-jobs.md")
    out = project.manage("sqlq_worker", "--burst")
    # Every schedule the page declares, @recurring in shop/tasks.py included.
    for line in [
        "Schedule nightly-report: reports.nightly cron='0 3 * * *' tz=Europe/Paris",
        "Schedule cache.refresh: cache.refresh cron='*/5 * * * *' tz=UTC",
        "Schedule weekly-report: reports.weekly cron='0 6 * * MON' tz=Europe/Paris",
        "Schedule purge-carts: shop.tasks.purge_carts cron='30 4 * * *'",
        "Schedule shop.tasks.purge_carts: shop.tasks.purge_carts cron='30 4 * * *'",
    ]:
        assert line in out, out
    out = project.pytest()
    assert re.search(r"\b1 passed\b", out), out


@every_engine
def test_sqlite_to_postgresql(project: Project) -> None:
    """The quick start's project on its SQLite file, with a job waiting; then the page's
    settings move the queue to a database of its own (the test database)."""
    old = project.root / "db.sqlite3"  # startproject's
    project.manage("migrate", "-v", "0")
    project.shell(PLACE_ORDER.format(email="before@example.com"))

    project.write_files("howto/sqlite-to-postgresql.md")
    project.add_settings(database_settings(project.engine, project.database, alias="queue"))
    project.manage("migrate", "--database", "queue", "-v", "0")  # step 3
    if project.engine == "sqlite":
        sql = "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
    elif project.engine == "mysql":
        sql = "SHOW TABLES"
    else:
        sql = "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
    assert sorted(name for (name,) in project.rows(sql)) == [
        "django_migrations",
        "sqlq_event",
        "sqlq_job",
        "sqlq_job_blocker",
        "sqlq_job_step",
        "sqlq_maintenance",
        "sqlq_queue",
        "sqlq_schedule",
        "sqlq_schedule_tick",
        *(["sqlq_wake"] if project.engine == "mysql" else []),  # MariaDB's (0017)
        "sqlq_worker",
    ]
    project.shell(PLACE_ORDER.format(email="after@example.com"))  # step 4: to the new database
    project.manage("sqlq_worker", "--burst")
    project.manage("sqlq_worker", "--burst", "--database", "default")  # step 5: the old one
    assert project.jobs(sqlite_file=old) == [("shop.send_order_confirmation", "completed")]
    assert project.jobs() == [("shop.send_order_confirmation", "completed")]
    emails = project.rows("SELECT customer_email FROM shop_order ORDER BY id", sqlite_file=old)
    assert emails == [("before@example.com",), ("after@example.com",)]


def test_unique_jobs(project: Project) -> None:
    """The page's shell blocks run after ``migrate``, which checks its TASKS settings."""
    project.start("howto/unique-jobs.md")
    keys = project.rows("SELECT unique_key FROM sqlq_job ORDER BY unique_key")
    assert keys == [("digest:7",), ("invoice:42",), ("invoice:43",)]


def test_chains(project: Project) -> None:
    project.start("howto/chains.md")
    project.shell(  # "Start the chain as any job"
        "from django_sqlq import enqueue\n"
        "from shop.models import Order\n"
        "order = Order.objects.create(customer_email='ada@example.com', item='teapot')\n"
        "enqueue('shop.charge_order', {'order_id': order.pk})\n"
    )
    out = project.manage("sqlq_worker", "--burst")
    assert "Subject: Your receipt" in out
    assert project.jobs() == [
        ("shop.charge_order", "completed"),
        ("shop.email_receipt", "completed"),
        ("shop.ship_order", "completed"),
    ]
    sql = "SELECT paid_at IS NOT NULL, shipped_at IS NOT NULL FROM shop_order"
    assert project.rows(sql) == [(True, True)]
    out = project.pytest()
    assert re.search(r"\b1 passed\b", out), out


def test_observability(project: Project) -> None:
    """Without SQLQ_METRICS_TOKEN in the environment the project starts (``migrate`` loads
    the settings); with it, a scraper that sends it is let in, and no one else."""
    project.start("howto/observability.md")
    project.env["SQLQ_METRICS_TOKEN"] = "a-token-of-16-characters"
    out = project.shell(
        "from django.test import Client\n"
        "client = Client(HTTP_HOST='localhost')\n"  # startproject's ALLOWED_HOSTS (DEBUG)
        "bearer = {'Authorization': 'Bearer a-token-of-16-characters'}\n"
        "print('status', client.get('/sqlq/metrics').status_code,"
        " client.get('/sqlq/metrics', headers=bearer).status_code)\n"
    )
    assert re.findall(r"^status (\d+) (\d+)$", out, re.MULTILINE) == [("403", "200")]


# -- reading the project's jobs through Django (what a reader does in `manage.py shell`) ------

JOBS = (
    "from django.utils import timezone\n"
    "from django_sqlq.models import Job\n"
    "for job in Job.objects.order_by('id'):\n"
    "    due = round((job.scheduled_at - timezone.now()).total_seconds())\n"
    "    error = job.last_error.strip().splitlines()[-1] if job.last_error else ''\n"
    "    print('job', job.pk, job.type, job.queue, job.status, job.attempts, job.max_attempts,"
    " job.priority, due, repr(error), job.progress_message or '', sep='|')\n"
)


@dataclass
class JobRow:
    id: int
    type: str
    queue: str
    status: str
    attempts: int
    max_attempts: int
    priority: int
    due_in: int  # seconds from now to scheduled_at
    error: str  # the last line of last_error
    progress_message: str


def read_jobs(project: Project) -> list[JobRow]:
    rows = []
    for line in project.shell(JOBS).splitlines():
        if line.startswith("job|"):
            pk, type_, queue, status, attempts, max_attempts, priority, due, error, message = (
                line.split("|")[1:]
            )
            rows.append(
                JobRow(
                    int(pk),
                    type_,
                    queue,
                    status,
                    int(attempts),
                    int(max_attempts),
                    int(priority),
                    int(due),
                    ast.literal_eval(error),
                    message,
                )
            )
    return rows


def test_transactions(project: Project) -> None:
    """The async views: aenqueue() returns a committed job; create_order() writes the order
    and its job together, or neither."""
    project.start("howto/transactions.md")
    out = project.shell(
        "import asyncio\n"
        "from django.db import transaction\n"
        "from django.test import RequestFactory\n"
        "from shop.async_views import checkout, create_order, resend_confirmation\n"
        "from shop.models import Order\n"
        "factory = RequestFactory()\n"
        "post = factory.post('/', {'email': 'ada@example.com', 'item': 'teapot'})\n"
        "response = asyncio.run(checkout(post))\n"
        "print(response.status_code, response.content.decode())\n"
        "post = factory.post('/', {'order_id': Order.objects.get().pk})\n"
        "response = asyncio.run(resend_confirmation(post))\n"
        "print(response.status_code, response.content.decode())\n"
        "try:\n"
        "    with transaction.atomic():\n"
        "        create_order('bob@example.com', 'cup')\n"
        "        raise RuntimeError\n"
        "except RuntimeError:\n"
        "    pass\n"
        "print('orders', Order.objects.count())\n"
    )
    assert out.splitlines() == ["201 Order #1 placed", "202 Job #2", "orders 1"]
    assert project.jobs() == [("shop.send_order_confirmation", "pending")] * 2
    out = project.manage("sqlq_worker", "--burst")
    assert out.count("To: ada@example.com") == 1  # the second run finds it sent: idempotent
    assert project.jobs() == [("shop.send_order_confirmation", "completed")] * 2


def test_atomic_handlers(project: Project) -> None:
    project.start("howto/atomic-handlers.md")
    project.shell(
        "from django_sqlq import enqueue\n"
        "from shop.models import Order\n"
        "order = Order.objects.create(customer_email='ada@example.com', item='teapot')\n"
        "enqueue('shop.mark_order_paid', {'order_id': order.pk})\n"
    )
    project.manage("sqlq_worker", "--burst")
    [(status, result)] = project.rows("SELECT status, result FROM sqlq_job")
    assert (status, json.loads(result) if isinstance(result, str) else result) == (
        "completed",
        {"order_id": 1},
    )
    assert project.rows("SELECT paid_at IS NOT NULL FROM shop_order") == [(True,)]


def test_retries_priorities_scheduling(project: Project) -> None:
    project.start("howto/retries-priorities-scheduling.md")
    jobs = read_jobs(project)
    assert [(job.type, job.status, job.max_attempts, job.priority) for job in jobs] == [
        ("shop.sync_crm", "pending", 10, 0),
        ("shop.send_password_reset", "pending", 5, 50),
        ("shop.remind", "scheduled", 5, 0),
        ("shop.remind", "scheduled", 5, 0),
    ]
    assert 86400 - 120 < jobs[2].due_in <= 86400  # run_at: in a day
    assert 3600 - 120 < jobs[3].due_in <= 3600  # delay=3600
    project.manage("sqlq_worker", "--burst")
    sync_crm, reset = read_jobs(project)[:2]
    # The failed attempt is retried after the page's backoff: 60 s after the first attempt.
    assert (sync_crm.status, sync_crm.attempts) == ("scheduled", 1)
    assert 60 - 30 < sync_crm.due_in <= 60, sync_crm
    assert sync_crm.error == "ConnectionError: CRM unreachable"
    assert reset.status == "completed"


@every_engine
def test_production(project: Project) -> None:
    """The SQLite settings the page shows (on SQLite: WAL, and auto_vacuum all the same),
    and a worker as the systemd unit starts it, in --burst."""
    project.start("howto/production.md")
    project.shell(PLACE_ORDER.format(email="ada@example.com"))
    [unit] = [block.code for block in blocks("howto/production.md") if block.language == "ini"]
    [exec_start] = re.findall(r"^ExecStart=\S+ manage\.py (.*)$", unit, re.MULTILINE)
    out = project.manage(*shlex.split(exec_start), "--burst")
    assert "To: ada@example.com" in out
    assert project.jobs() == [("shop.send_order_confirmation", "completed")]
    out = project.manage("check", "--database", "default")
    assert "django_sqlq.W" not in out, out
    if project.engine == "sqlite":
        assert project.rows("PRAGMA journal_mode") == [("wal",)]
        assert project.rows("PRAGMA auto_vacuum") == [(2,)]  # INCREMENTAL


def test_dependencies(project: Project) -> None:
    out = project.start("howto/dependencies.md")
    assert out.split() == ["blocked"]
    assert project.jobs() == [
        ("shop.charge_order", "blocked"),
        ("shop.charge_order", "blocked"),
        *[("shop.pack_item", "pending")] * 5,
    ]
    project.manage("sqlq_worker", "--burst")  # what the page runs
    assert project.jobs() == [
        ("shop.charge_order", "completed"),
        ("shop.charge_order", "completed"),
        *[("shop.pack_item", "completed")] * 5,
    ]
    # Each charge started once its order's packing had completed.
    sql = (
        "SELECT charge.id FROM sqlq_job charge, sqlq_job pack"
        " WHERE charge.type = 'shop.charge_order' AND pack.type = 'shop.pack_item'"
        " AND pack.id < charge.id AND pack.completed_at > charge.started_at"
    )
    assert project.rows(sql) == []
    assert project.rows("SELECT paid_at IS NOT NULL FROM shop_order") == [(True,), (True,)]


def test_cancel_and_progress(project: Project) -> None:
    """The page's cancel of a job that had not started; then a running one, cancelled while
    a worker runs it: it stops at its next check, with its progress kept."""
    out = project.start("howto/cancel-and-progress.md")
    assert out.split() == ["CANCELLED"]
    project.shell(
        "from django_sqlq import enqueue\n"
        "enqueue('shop.rebuild_thumbnails', {'images': [f'{n}.png' for n in range(8)]})\n"
    )
    worker = project.popen("sqlq_worker", "--burst")
    try:
        out = project.shell(
            "import time\n"
            "from django_sqlq import cancel\n"
            "from django_sqlq.models import Job\n"
            "deadline = time.monotonic() + 60\n"
            "while not Job.objects.get(pk=2).progress and time.monotonic() < deadline:\n"
            "    time.sleep(0.1)\n"
            "print(cancel(2).name)\n"
        )
        assert out.split() == ["REQUESTED"]
        output, _ = worker.communicate(timeout=60)
    finally:
        worker.kill()
        worker.wait()
    assert worker.returncode == 0, output
    first, running = read_jobs(project)
    assert (first.status, first.attempts) == ("cancelled", 0)
    assert running.status == "cancelled", running
    assert running.error.startswith("django_sqlq.exceptions.JobCancelled"), running
    done = int(re.fullmatch(r"resized (\d) of 8", running.progress_message)[1])  # type: ignore[index]
    assert 1 <= done < 8, running


def test_queue_control(project: Project) -> None:
    """The page's commands in order, a job waiting in the paused queue meanwhile."""
    page = "howto/queue-control.md"
    out = project.start(page)
    assert out.split() == ["True", "True"]  # pause_queue(), resume_queue()
    project.shell(PLACE_ORDER.format(email="ada@example.com"))
    pause, status, resume, worker = commands(page)
    assert project.manage(*pause).strip() == "Queue emails paused."
    table = [line.split() for line in project.manage(*status).splitlines()]
    assert table[0] == ["QUEUE", "STATE", "PENDING", "SCHEDULED", "RUNNING", "LIMITS"]
    assert ["emails", "paused", "1", "0", "0", "-"] in table
    assert ["video", "running", "0", "0", "0", "concurrency", "2"] in table
    assert ["sms", "running", "0", "0", "0", "rate", "10/s"] in table
    project.manage(*worker, "--burst")  # a paused queue's jobs are not runnable
    assert project.jobs() == [("shop.send_order_confirmation", "pending")]
    assert project.manage(*resume).strip() == "Queue emails resumed."
    project.manage(*worker, "--burst")
    assert project.jobs() == [("shop.send_order_confirmation", "completed")]


@every_engine
def test_retention(project: Project) -> None:
    """A job completed two days ago: the page's KEEP_FINISHED (completed: a day) prunes it,
    not before --dry-run has listed it; then the page's dbshell sessions."""
    page = "howto/retention.md"
    project.start(page)
    project.shell(PLACE_ORDER.format(email="ada@example.com"))
    project.manage("sqlq_worker", "--burst")
    project.shell(
        "from datetime import timedelta\n"
        "from django.db.models import F\n"
        "from django_sqlq.models import Job\n"
        "Job.objects.update(completed_at=F('completed_at') - timedelta(days=2))\n"
    )
    dry_run, by_settings, *others = [args for args in commands(page) if args[0] == "sqlq_prune"]
    assert dry_run == ["sqlq_prune", "--dry-run"]
    assert by_settings == ["sqlq_prune"]
    out = project.manage(*dry_run)
    assert re.search(r"completed\s+emails\s+1\b", out), out
    assert project.jobs() == [("shop.send_order_confirmation", "completed")]
    out = project.manage(*by_settings)
    assert "Deleted 1 finished job(s)" in out, out
    assert project.jobs() == []
    after = ["sqlq_prune", "--min-age-days", "14", "--failed-min-age-days", "30"]
    assert [*after, "--queue-name", "*"] in others
    out = project.shell(  # the other lines, db's spelling included, in one process
        "from django.core.management import call_command\n"
        f"for args in {others!r}:\n"
        "    call_command(*args)\n"
    )
    assert out.count("Deleted 0 finished job(s)") == len(others), out
    # dbshell, as the page types into it.
    if project.engine == "sqlite":
        sessions = [
            [line.removeprefix("sqlite> ") for line in block.code.splitlines()[1:]]
            for block in blocks(page)
            if block.code.startswith("python manage.py dbshell\nsqlite> ")
        ]
        check, convert = sessions
        assert project.manage("dbshell", input=check[0] + "\n").strip() == check[1]  # "2"
        project.manage("dbshell", input="\n".join(convert) + "\n")
        assert project.rows("PRAGMA auto_vacuum") == [(2,)]
    else:
        postgresql, mariadb = [block.code for block in blocks(page) if block.language == "sql"]
        if project.engine == "mysql":
            out = project.manage("dbshell", input=mariadb)
            assert "sqlq_job" in out, out
            assert "error" not in out.lower(), out
        else:
            project.manage("dbshell", "--", "-v", "ON_ERROR_STOP=1", input=postgresql)


def test_admin(project: Project) -> None:
    """An operator's round: a job failed (its order did not exist yet); the dashboard and the
    failed jobs list show it, ``sqlq_jobs`` lists it; the cause fixed, the admin's retry
    action puts it back and a worker completes it."""
    project.start("howto/admin.md")
    project.shell(
        "from django_sqlq import enqueue\n"
        "enqueue('shop.send_order_confirmation', {'order_id': 1}, queue='emails',"
        " max_attempts=1)\n"
    )
    project.manage("sqlq_worker", "--burst")
    assert project.jobs() == [("shop.send_order_confirmation", "failed")]
    # The inline commands of "From a shell: sqlq_jobs".
    out = project.manage("sqlq_jobs", "list", "--status", "failed", "--queue", "emails")
    assert re.search(r"^1\s.*shop\.send_order_confirmation", out, re.MULTILINE), out
    out = project.manage("sqlq_jobs", "show", "1")
    assert "Order.DoesNotExist" in out or "DoesNotExist" in out, out
    out = project.shell(
        "from django.contrib.auth.models import User\n"
        "from django.test import Client\n"
        "from django.urls import reverse\n"
        "from shop.models import Order\n"
        "client = Client(HTTP_HOST='localhost')\n"
        "client.force_login(User.objects.create_superuser('ops', 'ops@example.com', 'pw'))\n"
        "index = client.get('/admin/').content.decode()\n"
        "print('index', 'Queue dashboard' in index, 'Failed jobs' in index)\n"
        "url = reverse('admin:django_sqlq_job_dashboard')\n"
        "print('dashboard', client.get(url).status_code)\n"
        "failed = client.get(reverse('admin:django_sqlq_failedjob_changelist'))\n"
        "print('failed', failed.status_code, 'DoesNotExist' in failed.content.decode())\n"
        "Order.objects.create(customer_email='ada@example.com', item='teapot')  # the fix\n"
        "response = client.post(\n"
        "    reverse('admin:django_sqlq_failedjob_changelist'),\n"
        "    {'action': 'retry_jobs', '_selected_action': ['1']},\n"
        "    follow=True,\n"
        ")\n"
        "print('retry', response.status_code)\n"
    )
    assert out.splitlines() == ["index True True", "dashboard 200", "failed 200 True", "retry 200"]
    assert project.jobs() == [("shop.send_order_confirmation", "pending")]
    out = project.manage("sqlq_worker", "--burst")
    assert "To: ada@example.com" in out
    assert project.jobs() == [("shop.send_order_confirmation", "completed")]


def test_tasks_backend(project: Project) -> None:
    """The page's @task enqueued from the shell, its worker command in --burst, the
    framework's log lines at -v 2, and the result read back."""
    page = "howto/tasks-backend.md"
    out = project.start(page)
    result_id, status = out.split()
    assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", result_id)
    assert status == "READY"
    project.manage("check", "--fail-level", "WARNING")
    [migrate, worker] = commands(page)
    assert migrate == ["migrate"]
    out = project.manage(*worker, "--burst", "-v", "2")
    assert re.search(r"path=shop\.tasks\.send_welcome state=SUCCESSFUL", out), out
    assert project.jobs() == [
        ("shop.tasks.send_welcome", "completed"),
        ("shop.tasks.ship_order", "completed"),
    ]
    out = project.shell(
        "from shop.tasks import send_welcome\n"
        f"result = send_welcome.get_result({result_id!r})\n"
        "print(result.status.name, result.return_value, result.attempts)\n"
    )
    assert out.split() == ["SUCCESSFUL", "sent", "1"]
    assert project.rows("SELECT max_attempts FROM sqlq_job ORDER BY id") == [(5,), (5,)]


TASKS_PY = (  # a project's tasks, as it had them with django-tasks-db
    "try:\n"
    "    from django.tasks import task\n"
    "except ImportError:\n"
    "    from django_tasks import task\n"
    "\n"
    "\n"
    "@task(queue_name='emails')\n"
    "def send_welcome(user_id):\n"
    "    return f'sent to {user_id}'\n"
)


def test_migrate_from_django_tasks_db(project: Project) -> None:
    """The page's settings, then its sqlq_worker line (with --batch, so that it ends) and
    its call_command(), each running the tasks enqueued before it. The blocks that need
    django-tasks-db installed are fragments: the suite does not install it."""
    page = "howto/migrate-from-django-tasks-db.md"
    project.write("shop/tasks.py", TASKS_PY)
    project.start(page, shell=False)
    enqueue = "from shop.tasks import send_welcome\nprint(send_welcome.enqueue(7).id)\n"
    first = project.shell(enqueue).strip()
    after = [args for args in commands(page) if args[0] == "sqlq_worker"]
    assert after == [
        ["sqlq_worker", "--queue-name", "default,emails", "--interval", "5", "--max-tasks", "1000"]
    ]
    project.manage(*after[0], "--batch")
    call_command = "\n".join(block.code for block in blocks(page) if block.kind == "shell")
    out = project.shell(  # one more task, the page's call_command(), the results
        "from shop.tasks import send_welcome\n"
        "second = send_welcome.enqueue(7).id\n"
        f"{call_command}\n"
        f"for id in [{first!r}, second]:\n"
        "    result = send_welcome.get_result(id)\n"
        "    print('result', result.status.name, result.return_value, result.worker_ids)\n"
    )
    lines = [line for line in out.splitlines() if line.startswith("result ")]
    assert len(lines) == 2, out
    assert lines[0].startswith("result SUCCESSFUL sent to 7 ["), out
    assert lines[1] == "result SUCCESSFUL sent to 7 ['w1']", out


def test_durable_steps(project: Project) -> None:
    """The page's order: its job waits for the payment (scheduled, attempt not counted); the
    page's webhook view emits the event; the next run pays, ships and sleeps 14 days; then
    the page's tests (the rest of the story, and the timeout) pass."""
    project.start("howto/durable-steps.md")  # the shell block enqueues the order's job
    project.manage("sqlq_worker", "--burst")
    assert project.rows("SELECT type, status, attempts FROM sqlq_job") == [
        ("shop.fulfil_order", "scheduled", 0)
    ]
    out = project.shell(
        "from django.test import RequestFactory\n"
        "from shop.webhooks import payment_webhook\n"
        "post = RequestFactory().post('/', {'order_id': 1, 'reference': 'pay_1'})\n"
        "print(payment_webhook(post).content.decode())\n"
        "print(payment_webhook(post).content.decode())\n"
    )
    assert out.split() == ['{"first":', "true}", '{"first":', "false}"]
    assert project.rows("SELECT status FROM sqlq_job") == [("pending",)]  # woken at once
    project.manage("sqlq_worker", "--burst")
    assert project.rows("SELECT status, attempts FROM sqlq_job") == [("scheduled", 0)]
    sql = "SELECT paid_at IS NOT NULL, shipped_at IS NOT NULL, payment_reference FROM shop_order"
    assert project.rows(sql) == [(True, True, "pay_1")]
    out = project.pytest()
    assert re.search(r"\b2 passed\b", out), out
