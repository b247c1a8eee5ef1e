"""docs/quickstart.md, run as a newcomer would: every Python block of the page goes into a new
project made by ``startproject``/``startapp``, then the page's steps run in subprocesses
(migrate, the view enqueues, ``sqlq_worker --burst``), so the quick start cannot drift from
the code."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

QUICKSTART = ROOT / "docs" / "quickstart.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
PATH_COMMENT = re.compile(r"#\s*([\w/]+\.py)\b")


def python_blocks() -> list[tuple[str, str]]:
    """(path, code) of each Python block; the block's first line names its file."""
    blocks = []
    for language, code in FENCE.findall(QUICKSTART.read_text()):
        if language != "python":
            continue
        first = code.splitlines()[0]
        match = PATH_COMMENT.match(first)
        assert match, f"a Python block of the quick start does not name its file: {first!r}"
        blocks.append((match.group(1), code))
    return blocks


def test_every_python_block_names_its_file():
    paths = [path for path, _ in python_blocks()]
    assert paths == ["settings.py", "shop/models.py", "shop/jobs.py", "shop/views.py"]


def run(project: Path, *args: str, env: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, *args],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"{args} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.mark.django_db(transaction=True)
def test_the_quickstart_runs_in_a_new_project(tmp_path, engine, fresh_database):
    project = tmp_path / "site"
    project.mkdir()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "SQLQ_"))},
        "PYTHONPATH": str(ROOT),  # django_sqlq from this checkout
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    env.pop("PYTEST_CURRENT_TEST", None)
    run(project, "-m", "django", "startproject", "mysite", ".", env=env)
    run(project, "manage.py", "startapp", "shop", env=env)

    for path, code in python_blocks():
        if path == "settings.py":
            settings = project / "mysite" / "settings.py"
            # The page's settings go after what startproject wrote; "shop" is the guide's app.
            settings.write_text(
                settings.read_text() + "\nINSTALLED_APPS += ['shop']\n" + code + "\n"
            )
        else:
            (project / path).write_text(code)

    # What the test adds to the project: where mail goes, and the suite's database engine.
    settings = project / "mysite" / "settings.py"
    locmem = "django.core.mail.backends.locmem.EmailBackend"
    if "MAILERS" in settings.read_text():  # Django 6.1+
        extra = [f"MAILERS = {{'default': {{'BACKEND': {locmem!r}}}}}"]
    else:
        extra = [f"EMAIL_BACKEND = {locmem!r}"]
    if engine == "sqlite":
        extra.append(f"DATABASES['default']['NAME'] = {fresh_database!r}")
    else:
        from tests.conftest import pg_params

        params = pg_params()
        extra.append(
            "DATABASES = {'default': {'ENGINE': 'django.db.backends.postgresql', "
            f"'NAME': {fresh_database!r}, 'HOST': {params.get('host', '')!r}, "
            f"'PORT': {str(params.get('port', ''))!r}, 'USER': {params.get('user', '')!r}, "
            f"'PASSWORD': {params.get('password', '')!r}}}}}"
        )
    settings.write_text(settings.read_text() + "\n" + "\n".join(extra) + "\n")

    run(project, "manage.py", "check", "--fail-level", "WARNING", env=env)
    run(project, "manage.py", "makemigrations", "shop", "-v", "0", env=env)
    run(project, "manage.py", "migrate", "-v", "0", env=env)
    # Step 3: the view places an order and enqueues its confirmation.
    out = run(
        project,
        "manage.py",
        "shell",
        "-v",
        "0",
        "-c",
        "from django.test import RequestFactory\n"
        "from shop.views import place_order\n"
        "request = RequestFactory().post('/', {'email': 'ada@example.com', 'item': 'teapot'})\n"
        "response = place_order(request)\n"
        "print(response.status_code, response.content.decode())\n"
        "from django_sqlq.models import Job\n"
        "print([(j.type, j.queue, j.status) for j in Job.objects.all()])\n",
        env=env,
    )
    assert "201 Order #1 placed" in out
    assert "('shop.send_order_confirmation', 'emails', 'pending')" in out
    # Step 4: a worker (the page's queues include "emails").
    run(project, "manage.py", "sqlq_worker", "--burst", "--queue", "emails", env=env)
    out = run(
        project,
        "manage.py",
        "shell",
        "-v",
        "0",
        "-c",
        "from django_sqlq.models import Job\n"
        "from shop.models import Order\n"
        "job = Job.objects.get()\n"
        "print(job.status, job.result, job.last_error)\n"
        "print(Order.objects.get().confirmation_sent_at is not None)\n",
        env=env,
    )
    assert out.splitlines() == ["completed {'sent_to': 'ada@example.com'} ", "True"]
