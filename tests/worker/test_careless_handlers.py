"""Found by trying to break the queue on purpose (adversarial testing after issue 11): each
test is one way a careless or hostile setting, input or handler hurt the queue, and checks
that it no longer does. The worker runs in-process here; process-level cases are in
tests/faults."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.test import override_settings

from django_sqlq import enqueue, handler
from django_sqlq.checks import check_settings
from django_sqlq.exceptions import ConfigurationError
from django_sqlq.models import Job, JobStatus
from django_sqlq.worker import Worker

pytestmark = pytest.mark.django_db(transaction=True)

SQLQ = {"QUEUES": ["default"], "POLL_INTERVAL": 0.05, "RETRY_BACKOFF_BASE": 0.0}


# -- a retry backoff policy that breaks ------------------------------------------------------


def backoff_raises(attempts: int) -> float:  # noqa: ARG001 (a backoff policy)
    raise RuntimeError("the policy broke")


def backoff_not_a_number(attempts: int) -> Any:  # noqa: ARG001 (a backoff policy)
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
        assert [m.id for m in check_settings()] == ["django_sqlq.E001"]
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
    from django_sqlq.db.dialect import MAX_ERROR_ENTRIES

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


# -- async handlers that leave tasks behind ----------------------------------------------------


@handler("adversarial.leave_task")
async def leave_task(payload: dict[str, Any]) -> str:
    """Start a task that never ends and is never awaited (a periodic flusher, say)."""

    async def forever() -> None:
        while True:
            await asyncio.sleep(0.01)

    asyncio.get_running_loop().create_task(forever())
    if payload.get("raise"):
        raise ValueError("raised with a task left behind")
    return "left one behind"


@handler("adversarial.stubborn_task")
async def stubborn_task(payload: dict[str, Any]) -> str:  # noqa: ARG001 (a handler)
    """Leave a task that swallows its cancellation once, then ends."""

    async def stubborn() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            await asyncio.sleep(0.01)

    asyncio.get_running_loop().create_task(stubborn())
    return "stubborn"


@handler("adversarial.count_tasks")
async def count_tasks(payload: Any) -> int:  # noqa: ARG001 (a handler)
    return len(asyncio.all_tasks())


def test_tasks_an_async_handler_leaves_behind_do_not_pile_up() -> None:
    # Before: each task left behind ran on during every later async job of the runner
    # thread, one more per job (the count below was 22).
    with override_settings(SQLQ=SQLQ):
        jobs = [enqueue("adversarial.leave_task", {"raise": n % 2}, priority=5,
                        max_attempts=1) for n in range(20)]  # fmt: skip
        stubborn = enqueue("adversarial.stubborn_task", priority=5)
        counter = enqueue("adversarial.count_tasks", priority=-5)
        Worker().run(burst=True, install_signal_handlers=False)
    statuses = [Job.objects.get(pk=job.pk).status for job in jobs]
    assert statuses == [JobStatus.COMPLETED, JobStatus.FAILED] * 10
    assert Job.objects.get(pk=stubborn.pk).status == JobStatus.COMPLETED
    counter.refresh_from_db()
    assert (counter.status, counter.result) == (JobStatus.COMPLETED, 1)  # itself only


# -- a language or time zone activated by a handler ----------------------------------------------


@handler("adversarial.activate")
def activate(payload: Any) -> None:
    """As an e-mail job does for its recipient, without translation.override()."""
    import zoneinfo

    from django.utils import timezone, translation

    translation.activate("fr")
    timezone.activate(zoneinfo.ZoneInfo("Asia/Tokyo"))
    if payload.get("raise"):
        raise ValueError("raised with fr and Asia/Tokyo active")


@handler("adversarial.report_locale")
def report_locale(payload: Any) -> list[str]:  # noqa: ARG001 (a handler)
    from django.utils import timezone, translation

    return [translation.get_language(), str(timezone.get_current_timezone())]


@pytest.mark.parametrize("raises", [False, True], ids=["returns", "raises"])
def test_a_language_or_time_zone_a_handler_activates_does_not_reach_the_next_job(
    raises: bool,
) -> None:
    # Before: the next job of the runner thread ran with them: ["fr", "Asia/Tokyo"].
    with override_settings(SQLQ=SQLQ):
        enqueue("adversarial.activate", {"raise": raises}, priority=5, max_attempts=1)
        report = enqueue("adversarial.report_locale")
        Worker().run(burst=True, install_signal_handlers=False)
    report.refresh_from_db()
    assert report.result == ["en-us", "UTC"]  # settings.LANGUAGE_CODE and TIME_ZONE


def test_a_language_activated_again_by_a_later_job_is_reset_again() -> None:
    # The reset runs only when a handler changed the thread's context variables: the second
    # activation (after the first was reset) must be seen too, on the same runner thread.
    with override_settings(SQLQ=SQLQ):
        reports = []
        for priority in (9, 7, 5):
            enqueue("adversarial.activate", {}, priority=priority + 1, max_attempts=1)
            reports.append(enqueue("adversarial.report_locale", priority=priority))
        Worker(concurrency=1).run(burst=True, install_signal_handlers=False)
    for report in reports:
        report.refresh_from_db()
        assert report.result == ["en-us", "UTC"]
