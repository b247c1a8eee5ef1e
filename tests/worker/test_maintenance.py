"""The worker's maintenance duties (django_sqlq.worker.maintenance), one tick at a time."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest

from django_sqlq import enqueue
from django_sqlq.db import ops_for
from django_sqlq.models import Job, JobStatus, WorkerProcess
from django_sqlq.worker import Worker
from django_sqlq.worker.context import HeldJobs
from django_sqlq.worker.maintenance import PeriodicService, Tidier
from django_sqlq.worker.maintenance import tidier as tidier_module

T0 = datetime(2030, 1, 1, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def test_held_jobs_are_added_and_discarded():
    held = HeldJobs()
    held.add([3, 1])
    held.add(iter([2]))
    held.discard([3, 99])
    assert held.sorted() == [1, 2]


def test_a_periodic_service_ticks_in_its_thread_until_stopped():
    ticked = threading.Event()
    threads = []

    class Ticker(PeriodicService):
        name = "ticker"
        interval = 0.01

        def tick(self) -> None:
            threads.append(threading.current_thread().name)
            ticked.set()

    service = Ticker()
    service.start()
    assert ticked.wait(10)
    service.stop()
    service.join(timeout=10)
    assert not service.running
    assert set(threads) == {"sqlq-ticker"}


def test_the_tidier_starts_after_tidy_every_claims_and_not_while_too_soon(monkeypatch):
    tidier = Tidier(Worker().context)
    tidier.off = False  # as on PostgreSQL
    started = []
    monkeypatch.setattr(tidier, "start", lambda: started.append(True))
    monkeypatch.setattr(tidier_module, "TIDY_EVERY", 10)
    tidier.claimed(9)
    assert started == []
    tidier.claimed(1)
    assert started == [True]
    assert tidier.since == 0
    tidier.after = float("inf")  # the last VACUUM ended too recently
    tidier.claimed(10)
    assert started == [True]
    assert tidier.since == 10


def test_a_quiet_queue_is_tidied_once_after_enough_claims(monkeypatch):
    tidier = Tidier(Worker().context)
    tidier.off = False  # as on PostgreSQL
    started = []
    monkeypatch.setattr(tidier, "start", lambda: started.append(True))
    tidier.claimed(tidier_module.QUIET_MIN - 1)
    tidier.quiet(60.0, 1.0)  # too few claims since the last VACUUM
    assert started == []
    tidier.claimed(1)
    tidier.quiet(tidier_module.QUIET_POLLS * 1.0 - 0.5, 1.0)  # a lull, not a quiet queue
    assert started == []
    tidier.quiet(tidier_module.QUIET_POLLS * 1.0, 1.0)
    assert started == [True]
    assert tidier.since == 0
    tidier.quiet(3600.0, 1.0)  # still quiet: nothing claimed since, nothing to tidy
    assert started == [True]


def test_the_tidier_never_starts_where_nothing_needs_it(monkeypatch):
    tidier = Tidier(Worker().context)
    tidier.off = True  # as on SQLite
    monkeypatch.setattr(tidier_module, "TIDY_EVERY", 1)
    monkeypatch.setattr(tidier, "start", lambda: pytest.fail("started"))
    tidier.claimed(100)


@pytest.mark.django_db(transaction=True)
def test_a_heartbeat_renews_the_held_leases_and_the_worker_row():
    clock = Clock()
    worker = Worker(worker_id="w-1", lease_seconds=30, clock=clock)
    WorkerProcess.objects.register("w-1", queues=["default"], concurrency=1)
    held, other = enqueue("tests.noop"), enqueue("tests.noop")
    claimed = ops_for("default").claim(
        queues=None, worker_id="w-1", limit=2, lease_seconds=30, now=T0
    )
    assert {job.id for job in claimed} == {held.id, other.id}
    worker.held.add([held.id])  # the other one is no longer tracked: it is left to expire
    worker.counts.done = 4
    clock.now = T0 + timedelta(seconds=20)
    worker.heartbeat.tick()
    held.refresh_from_db()
    other.refresh_from_db()
    assert held.lease_expires_at == T0 + timedelta(seconds=50)
    assert other.lease_expires_at == T0 + timedelta(seconds=30)
    assert WorkerProcess.objects.get(worker_id="w-1").jobs_done == 4


@pytest.mark.django_db(transaction=True)
def test_the_reaper_returns_expired_leases_and_wakes_the_worker():
    clock = Clock()
    worker = Worker(worker_id="w-2", lease_seconds=30, clock=clock)
    job = enqueue("tests.noop")
    ops_for("default").claim(queues=None, worker_id="dead", limit=1, lease_seconds=30, now=T0)
    worker.reaper.reap()  # not expired yet
    assert Job.objects.get(id=job.id).status == JobStatus.PROCESSING
    assert not worker.wakeup.is_set()
    clock.now = T0 + timedelta(seconds=31)
    worker.reaper.reap()
    assert Job.objects.get(id=job.id).status == JobStatus.PENDING
    assert worker.wakeup.is_set()
