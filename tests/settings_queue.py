"""tests.settings plus a "queue" database holding the jobs table, for tests that run
``migrate`` and ``check`` in a subprocess against a fresh database (tests/enqueue/test_routers.py).

``SQLQ_TEST_QUEUE_DB``: the queue database's file (SQLite) or name (PostgreSQL).
``SQLQ_TEST_QUEUE_ROUTER=0``: no database router (what the system check must catch).
``SQLQ_TEST_QUEUE_OPTIONS``: the queue database's ``OPTIONS``, as JSON (an ``init_command``).
"""

from __future__ import annotations

import json
import os

from tests.settings import *  # noqa: F403
from tests.settings import DATABASES, ENGINE, SQLQ

if ENGINE == "sqlite":
    _queue = {"ENGINE": "django.db.backends.sqlite3", "NAME": os.environ["SQLQ_TEST_QUEUE_DB"]}
else:
    _queue = {**DATABASES["default"], "NAME": os.environ["SQLQ_TEST_QUEUE_DB"]}
    _queue.pop("TEST", None)

if os.environ.get("SQLQ_TEST_QUEUE_OPTIONS"):
    _queue["OPTIONS"] = json.loads(os.environ["SQLQ_TEST_QUEUE_OPTIONS"])

DATABASES = {**DATABASES, "queue": _queue}
SQLQ = {**SQLQ, "DATABASE": "queue"}
DATABASE_ROUTERS = (
    [] if os.environ.get("SQLQ_TEST_QUEUE_ROUTER") == "0" else ["django_sqlq.routers.QueueRouter"]
)
