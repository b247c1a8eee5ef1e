"""One Django settings module for django_sqlq and the Django-based peers, chosen by
environment: BENCH_PEER (sqlq | sqlq_claim | dtdb | djq2 | procrastinate), BENCH_DB (sqlite | pg |
my, MariaDB).

Started from the peer harness in shared/bench (benchsite/settings.py).
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import common

PEER = os.environ.get("BENCH_PEER", "dtdb")
DB = os.environ.get("BENCH_DB", "sqlite")

SECRET_KEY = "bench-not-secret"
DEBUG = False
USE_TZ = True
ALLOWED_HOSTS = ["*"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
INSTALLED_APPS = ["benchsite"]
# Persistent connections, as a production deployment would set; with the default (0)
# workers that call close_old_connections() reconnect on every loop.
CONN_MAX_AGE = int(os.environ.get("BENCH_CONN_MAX_AGE", "60"))

if DB == "sqlite":
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": common.sqlite_path(PEER),
            "CONN_MAX_AGE": CONN_MAX_AGE,
            "OPTIONS": {
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL",
                "transaction_mode": "IMMEDIATE",
                "timeout": 20,
            },
        }
    }
elif DB == "my":
    # MariaDB through Django's mysql backend (mysqlclient), as docs/reference/mariadb.md
    # sets it up: utf8mb4, the backend's default isolation (READ COMMITTED).
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.mysql",
            "NAME": common.my_dbname(PEER),
            "USER": common.MY_USER,
            "PASSWORD": common.MY_PASSWORD,
            "HOST": common.MY_HOST,
            "PORT": common.MY_PORT,
            "CONN_MAX_AGE": CONN_MAX_AGE,
            "OPTIONS": {"charset": "utf8mb4"},
        }
    }
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": common.pg_dbname(PEER),
            "USER": common.PG_USER,
            "HOST": common.PG_HOST,
            "PORT": common.PG_PORT,
            "CONN_MAX_AGE": CONN_MAX_AGE,
        }
    }
    if os.environ.get("BENCH_PGBOUNCER_PORT"):
        # worker_shapes.py: everything through a PgBouncer in transaction mode, and a
        # "direct" alias for BENCH_SQLQ_LISTEN_DATABASE='"direct"'.
        DATABASES["direct"] = dict(DATABASES["default"])
        DATABASES["default"] = {
            **DATABASES["default"],
            "PORT": os.environ["BENCH_PGBOUNCER_PORT"],
            "DISABLE_SERVER_SIDE_CURSORS": True,
        }

if PEER.startswith("sqlq"):
    # django_sqlq at its defaults (POLL_INTERVAL, LEASE_SECONDS, SQLITE_PRAGMAS...), so the
    # figures are what a project gets out of the box; BENCH_SQLQ_<KEY>=<JSON value> sets one
    # key for a one-off run (e.g. BENCH_SQLQ_POLL_INTERVAL=0.01).
    import json

    INSTALLED_APPS.append("django_sqlq")
    SQLQ = {"QUEUES": ["default"]}
    for _name, _value in os.environ.items():
        if _name.startswith("BENCH_SQLQ_"):
            SQLQ[_name.removeprefix("BENCH_SQLQ_")] = json.loads(_value)
elif PEER == "dtdb":
    INSTALLED_APPS.append("django_tasks_db")
    TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}
elif PEER == "djq2":
    INSTALLED_APPS.append("django_q")
    Q_CLUSTER = {
        "name": "bench",
        "orm": "default",
        "workers": int(os.environ.get("BENCH_WORKERS", "1")),
        "timeout": 30,  # documented recommendation: timeout < retry (60)
        # everything else at django-q2 defaults (poll=0.2, bulk=1, save_limit=250,
        # retry=60, timeout=None, queue_limit=workers**2)
    }
elif PEER == "procrastinate":
    INSTALLED_APPS.append("procrastinate.contrib.django")
    PROCRASTINATE_AUTODISCOVER_MODULE_NAME = "procr_tasks"
    PROCRASTINATE_IMPORT_PATHS = ["benchsite.procr_tasks"]

if os.environ.get("BENCH_SQL_LOG"):
    # Used by the `trace` step to print the SQL a worker issues (Django only logs
    # queries with DEBUG on).
    DEBUG = True
    LOGGING = {
        "version": 1,
        "handlers": {"console": {"class": "logging.StreamHandler"}},
        "loggers": {"django.db.backends": {"handlers": ["console"], "level": "DEBUG"}},
    }
