"""huey with SqliteHuey (no Django), worker `huey_consumer`.

Started from the peer harness in shared/bench.
"""

import os
import sys

import common

from peers import Peer as BasePeer


class Peer(BasePeer):
    name = "huey"
    dbs = ("sqlite",)

    def _huey(self):
        from benchsite.huey_app import huey

        return huey

    def setup(self):
        path = common.sqlite_path("huey")
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(path + suffix):
                os.unlink(path + suffix)
        _ = self._huey().storage  # creates the tables

    def reset(self):
        self._huey().flush()

    def enqueue_one(self, i):
        from benchsite.huey_app import noop

        noop(i)  # one INSERT in autocommit = its own transaction

    def enqueue_mark(self, key):
        from benchsite.huey_app import mark

        mark(key)

    def done_count(self):
        # huey DELETEs the row when it dequeues; with no result (None, store_none=False)
        # nothing else is written, so "done" = dequeued (at most `workers` in flight).
        return self.filled - self._huey().pending_count()

    def worker_argvs(self, workers):
        consumer = os.path.join(os.path.dirname(sys.executable), "huey_consumer")
        kind = "thread" if workers == 1 else "process"
        # defaults otherwise: -d 0.1 initial poll delay, backoff x1.15 up to -m 10 s
        return [[consumer, "benchsite.huey_app.huey", "-w", str(workers), "-k", kind]]
