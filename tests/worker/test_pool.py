"""The inbox and the runner pool (django_sqlq.worker.inbox, .pool)."""

from __future__ import annotations

import queue
from collections import deque

import pytest

from django_sqlq import enqueue, registry
from django_sqlq.db import ops_for
from django_sqlq.models import Job, JobStatus
from django_sqlq.worker import Worker
from django_sqlq.worker.inbox import STOP, Inbox


def test_the_inbox_hands_items_over_in_order():
    inbox = Inbox()
    inbox.put_many(["a", "b"])
    inbox.put("c")
    assert len(inbox) == 3
    assert [inbox.get(), inbox.get_nowait(), inbox.get()] == ["a", "b", "c"]
    with pytest.raises(queue.Empty):
        inbox.get_nowait()
    assert inbox.oldest() is None


def test_give_back_takes_only_the_items_put_in_before_the_cutoff():
    inbox = Inbox()
    inbox._items = deque([(1.0, "old-1"), (2.0, "old-2"), (5.0, "new")])
    assert inbox.oldest() == 1.0
    assert inbox.take_older_than(3.0) == ["old-1", "old-2"]
    assert inbox.oldest() == 5.0
    assert inbox.get() == "new"


def test_give_back_stops_at_a_stop_marker():
    inbox = Inbox()
    inbox.put_many(["a", STOP, "b"])
    assert inbox.take_older_than(float("inf")) == ["a"]
    assert inbox.get() is STOP


@pytest.mark.django_db(transaction=True)
def test_a_runner_pool_runs_the_jobs_put_in_its_inbox_and_stops():
    registry.autodiscover()  # as Worker.run does
    worker = Worker(worker_id="w-pool", concurrency=2)
    jobs = [enqueue("tests.add", {"a": i, "b": 1}) for i in range(3)]
    claimed = ops_for("default").claim(queues=None, worker_id="w-pool", limit=3, lease_seconds=60)
    pool = worker.pool
    pool.busy = len(claimed)
    pool.inbox.put_many(claimed)
    pool.start()
    pool.stop()  # the runners finish what is in the inbox before the STOP markers
    assert pool.busy == 0
    assert pool.running == {}
    assert len(worker.completer.pending) == 3
    worker.completer.flush(force=True)
    results = dict(Job.objects.values_list("id", "result"))
    assert [results[job.id] for job in jobs] == [1, 2, 3]
    assert set(Job.objects.values_list("status", flat=True)) == {JobStatus.COMPLETED}
