"""django_sqlq itself: enqueue()/bulk_enqueue(), worker `manage.py sqlq_worker`.

Written to the interface of the shared/bench peer adapters (see peers/dtdb.py).
"""

import os

from peers import DjangoPeer


class Peer(DjangoPeer):
    name = "sqlq"
    dbs = ("sqlite", "pg", "my")  # my: MariaDB, revisions with django_sqlq/db/mysql.py
    has_bulk = True
    bulk_kind = "bulk_enqueue() (one INSERT ... SELECT per 5,000 jobs)"

    def __init__(self, db, concurrency=1, verbosity=None):
        super().__init__(db)
        self.concurrency = concurrency
        # BENCH_WORKER_VERBOSITY=0 runs the workers at -v 0: how an old revision (--rev) whose
        # default printed a line per job is measured against today's default.
        self.verbosity = (
            verbosity if verbosity is not None else os.environ.get("BENCH_WORKER_VERBOSITY")
        )

    def _table(self):
        self.django()
        from django_sqlq import models

        tables = [models.Job._meta.db_table, models.WorkerProcess._meta.db_table]
        # Durable steps' tables (revisions since issue 25): a job's steps are keyed by its id,
        # which RESTART IDENTITY gives out again.
        for name in ("JobStep", "Event"):
            if hasattr(models, name):
                tables.append(getattr(models, name)._meta.db_table)
        return tuple(tables)

    def reset(self):
        self.clear(*self._table())

    def enqueue_one(self, i):
        # A view that enqueues one job in its request's transaction.
        from django.db import transaction

        from django_sqlq import enqueue

        with transaction.atomic():
            enqueue("noop", {"i": i})

    def enqueue_bulk(self, n):
        from django_sqlq import bulk_enqueue

        bulk_enqueue("noop", [{"i": i} for i in range(n)])

    def enqueue_mark(self, key):
        from django.db import transaction

        from django_sqlq import enqueue

        with transaction.atomic():
            enqueue("mark", {"key": key})

    def done_count(self):
        table = self._table()[0]
        return self.sql(f"SELECT count(*) FROM {table} WHERE status = 'completed'")[0][0]

    def completion_span(self):
        """(completed jobs, seconds from the first completed_at to the last), by the
        database's own clock: a drain rate free of the monitor's 20 ms polling tick."""
        table = self._table()[0]
        if self.db == "pg":
            sql = (
                "SELECT count(*), EXTRACT(EPOCH FROM max(completed_at) - min(completed_at)) "
                f"FROM {table} WHERE status = 'completed'"
            )
        elif self.db == "my":
            sql = (
                "SELECT count(*), "
                "TIMESTAMPDIFF(MICROSECOND, min(completed_at), max(completed_at)) / 1000000.0 "
                f"FROM {table} WHERE status = 'completed'"
            )
        else:
            sql = (
                "SELECT count(*), (julianday(max(completed_at)) - julianday(min(completed_at)))"
                f" * 86400.0 FROM {table} WHERE status = 'completed'"
            )
        count, span = self.sql(sql)[0]
        return count, float(span or 0.0)

    def worker_argvs(self, workers):
        # At the default verbosity, as users run it (worker_shapes.py compares it with -v 0).
        # N processes of --concurrency C threads each.
        argv = self.manage("sqlq_worker", "--concurrency", str(self.concurrency))
        if self.verbosity is not None:
            argv += ["-v", str(self.verbosity)]
        return [argv for _ in range(workers)]
