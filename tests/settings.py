"""One settings module for the whole suite. ``SQLQ_TEST_ENGINE`` picks the engine:
``sqlite`` (a file in WAL mode, the default), ``postgresql`` or ``mysql`` (MariaDB)."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

ENGINE = os.environ.get("SQLQ_TEST_ENGINE", "sqlite")
BASE_DIR = Path(__file__).resolve().parent
# Each test run (and each xdist worker) gets its own directory for SQLite files.
RUN_DIR = Path(os.environ.setdefault("SQLQ_TEST_RUN_DIR", tempfile.mkdtemp(prefix="sqlq-tests-")))

SECRET_KEY = "tests-only-not-secret"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
if os.environ.get("SQLQ_TEST_LOCAL_TIME_ZONE"):
    # A project on naive local times (USE_TZ = False, a TIME_ZONE other than UTC), for the
    # worker processes of the tests that check such projects (tests/faults/test_handlers.py).
    USE_TZ = False
    TIME_ZONE = os.environ["SQLQ_TEST_LOCAL_TIME_ZONE"]
ALLOWED_HOSTS = ["*"]

if ENGINE == "postgresql":
    _pg = {
        "ENGINE": "django.db.backends.postgresql",
        "HOST": os.environ.get("SQLQ_TEST_PG_HOST", "127.0.0.1"),
        "PORT": os.environ.get("SQLQ_TEST_PG_PORT", "5432"),
        "USER": os.environ.get("SQLQ_TEST_PG_USER", "root"),
        "PASSWORD": os.environ.get("SQLQ_TEST_PG_PASSWORD", ""),
    }
    _db = os.environ.get("SQLQ_TEST_PG_DB", "test")
    # A name per test run, so that runs in parallel (two developers, two matrix entries)
    # never drop each other's databases. Worker subprocesses inherit it through the env.
    _run = os.environ.setdefault("SQLQ_TEST_RUN_ID", f"{os.getpid()}")
    DATABASES: dict[str, dict[str, Any]] = {
        "default": {**_pg, "NAME": _db, "TEST": {"NAME": f"test_sqlq_{_run}"}},
        "other": {**_pg, "NAME": _db, "TEST": {"NAME": f"test_sqlq_other_{_run}"}},
    }
elif ENGINE == "mysql":
    _my = {
        "ENGINE": "django.db.backends.mysql",
        "HOST": os.environ.get("SQLQ_TEST_MYSQL_HOST", "127.0.0.1"),
        "PORT": os.environ.get("SQLQ_TEST_MYSQL_PORT", "3306"),
        "USER": os.environ.get("SQLQ_TEST_MYSQL_USER", "root"),
        "PASSWORD": os.environ.get("SQLQ_TEST_MYSQL_PASSWORD", ""),
        "OPTIONS": {"charset": "utf8mb4"},
    }
    _db = os.environ.get("SQLQ_TEST_MYSQL_DB", "test")
    _run = os.environ.setdefault("SQLQ_TEST_RUN_ID", f"{os.getpid()}")
    DATABASES = {
        "default": {**_my, "NAME": _db, "TEST": {"NAME": f"test_sqlq_{_run}"}},
        "other": {**_my, "NAME": _db, "TEST": {"NAME": f"test_sqlq_other_{_run}"}},
    }
elif ENGINE == "sqlite":
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": str(RUN_DIR / "default.sqlite3"),
            "TEST": {"NAME": str(RUN_DIR / "test_default.sqlite3")},
        },
        "other": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": str(RUN_DIR / "other.sqlite3"),
            "TEST": {"NAME": str(RUN_DIR / "test_other.sqlite3")},
        },
    }
else:  # pragma: no cover
    raise RuntimeError(f"SQLQ_TEST_ENGINE must be sqlite, postgresql or mysql, not {ENGINE!r}")

if os.environ.get("SQLQ_TEST_USE_TEST_DB"):
    # Worker processes started by the tests talk to the databases the test run created.
    for _alias in DATABASES.values():
        _alias["NAME"] = _alias["TEST"]["NAME"]  # type: ignore[index]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_sqlq",
    "tests.testapp",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]

ROOT_URLCONF = "tests.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
STATIC_URL = "/static/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

SQLQ = {
    # Worker processes of a test that serves more queues get them as JSON.
    "QUEUES": json.loads(os.environ.get("SQLQ_TEST_QUEUES", '["default", "emails", "reports"]')),
    "LEASE_SECONDS": float(os.environ.get("SQLQ_TEST_LEASE_SECONDS", "30")),
    "POLL_INTERVAL": 0.05,
    # Worker processes of tests that need a backoff set SQLQ_TEST_RETRY_BACKOFF_BASE.
    "RETRY_BACKOFF_BASE": float(os.environ.get("SQLQ_TEST_RETRY_BACKOFF_BASE", "0")),
    # Worker processes of the queue-limit tests get theirs as JSON
    # (tests/control/test_queue_control.py).
    "QUEUE_LIMITS": json.loads(os.environ.get("SQLQ_TEST_QUEUE_LIMITS", "{}")),
    # An idle worker checks for other connections' commits every 20 ms here (SQLite's own
    # pace is 2 ms, MariaDB's 10 ms): the suite starts hundreds of workers that mostly wait,
    # on 2 cores. SQLQ_TEST_WAKE_CHECK_INTERVAL="" gives the engine's own
    # (tests/worker/test_processes.py runs both).
    "WAKE_CHECK_INTERVAL": float(os.environ.get("SQLQ_TEST_WAKE_CHECK_INTERVAL", "0.02") or 0)
    or None,
}
# Worker processes of the retention tests prune often, with their own KEEP_FINISHED (JSON).
if os.environ.get("SQLQ_TEST_KEEP_FINISHED"):
    SQLQ["KEEP_FINISHED"] = json.loads(os.environ["SQLQ_TEST_KEEP_FINISHED"])
if os.environ.get("SQLQ_TEST_PRUNE_INTERVAL"):
    SQLQ["PRUNE_INTERVAL"] = float(os.environ["SQLQ_TEST_PRUNE_INTERVAL"])

if os.environ.get("SQLQ_TEST_SCHEDULE"):
    # Worker processes of tests/schedules/test_schedules.py: the recurring jobs they run.
    import json

    SQLQ["SCHEDULE"] = json.loads(os.environ["SQLQ_TEST_SCHEDULE"])

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"django_sqlq": {"handlers": ["console"], "level": "INFO"}},
}

DATABASE_ROUTERS = ["tests.routers.OtherDatabaseRouter"]

# Django's tasks framework (django.tasks on Django 6+, the django_tasks backport on 5.2):
# @task functions in tests/testapp/tasks.py run on django_sqlq. QUEUES has Django's meaning
# (the queue names valid for tasks; default ["default"]), independent of SQLQ["QUEUES"].
TASKS = {
    "default": {
        "BACKEND": "django_sqlq.backend.SQLQBackend",
        "QUEUES": ["default", "emails", "reports"],
    }
}

# tests/worker/test_pooler.py: worker processes whose "default" alias goes through a PgBouncer
# the test started (transaction mode), with a "direct" alias beside it, used for LISTEN
# when SQLQ_TEST_LISTEN_DIRECT is set.
if ENGINE == "postgresql" and os.environ.get("SQLQ_TEST_PGBOUNCER_PORT"):
    DATABASES["direct"] = dict(DATABASES["default"])
    DATABASES["default"] = {
        **DATABASES["default"],
        "PORT": os.environ["SQLQ_TEST_PGBOUNCER_PORT"],
        "DISABLE_SERVER_SIDE_CURSORS": True,
    }
    if os.environ.get("SQLQ_TEST_LISTEN_DIRECT"):
        SQLQ["LISTEN_DATABASE"] = "direct"

# The tests' users need no strong hash: PBKDF2 (Django 6.1: 1,500,000 iterations) spends
# about 0.6 s of CPU on each user a test creates or logs in, hundreds per run; MD5 next to
# nothing (Django's own advice for a test run's settings).
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
