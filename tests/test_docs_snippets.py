"""Docs that cannot rot: the Python blocks of the quick start and of some how-tos, run the way a
reader runs them, in a new project on the suite's engine.

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
What the test adds to a project, after the page's settings: the database (a new one on the
suite's engine), and ``shop`` in INSTALLED_APPS (the quick start says to add it).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import textwrap
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import django
import pytest

from tests.conftest import ROOT, pg_params

DOCS = ROOT / "docs"
PAGES = [
    "quickstart.md",
    "howto/testing.md",
    "howto/recurring-jobs.md",
    "howto/sqlite-to-postgresql.md",
    "howto/unique-jobs.md",
    "howto/chains.md",
    "howto/observability.md",
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
        done = subprocess.run(
            [sys.executable, *args],
            cwd=self.root,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        output = done.stdout + done.stderr
        assert done.returncode == 0, f"{args} failed:\n{output}"
        return output

    def manage(self, *args: str) -> str:
        return self.run("manage.py", *args)

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

    def start(self, page: str) -> None:
        """The page's files on the quick start's project, on the test database, migrated
        (makemigrations first when the page changes the models); then its shell blocks."""
        if page != "quickstart.md":  # the template has the quick start's files
            self.write_files(page)
        self.add_settings(
            "# The docs tests' database\n" + database_settings(self.engine, self.database)
        )
        if "shop/models.py" in self.written:
            self.manage("makemigrations", "shop", "-v", "0")
        self.manage("migrate", "-v", "0")
        self.run_shell_blocks(page)

    def rows(self, sql: str, *, sqlite_file: Path | None = None) -> list[tuple[Any, ...]]:
        """``sql``'s rows, read in this process from the test database (or a SQLite file)."""
        if sqlite_file is not None or self.engine == "sqlite":
            with closing(sqlite3.connect(sqlite_file or self.database)) as conn:
                return conn.execute(sql).fetchall()
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
    """Settings lines that point ``alias`` at the database ``name`` on the suite's engine."""
    if engine == "sqlite":
        entry = {"ENGINE": "django.db.backends.sqlite3", "NAME": name}
    else:
        params = pg_params()
        entry = {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": name,
            "HOST": params.get("host", ""),
            "PORT": str(params.get("port", "")),
            "USER": params.get("user", ""),
            "PASSWORD": params.get("password", ""),
        }
    return f"DATABASES[{alias!r}] = {entry!r}"


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


@pytest.fixture
def project(template: Path, tmp_path: Path, engine: str, fresh_database: str) -> Project:
    root = tmp_path / "site"
    shutil.copytree(template, root)
    return Project(root, reader_env(), engine=engine, database=fresh_database)


# -- the pages -------------------------------------------------------------------------------

pytestmark = pytest.mark.django_db(transaction=True)  # fresh_database, on the suite's server

PLACE_ORDER = (
    "from django.test import RequestFactory\n"
    "from shop.views import place_order\n"
    "request = RequestFactory().post('/', {{'email': '{email}', 'item': 'teapot'}})\n"
    "print(place_order(request).status_code)\n"
)


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
    else:
        sql = "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
    assert sorted(name for (name,) in project.rows(sql)) == [
        "django_migrations",
        "sqlq_job",
        "sqlq_job_blocker",
        "sqlq_maintenance",
        "sqlq_queue",
        "sqlq_schedule",
        "sqlq_schedule_tick",
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
