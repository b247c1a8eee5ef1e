"""django-tasks-db: DatabaseBackend for Django's built-in django.tasks, worker `db_worker`.

Started from the peer harness in shared/bench.
"""

from peers import DjangoPeer

TABLE = "django_tasks_database_dbtaskresult"  # app label is django_tasks_database


class Peer(DjangoPeer):
    name = "dtdb"
    dbs = ("sqlite", "pg", "my")
    has_bulk = True
    bulk_kind = "N enqueue() in 1 txn (no bulk API)"

    def reset(self):
        self.clear(TABLE)

    def enqueue_one(self, i):
        from benchsite.dtdb_tasks import noop
        from django.db import transaction

        with transaction.atomic():
            noop.enqueue(i)

    def enqueue_bulk(self, n):
        from benchsite.dtdb_tasks import noop
        from django.db import transaction

        with transaction.atomic():
            for i in range(n):
                noop.enqueue(i)

    def enqueue_mark(self, key):
        from benchsite.dtdb_tasks import mark
        from django.db import transaction

        with transaction.atomic():
            mark.enqueue(key)

    def done_count(self):
        return self.sql(f"SELECT count(*) FROM {TABLE} WHERE status = 'SUCCESSFUL'")[0][0]

    def worker_argvs(self, workers):
        # Defaults (interval=1s) except: no autoreload, no random startup delay (it only
        # shifts start-up, which the drain timer excludes anyway).
        return [
            self.manage("db_worker", "--no-reload", "--no-startup-delay") for _ in range(workers)
        ]
