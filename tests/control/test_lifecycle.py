"""The state machine (django_sqlq.lifecycle) called directly, with an injected clock:
claim, complete, a failed attempt (django_sqlq.outcomes), release, reap, extend_leases,
promote, run_now, cancel, and the retry backoff."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_sqlq import enqueue, lifecycle, retries
from django_sqlq.conf import get_settings
from django_sqlq.db import ops_for
from django_sqlq.models import Job, JobStatus
from tests.conftest import fail_attempt, run_burst

pytestmark = pytest.mark.django_db(transaction=True)


def test_default_backoff_is_exponential_capped_and_jittered():
    conf = get_settings()
    with override_settings(SQLQ={"RETRY_BACKOFF_BASE": 2.0, "RETRY_BACKOFF_MAX": 100.0}):
        conf = get_settings()
        assert retries.backoff_seconds(1, conf, rand=lambda: 0.5) == 2.0
        assert retries.backoff_seconds(3, conf, rand=lambda: 0.5) == 8.0
        assert retries.backoff_seconds(20, conf, rand=lambda: 0.5) == 100.0
        assert retries.backoff_seconds(3, conf, rand=lambda: 0.0) == 6.0
        assert retries.backoff_seconds(3, conf, rand=lambda: 1.0) == 10.0


def constant_backoff(attempts: int) -> float:  # noqa: ARG001 (a backoff policy)
    return 42.0


def test_dotted_path_backoff_policy():
    with override_settings(
        SQLQ={"RETRY_BACKOFF": "tests.control.test_lifecycle.constant_backoff"}
    ):
        assert retries.backoff_seconds(7, get_settings()) == 42.0


def test_the_retry_policy_retries_while_attempts_remain_unless_told_not_to():
    asked: list[int] = []

    def backoff(attempts: int) -> float:
        asked.append(attempts)
        return 5.0

    policy = retries.RetryPolicy(backoff)
    assert policy.retry_in(1, 3) == 5.0
    assert policy.retry_in(3, 3) is None  # attempts spent
    assert policy.retry_in(1, 3, retry=False) is None  # the handler said no
    assert policy.retry_in(1, 3, cancel=True) is None
    assert asked == [1]  # the backoff is asked only for a retry


def test_claim_order_is_by_priority_then_schedule():
    now = timezone.now()
    a = enqueue("tests.noop", priority=0, run_at=now - timedelta(seconds=3))
    b = enqueue("tests.noop", priority=50)
    c = enqueue("tests.noop", priority=0, run_at=now - timedelta(seconds=9))
    claimed = ops_for("default").claim(
        queues=["default"], worker_id="w", limit=10, lease_seconds=30
    )
    assert [job.id for job in claimed] == [b.pk, c.pk, a.pk]


def test_expired_lease_goes_back_to_pending_and_counts_as_an_attempt():
    now = datetime(2030, 1, 1, tzinfo=UTC)
    job = enqueue("tests.noop", run_at=now, max_attempts=2)
    assert lifecycle.promote("default", now=now) == 1  # due at the injected "now"
    claimed = ops_for("default").claim(
        queues=None, worker_id="dead", limit=1, lease_seconds=5, now=now
    )
    assert [c.id for c in claimed] == [job.pk]
    assert lifecycle.reap("default", now=now + timedelta(seconds=4)) == []
    reaped = lifecycle.reap("default", now=now + timedelta(seconds=6))
    assert reaped == [(job.pk, "tests.noop", "pending", 1, "default")]
    job.refresh_from_db()
    assert job.status == JobStatus.PENDING
    assert "Lease expired: worker dead" in job.last_error
    assert job.errors[-1]["worker_id"] == "dead"
    # The second attempt is also lost: attempts are spent, so the job fails.
    ops_for("default").claim(queues=None, worker_id="dead2", limit=1, lease_seconds=5, now=now)
    assert lifecycle.reap("default", now=now + timedelta(seconds=6))[0][2] == "failed"
    job.refresh_from_db()
    assert (job.status, job.attempts) == (JobStatus.FAILED, 2)


def test_a_worker_that_lost_its_lease_cannot_overwrite_the_new_holder():
    from django_sqlq.db.outcomes import Finished

    now = datetime(2030, 1, 1, tzinfo=UTC)
    job = enqueue("tests.noop", run_at=now)
    lifecycle.promote("default", now=now)
    stale = ops_for("default").claim(
        queues=None, worker_id="stale", limit=1, lease_seconds=5, now=now
    )[0]
    lifecycle.reap("default", now=now + timedelta(seconds=10))
    fresh = ops_for("default").claim(
        queues=None, worker_id="fresh", limit=1, lease_seconds=5, now=now
    )[0]
    assert fresh.attempts == 2
    # The stale worker wakes up and tries to finish: refused.
    ops = ops_for("default")
    stale_done = [Finished(stale.id, stale.attempts, "stale")]
    assert ops.complete_statuses(stale_done, worker_id="stale") == {}
    error = lifecycle.ErrorInfo("X", "stale failure", "")
    assert fail_attempt("default", stale, error, worker_id="stale", retry_in=0) is None
    assert lifecycle.extend_leases("default", worker_id="stale", lease_seconds=60) == 0
    assert ops.complete_statuses(
        [Finished(fresh.id, fresh.attempts, "fresh")], worker_id="fresh"
    ) == {job.pk: "completed"}
    job.refresh_from_db()
    assert (job.status, job.result, job.locked_by) == (JobStatus.COMPLETED, "fresh", "fresh")


def test_release_gives_back_without_counting_the_attempt():
    job = enqueue("tests.noop")
    ops_for("default").claim(queues=None, worker_id="w", limit=1, lease_seconds=30)
    assert lifecycle.release("default", [job.pk], worker_id="w") == 1
    job.refresh_from_db()
    assert (job.status, job.attempts, job.locked_by) == (JobStatus.PENDING, 0, "")


def test_heartbeat_extends_all_leases_in_one_statement(django_assert_num_queries):
    now = datetime(2030, 1, 1, tzinfo=UTC)
    for _ in range(3):
        enqueue("tests.noop", run_at=now)
    lifecycle.promote("default", now=now)
    claimed = ops_for("default").claim(
        queues=None, worker_id="w", limit=3, lease_seconds=5, now=now
    )
    if connection.vendor == "mysql":
        # MariaDB (no UPDATE ... RETURNING): one transaction, a locking read of the rows this
        # worker holds, one UPDATE of them all by id, and update_returning()'s read back of
        # the ids it updated, by primary key (update_rows() keeps only their number).
        with CaptureQueriesContext(connection) as queries:
            extended = lifecycle.extend_leases("default", worker_id="w", lease_seconds=60, now=now)
        ids = ", ".join(str(job_id) for job_id in sorted(job.id for job in claimed))
        statements = [q["sql"] for q in queries]
        assert len(statements) == 5, statements
        begin, read, update, read_back, commit = statements
        assert (begin, commit) == ("BEGIN", "COMMIT"), statements
        assert read.startswith("SELECT id FROM sqlq_job WHERE status = 'processing' "), read
        assert read.endswith("ORDER BY id FOR UPDATE SKIP LOCKED"), read
        assert update.startswith("UPDATE sqlq_job SET lease_expires_at = "), update
        assert update.endswith(f"WHERE id IN ({ids})"), update
        assert read_back == f"SELECT id FROM sqlq_job WHERE id IN ({ids}) ORDER BY id", read_back
    else:
        with django_assert_num_queries(1):
            extended = lifecycle.extend_leases("default", worker_id="w", lease_seconds=60, now=now)
    assert extended == 3
    assert set(Job.objects.values_list("lease_expires_at", flat=True)) == {
        now + timedelta(seconds=60)
    }


def test_scheduled_jobs_are_promoted_when_due_then_claimed():
    now = datetime(2030, 1, 1, tzinfo=UTC)
    early = enqueue("tests.noop", run_at=now)
    late = enqueue("tests.noop", run_at=now + timedelta(hours=1))
    assert Job.objects.filter(status=JobStatus.SCHEDULED).count() == 2
    # Nothing in the claim's index: a claim finds nothing even at the due time.
    assert ops_for("default").claim(queues=None, worker_id="w", limit=5, lease_seconds=5,
                           now=now) == []  # fmt: skip
    assert lifecycle.next_due_in("default", now=now) == 0
    assert lifecycle.promote("default", now=now - timedelta(seconds=1)) == 0
    assert lifecycle.promote("default", now=now) == 1
    assert Job.objects.get(pk=early.pk).status == JobStatus.PENDING
    assert lifecycle.next_due_in("default", now=now) == pytest.approx(3600)
    assert Job.objects.get(pk=late.pk).status == JobStatus.SCHEDULED
    # A worker whose clock reaches the due time promotes and runs them.
    assert run_burst(clock=lambda: now + timedelta(hours=1)).jobs_done == 2
    assert lifecycle.next_due_in("default") is None


def test_cancel_and_run_now_take_scheduled_jobs():
    a = enqueue("tests.noop", delay=3600)
    b = enqueue("tests.noop", delay=3600)
    assert lifecycle.run_now([a.pk]).changed == 1
    assert lifecycle.cancel([b.pk]).changed == 1
    assert Job.objects.get(pk=b.pk).status == JobStatus.CANCELLED
    a.refresh_from_db()
    assert a.status == JobStatus.PENDING
    assert a.scheduled_at <= timezone.now()
    assert run_burst().jobs_done == 1
