"""Found by trying to break the queue on purpose (adversarial testing after issue 11): each
test is one way a careless or hostile setting, input or handler hurt the queue, and checks
that it no longer does. The worker runs in-process here; process-level cases are in
tests/faults."""

from __future__ import annotations

from typing import Any

import pytest
from django.core import checks
from django.core.management import CommandError, call_command
from django.test import override_settings

from django_sqlq import enqueue
from django_sqlq.exceptions import ConfigurationError
from django_sqlq.models import Job, JobStatus
from django_sqlq.worker import Worker

pytestmark = pytest.mark.django_db(transaction=True)

SQLQ = {"QUEUES": ["default"], "POLL_INTERVAL": 0.05, "RETRY_BACKOFF_BASE": 0.0}


# -- a retry backoff policy that breaks ------------------------------------------------------


def backoff_raises(attempts: int) -> float:
    raise RuntimeError("the policy broke")


def backoff_not_a_number(attempts: int) -> Any:
    return "soon"


@pytest.mark.parametrize("policy", ["backoff_raises", "backoff_not_a_number"])
def test_a_backoff_policy_that_breaks_still_records_the_failed_attempt(policy: str) -> None:
    # Before: the failed attempt was never written (the policy's error escaped while the
    # worker recorded it); the job stayed `processing` until its lease ran out, and then its
    # error read "Lease expired" instead of the handler's.
    path = f"{__name__}.{policy}"
    with override_settings(SQLQ={**SQLQ, "RETRY_BACKOFF": path}):
        job = enqueue("tests.boom", {"why": "first"}, max_attempts=2)
        Worker().run(burst=True, install_signal_handlers=False)
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED
    assert job.attempts == 2
    assert job.last_error.startswith("tests.testapp.jobs.Boom: it went boom: first")
    assert [e["exception_class"] for e in job.errors] == ["tests.testapp.jobs.Boom"] * 2


def test_a_backoff_policy_that_cannot_be_imported_is_an_error_at_start() -> None:
    with override_settings(SQLQ={**SQLQ, "RETRY_BACKOFF": "nowhere.to_be_found"}):
        assert [m.id for m in checks.run_checks() if m.id == "django_sqlq.E001"] == [
            "django_sqlq.E001"
        ]
        with pytest.raises(ConfigurationError, match="RETRY_BACKOFF"):
            Worker()
        with pytest.raises(CommandError, match="RETRY_BACKOFF"):
            call_command("sqlq_worker", burst=True, verbosity=0)
        job = enqueue("tests.noop")
    assert Job.objects.get(pk=job.pk).status == JobStatus.PENDING


# -- a job retried for ever -------------------------------------------------------------------


def test_errors_keeps_the_last_attempts_only() -> None:
    # Before: one entry per attempt, each up to ~68 KB, without end: a job retried "for
    # ever" (max_attempts up to 2**31-1 is accepted) grew its row by that much per attempt.
    from datetime import timedelta

    from django.utils import timezone

    from django_sqlq import lifecycle
    from django_sqlq.db.base import MAX_ERROR_ENTRIES

    attempts = MAX_ERROR_ENTRIES + 10
    with override_settings(SQLQ=SQLQ):
        job = enqueue("tests.boom", {"why": "again"}, max_attempts=attempts)
        Worker().run(burst=True, install_signal_handlers=False)
    job.refresh_from_db()
    assert (job.status, job.attempts) == (JobStatus.FAILED, attempts)
    assert [e["attempt"] for e in job.errors] == list(range(11, attempts + 1))
    assert job.last_error.startswith("tests.testapp.jobs.Boom: it went boom: again")

    # The lease-expiry path keeps the same bound.
    Job.objects.filter(pk=job.pk).update(
        status=JobStatus.PROCESSING,
        attempts=attempts - 1,
        locked_by="gone",
        lease_expires_at=timezone.now() - timedelta(minutes=1),
    )
    lifecycle.reap("default")
    job.refresh_from_db()
    assert job.status == JobStatus.PENDING
    assert len(job.errors) == MAX_ERROR_ENTRIES
    assert job.errors[-1]["exception_class"] == "django_sqlq.exceptions.LeaseLostError"
    assert job.errors[0]["attempt"] == 12
