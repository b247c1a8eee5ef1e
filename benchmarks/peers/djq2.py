"""django-q2 with the Django ORM broker, worker `qcluster` (Q_CLUSTER['workers'] = N).

Started from the peer harness in shared/bench.
"""

from peers import DjangoPeer


class Peer(DjangoPeer):
    name = "djq2"
    has_bulk = True
    bulk_kind = "N async_task() in 1 txn (no bulk API)"

    def reset(self):
        self.clear("django_q_ormq", "django_q_task")

    def enqueue_one(self, i):
        from benchsite.djq2_tasks import noop
        from django.db import transaction
        from django_q.tasks import async_task

        with transaction.atomic():
            async_task(noop, i)

    def enqueue_bulk(self, n):
        from benchsite.djq2_tasks import noop
        from django.db import transaction
        from django_q.tasks import async_task

        with transaction.atomic():
            for i in range(n):
                async_task(noop, i)

    def enqueue_mark(self, key):
        from benchsite.djq2_tasks import mark
        from django.db import transaction
        from django_q.tasks import async_task

        with transaction.atomic():
            async_task(mark, key)

    def done_count(self):
        # A job leaves django_q_ormq when the monitor process acknowledges it, after it
        # saved the result (and pruned old successes down to save_limit=250).
        left = self.sql("SELECT count(*) FROM django_q_ormq")[0][0]
        return self.filled - left

    def worker_argvs(self, workers):  # noqa: ARG002 (the Peer interface)
        return [self.manage("qcluster")]  # one cluster; it forks `workers` workers
