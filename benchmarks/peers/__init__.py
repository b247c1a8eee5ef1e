"""Per-peer adapters. Each exposes the same small interface used by peer_cli.py:
setup(), reset(), enqueue_one(i), enqueue_bulk(n) (if has_bulk), fill(n),
enqueue_mark(key), done_count(), worker_argvs(workers), worker_env(workers).

Started from the peer harness in shared/bench.
"""

import os
import sys

from common import HERE


class Peer:
    dbs = ("sqlite", "pg")
    has_bulk = False
    bulk_kind = "n/a"

    def __init__(self, db):
        if db not in self.dbs:
            raise SystemExit(f"{self.name} does not support {db}")
        self.db = db
        self.filled = 0

    def fill(self, n):
        if self.has_bulk:
            self.enqueue_bulk(n)
        else:
            for i in range(n):
                self.enqueue_one(i)
        self.filled = n

    def worker_env(self, workers):  # noqa: ARG002 (subclasses use it)
        return {}


class DjangoPeer(Peer):
    _ready = False

    def django(self):
        if not DjangoPeer._ready:
            os.environ["BENCH_PEER"] = self.name
            os.environ["BENCH_DB"] = self.db
            os.environ["DJANGO_SETTINGS_MODULE"] = "benchsite.settings"
            import django

            django.setup()
            DjangoPeer._ready = True

    def worker_env(self, workers):
        return {
            "BENCH_PEER": self.name,
            "BENCH_DB": self.db,
            "BENCH_WORKERS": str(workers),
            "DJANGO_SETTINGS_MODULE": "benchsite.settings",
        }

    def manage(self, *args):
        return [sys.executable, os.path.join(HERE, "manage.py"), *args]

    def setup(self):
        import common

        if self.db == "sqlite":
            path = common.sqlite_path(self.name)
            for suffix in ("", "-wal", "-shm"):
                if os.path.exists(path + suffix):
                    os.unlink(path + suffix)
        elif self.db == "my":
            common.drop_my_db(common.my_dbname(self.name))
            common.ensure_my_db(common.my_dbname(self.name))
        else:
            common.drop_pg_db(common.pg_dbname(self.name))
            common.ensure_pg_db(common.pg_dbname(self.name))
        self.django()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)

    def sql(self, query, params=()):
        self.django()
        from django.db import connection

        with connection.cursor() as cur:
            cur.execute(query, params)
            try:
                return cur.fetchall()
            except Exception:
                return None

    def clear(self, *tables):
        if self.db == "pg":
            self.sql("TRUNCATE " + ", ".join(tables) + " RESTART IDENTITY CASCADE")
        elif self.db == "my":
            # InnoDB refuses to TRUNCATE a table a foreign key points at, checks on.
            self.sql("SET FOREIGN_KEY_CHECKS = 0")
            try:
                for t in tables:
                    self.sql(f"TRUNCATE TABLE {t}")
            finally:
                self.sql("SET FOREIGN_KEY_CHECKS = 1")
        else:
            for t in tables:
                self.sql(f"DELETE FROM {t}")
