"""SqliteHuey instance (not Django). WAL is huey's default; synchronous=NORMAL is set
to match the other SQLite peers (huey itself only offers FULL (default) or OFF).

Started from the peer harness in shared/bench.
"""

import os
import sys

from huey import SqliteHuey
from huey.storage import SqliteStorage

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import common

from benchsite.mark import mark_start


class NormalSyncSqliteStorage(SqliteStorage):
    def _create_connection(self):
        conn = super()._create_connection()
        if os.environ.get("BENCH_HUEY_SYNC", "NORMAL") == "NORMAL":
            conn.execute("pragma synchronous=1")
        return conn


huey = SqliteHuey(
    "bench",
    filename=common.sqlite_path("huey"),
    storage_class=NormalSyncSqliteStorage,
)


@huey.task()
def noop(i):  # noqa: ARG001 (a task)
    return None


@huey.task()
def mark(key):
    mark_start(key)
