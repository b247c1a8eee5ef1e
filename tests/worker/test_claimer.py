"""The claimer (django_sqlq.worker.claimer): how many jobs a claim asks for, prefetch,
giving back jobs that waited too long, how long the loop sleeps; and staging. No threads:
the test sets the pool's state and calls what the main loop calls."""

from __future__ import annotations

import time
from collections import deque
from datetime import UTC, datetime, timedelta

import pytest

from django_sqlq import enqueue
from django_sqlq.db import ops_for
from django_sqlq.models import Job, JobStatus
from django_sqlq.worker import Worker
from django_sqlq.worker.claimer import MAX_PREFETCH, PREFETCH_HOLD, PREFETCH_WINDOW
from django_sqlq.worker.completer import FLUSH_INTERVAL
from tests.conftest import held_elsewhere, wait_for


def in_hand(worker: Worker, *, running: int, waiting: int) -> None:
    worker.pool.busy = running + waiting
    worker.pool.inbox.put_many([object()] * waiting)


def test_a_claim_asks_for_one_job_per_free_thread_until_the_pace_is_known():
    worker = Worker(concurrency=4)
    assert worker.claimer.limit() == 4
    assert worker.pool.refill_at == 2  # refilled at half capacity
    in_hand(worker, running=3, waiting=0)
    assert worker.claimer.limit() == 1  # a thread with no job waiting gets a claim


def test_fast_jobs_are_prefetched_up_to_the_prefetch_window():
    worker = Worker(concurrency=4)
    worker.pool.avg_runtime = 0.001
    prefetch = int(PREFETCH_WINDOW / 0.001)
    assert worker.claimer.prefetch() == prefetch
    assert worker.claimer.limit() == 4 + prefetch
    worker.pool.avg_runtime = 1e-9
    assert worker.claimer.prefetch() == MAX_PREFETCH
    worker.pool.avg_runtime = 10.0
    assert worker.claimer.prefetch() == 0  # slow jobs would wait in line


def test_no_refill_while_every_free_thread_has_a_job_waiting():
    worker = Worker(concurrency=4)
    worker.pool.avg_runtime = 0.001  # capacity 4 + 50
    in_hand(worker, running=2, waiting=38)  # 14 free, under half of 54
    assert worker.claimer.limit() == 0
    worker.pool.inbox = type(worker.pool.inbox)()
    in_hand(worker, running=2, waiting=18)  # 34 free: refill
    assert worker.claimer.limit() == 34


def test_a_claim_never_goes_past_max_jobs():
    worker = Worker(concurrency=4, max_jobs=5)
    worker.claimer.jobs_claimed = 3
    assert worker.claimer.limit() == 2
    worker.claimer.jobs_claimed = 5
    assert worker.claimer.limit() == 0


def test_no_prefetch_during_the_cooldown_after_a_give_back():
    worker = Worker(concurrency=2)
    worker.pool.avg_runtime = 0.001
    worker.claimer.no_prefetch_until = time.monotonic() + 60
    assert worker.claimer.limit() == 2


def test_the_loop_sleeps_until_the_next_thing_is_due():
    worker = Worker(poll_interval=5)
    claimer = worker.claimer
    worker.staging.due_at = float("inf")
    now = time.monotonic()
    assert 4 < claimer.wait_time(now, longest=60) <= 5  # the next poll
    assert claimer.wait_time(now, longest=0.5) == 0.5  # the change watch's interval
    worker.staging.due_at = now + 1  # a scheduled job
    assert claimer.wait_time(now, longest=60) <= 1
    worker.completer.pending = [object()]  # type: ignore[list-item]
    worker.completer.since = now
    assert claimer.wait_time(now, longest=60) <= FLUSH_INTERVAL


def test_with_every_thread_busy_the_loop_does_not_spin_once_its_poll_is_overdue():
    """A job longer than the poll interval holds the only thread: the poll, counted from
    the last claim, is overdue, but no claim can take a job. The loop sleeps until a runner
    wakes it (at most ``longest``), not 0 s turn after turn (a core burnt for as long as
    the job ran, at the default POLL_INTERVAL of 1 s)."""
    worker = Worker(poll_interval=1)
    worker.staging.due_at = float("inf")
    long_ago = time.monotonic() - 10
    assert worker.claimer.wait_time(long_ago, longest=60) == 0  # with room: claim now
    assert worker.claimer.wait_time(long_ago, longest=60, room=False) > 0.5


def test_a_job_waiting_for_a_thread_is_given_back_by_its_hold_time():
    worker = Worker(poll_interval=5)
    worker.staging.due_at = float("inf")
    worker.pool.inbox.put(object())
    assert worker.claimer.wait_time(time.monotonic(), longest=60) <= PREFETCH_HOLD


