"""procrastinate through its Django contrib app (PostgreSQL only).

Started from the peer harness in shared/bench.
"""

from peers import DjangoPeer


class Peer(DjangoPeer):
    name = "procrastinate"
    dbs = ("pg",)
    has_bulk = True
    bulk_kind = "batch_defer() (real bulk API), 1000/call"

    def reset(self):
        self.clear("procrastinate_jobs", "procrastinate_events")

    def enqueue_one(self, i):
        from benchsite.procr_tasks import noop
        from django.db import transaction

        with transaction.atomic():
            noop.defer(i=i)

    def enqueue_bulk(self, n):
        from benchsite.procr_tasks import noop
        from django.db import transaction

        for start in range(0, n, 1000):
            with transaction.atomic():
                noop.batch_defer(*({"i": i} for i in range(start, min(n, start + 1000))))

    def enqueue_mark(self, key):
        from benchsite.procr_tasks import mark
        from django.db import transaction

        with transaction.atomic():
            mark.defer(key=key)

    def done_count(self):
        return self.sql("SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'")[0][0]

    def worker_argvs(self, workers):
        # N processes with concurrency=1 each (defaults otherwise: LISTEN/NOTIFY on,
        # fetch_job_polling_interval=5s).
        return [
            self.manage("procrastinate", "worker", "--concurrency", "1") for _ in range(workers)
        ]