@pytest.mark.django_db(transaction=True)
def test_jobs_that_waited_past_the_hold_are_given_back_and_prefetch_pauses():
    worker = Worker(worker_id="w-claimer")
    enqueue("tests.noop")
    enqueue("tests.noop")
    old, fresh = ops_for("default").claim(
        queues=None, worker_id="w-claimer", limit=2, lease_seconds=60
    )
    worker.held.add([old.id, fresh.id])
    worker.claimer.jobs_claimed = worker.pool.busy = 2
    now = time.monotonic()
    worker.pool.inbox._items = deque([(now - PREFETCH_HOLD - 1, old), (now, fresh)])
    worker.claimer.give_back_waiting()
    assert Job.objects.get(id=old.id).status == JobStatus.PENDING
    assert Job.objects.get(id=fresh.id).status == JobStatus.PROCESSING
    assert worker.pool.inbox.get_nowait() is fresh
    assert (worker.pool.busy, worker.claimer.jobs_claimed) == (1, 1)
    assert worker.held.sorted() == [fresh.id]
    assert worker.claimer.no_prefetch_until > now


@pytest.mark.django_db(transaction=True)
def test_on_stop_the_unstarted_jobs_are_given_back():
    worker = Worker(worker_id="w-stop")
    job = enqueue("tests.noop")
    claimed = ops_for("default").claim(queues=None, worker_id="w-stop", limit=1, lease_seconds=60)
    worker.held.add([job.id])
    worker.pool.busy = 1
    worker.pool.inbox.put_many(claimed)
    worker.pool.release_unstarted()
    row = Job.objects.get(id=job.id)
    assert (row.status, row.attempts) == (JobStatus.PENDING, 0)  # the attempt is not counted
    assert worker.pool.busy == 0
    assert worker.held.sorted() == []


@pytest.mark.django_db(transaction=True)
def test_staging_moves_due_scheduled_jobs_to_pending_and_learns_the_next_due_time():
    t0 = datetime(2030, 1, 1, tzinfo=UTC)
    worker = Worker(clock=lambda: t0)
    due = enqueue("tests.noop", run_at=t0 - timedelta(seconds=1))
    later = enqueue("tests.noop", run_at=t0 + timedelta(seconds=30))
    Job.objects.filter(id=due.id).update(status=JobStatus.SCHEDULED)  # as written then
    worker.staging.stage(recheck=True)
    assert Job.objects.get(id=due.id).status == JobStatus.PENDING
    assert Job.objects.get(id=later.id).status == JobStatus.SCHEDULED
    assert 25 < worker.staging.due_at - time.monotonic() <= 30
    worker.staging.retry_scheduled(2.0)  # a retry this worker's runners wrote
    assert worker.staging.due_at - time.monotonic() <= 2


@pytest.mark.django_db(transaction=True)
def test_due_jobs_another_transaction_holds_are_not_promoted_in_a_loop(engine, monkeypatch):
    """A scheduled job is due, but another transaction holds its row: promote() skips it and
    moves nothing. The worker tries again after a moment, not at once: an idle worker read
    the due time and promoted in a loop as fast as the database answered (on MariaDB, 2 idle
    workers went from 212 to 1,773 queries a second while a transaction held due rows)."""
    if engine == "sqlite":
        pytest.skip("row locks: PostgreSQL, MariaDB (SQLite has one writer at a time)")
    from django_sqlq import lifecycle
    from django_sqlq.worker import staging

    job = enqueue("tests.noop", delay=timedelta(seconds=0.05))
    wait_for(lambda: (lifecycle.next_due_in("default") or 0.0) <= 0, 10)  # it came due
    promotes: list[int] = []
    promote = lifecycle.promote

    def counted(*args: object, **kwargs: object) -> int:
        moved = promote(*args, **kwargs)  # type: ignore[arg-type]
        promotes.append(moved)
        return moved

    monkeypatch.setattr(lifecycle, "promote", counted)
    with held_elsewhere(lambda: list(Job.objects.select_for_update().filter(pk=job.pk))):
        stager = Worker(poll_interval=5).staging
        stager.stage(recheck=True)
        assert promotes == [0]  # held: nothing moved
        stager.stage(recheck=False)
        assert promotes == [0]  # not again at once
        assert stager.due_at > time.monotonic()
        assert stager.due_at <= time.monotonic() + staging.HELD_RETRY
    stager.due_at = 0.0  # the retry's time came
    stager.stage(recheck=False)
    assert promotes == [0, 1]
    job.refresh_from_db()
    assert job.status == JobStatus.PENDING
