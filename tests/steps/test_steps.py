"""Durable steps (issue 25) run by django_sqlq.testing's run_jobs(), on each engine: a
recorded step runs once across attempts, sleeps and waits end the attempt uncounted and
resume it, events are transactional and the first emit wins, the errors of a step used
wrongly. The real-worker scenarios (kill -9 inside and between steps, a restart during a
sleep, racing emits) are in test_step_processes.py; the handlers in
tests/testapp/step_jobs.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection, transaction
from django.utils import timezone

from django_sqlq import emit_event, enqueue
from django_sqlq.exceptions import PayloadError, StepError
from django_sqlq.jobcontext import JobContext
from django_sqlq.models import Event, Job, JobStatus, JobStep, StepKind, StepState
from django_sqlq.retention import prune
from django_sqlq.steps import Steps
from django_sqlq.testing import run_jobs
from tests.testapp import step_jobs  # noqa: F401 (registers the handlers)
from tests.testapp.models import Order

pytestmark = pytest.mark.django_db(transaction=True)


def items(tag: str) -> list[str]:
    return sorted(Order.objects.filter(item__startswith=f"{tag} ").values_list("item", flat=True))


def job_result(job: Job) -> dict[str, Any]:
    assert isinstance(job.result, dict)
    return job.result


def later(seconds: float) -> datetime:
    return timezone.now() + timedelta(seconds=seconds)


def test_a_recorded_step_does_not_run_again_when_the_job_is_retried():
    job = enqueue("steps.flow", {"tag": "r", "fail_once": True}, max_attempts=3)
    first = run_jobs(max_jobs=1)
    job.refresh_from_db()
    assert (first.retried, job.status, job.attempts) == (1, JobStatus.PENDING, 1)
    run_jobs()
    job.refresh_from_db()
    assert (job.status, job.attempts) == (JobStatus.COMPLETED, 2)
    # Each step's writes happened once, though the handler ran twice.
    assert items("r") == ["r charge", "r ship"]
    recorded = dict(JobStep.objects.filter(job_id=job.id).values_list("name", "result"))
    assert job.result == {"charged": recorded["charge"], "paid": None, "shipped": recorded["ship"]}


def test_a_sleep_ends_the_attempt_uncounted_and_the_job_resumes_when_it_is_due():
    job = enqueue("steps.flow", {"tag": "s", "sleep": 3600})
    result = run_jobs()
    job.refresh_from_db()
    assert (result.slept, result.completed) == (1, 0)
    assert (job.status, job.attempts, job.locked_by) == (JobStatus.SCHEDULED, 0, "")
    nap = JobStep.objects.get(job_id=job.id, name="nap")
    assert (nap.kind, nap.state) == (StepKind.SLEEP, StepState.SLEEPING)
    assert job.scheduled_at == nap.wake_at
    assert abs((nap.wake_at - timezone.now()).total_seconds() - 3600) < 60
    # Not due: run_jobs() leaves it, and with_scheduled=True does not spin on it.
    assert run_jobs().ran == 0
    assert run_jobs(with_scheduled=True).slept == 1
    # Due: it runs from the top, the charge replayed, and completes on its first attempt.
    run_jobs(now=later(7200))
    job.refresh_from_db()
    assert (job.status, job.attempts) == (JobStatus.COMPLETED, 1)
    assert items("s") == ["s charge", "s ship"]
    assert JobStep.objects.get(job_id=job.id, name="nap").state == StepState.DONE


def test_a_sleep_of_zero_returns_at_once():
    job = enqueue("steps.flow", {"tag": "z", "sleep": 0})
    assert run_jobs().completed == 1
    job.refresh_from_db()
    assert (job.status, job.attempts) == (JobStatus.COMPLETED, 1)


def test_a_waiting_job_is_woken_by_its_event_and_gets_the_payload():
    job = enqueue("steps.flow", {"tag": "w", "key": "order-1 paid", "timeout": 3 * 86400})
    run_jobs()
    job.refresh_from_db()
    assert (job.status, job.attempts) == (JobStatus.SCHEDULED, 0)
    wait = JobStep.objects.get(job_id=job.id, name="paid")
    assert (wait.state, wait.wait_key) == (StepState.WAITING, "order-1 paid")
    assert emit_event("order-1 paid", {"amount": 12}) is True
    job.refresh_from_db()
    assert job.status == JobStatus.PENDING  # woken at once, not at the timeout
    run_jobs()
    job.refresh_from_db()
    assert job.status == JobStatus.COMPLETED
    assert job_result(job)["paid"] == {"amount": 12}
    assert items("w") == ["w charge", "w ship"]


def test_an_event_emitted_before_anyone_waits_is_kept_for_the_waiter():
    assert emit_event("early", [1, 2]) is True
    job = enqueue("steps.flow", {"tag": "e", "key": "early", "timeout": 10})
    result = run_jobs()
    job.refresh_from_db()
    assert (result.slept, job.status, job_result(job)["paid"]) == (0, JobStatus.COMPLETED, [1, 2])


def test_the_first_emit_of_a_key_wins():
    assert emit_event("k", "first") is True
    assert emit_event("k", "second") is False
    assert list(Event.objects.values_list("key", "payload")) == [("k", "first")]


def test_an_emit_inside_a_transaction_that_rolls_back_leaves_nothing():
    job = enqueue("steps.flow", {"tag": "t", "key": "rolled", "timeout": 60})
    run_jobs()

    with transaction.atomic():
        emit_event("rolled", 1)
        transaction.set_rollback(True)
    job.refresh_from_db()
    assert (Event.objects.count(), job.status) == (0, JobStatus.SCHEDULED)


def test_a_wait_that_times_out_raises_event_timeout_every_time_after():
    job = enqueue("steps.flow", {"tag": "o", "key": "never", "timeout": 60}, max_attempts=1)
    run_jobs()
    run_jobs(now=later(120))
    job.refresh_from_db()
    assert (job.status, job_result(job)["paid"]) == (JobStatus.COMPLETED, "timed out")
    assert JobStep.objects.get(job_id=job.id, name="paid").state == StepState.TIMED_OUT
    # An emit after the timeout is kept, but this job took its path already.
    emit_event("never", 1)
    job.refresh_from_db()
    assert job.status == JobStatus.COMPLETED


def test_a_cancel_of_a_sleeping_job_cancels_it():
    from django_sqlq import cancel

    job = enqueue("steps.nap", {"seconds": 3600})
    run_jobs()
    cancel(job.id)
    job.refresh_from_db()
    assert job.status == JobStatus.CANCELLED


@pytest.mark.parametrize(
    ("job_type", "words"),
    [
        ("steps.twice", "used twice"),
        ("steps.sleep_in_transaction", "inside a transaction"),
        ("steps.sleep_atomic", "inside a transaction"),
    ],
)
def test_a_step_used_wrongly_fails_the_attempt_with_a_clear_error(job_type, words):
    job = enqueue(job_type, {}, max_attempts=1)
    run_jobs()
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED
    assert "StepError" in job.last_error
    assert words in job.last_error


def test_a_step_whose_result_json_cannot_hold_fails_and_its_writes_roll_back():
    job = enqueue("steps.not_json", {"tag": "nj"}, max_attempts=1)
    run_jobs()
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED
    assert "StepError" in job.last_error
    assert "'set'" in job.last_error
    assert not Order.objects.filter(item="nj").exists()
    assert not JobStep.objects.filter(job_id=job.id).exists()


@pytest.mark.parametrize("key", ["", None, 5, "x" * 256])
def test_emit_event_refuses_a_key_it_cannot_store(key):
    with pytest.raises(StepError, match="event key"):
        emit_event(key)
    assert not Event.objects.exists()


def test_emit_event_refuses_a_payload_json_cannot_hold():
    with pytest.raises(PayloadError):
        emit_event("k", {1, 2})
    assert not Event.objects.exists()


def test_steps_need_a_job_run_by_a_worker():
    context = JobContext(job_id=1, type="t", queue="q", attempt=1, max_attempts=1, worker_id="w")
    with pytest.raises(StepError, match="made by hand"):
        context.step("x", lambda: 1)


@pytest.mark.parametrize("when", ["soon", -1, 1e12, True, None])
def test_a_sleep_refuses_what_is_not_a_time(when):
    job = enqueue("steps.nap", {"seconds": when}, max_attempts=1)
    run_jobs()
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED
    assert "StepError" in job.last_error


def test_pruning_deletes_the_steps_of_deleted_jobs_and_old_events():
    job = enqueue("steps.flow", {"tag": "pr"})
    run_jobs()
    kept = enqueue("steps.flow", {"tag": "kept"})
    run_jobs()
    emit_event("old")
    Event.objects.filter(key="old").update(emitted_at=timezone.now() - timedelta(days=60))
    emit_event("new")
    Job.objects.filter(pk=job.pk).delete()
    result = prune("default", keep={"completed": None}, holder="test")
    assert (result.steps, result.events) == (2, 1)
    assert set(JobStep.objects.values_list("job_id", flat=True)) == {kept.id}
    assert list(Event.objects.values_list("key", flat=True)) == ["new"]


def test_run_now_ends_a_sleep_and_the_job_completes():
    from django_sqlq import lifecycle

    job = enqueue("steps.nap", {"seconds": 3600})
    run_jobs()
    assert lifecycle.run_now([job.id]).changed == 1
    wake_at = JobStep.objects.get(job_id=job.id).wake_at
    assert wake_at is not None
    assert wake_at <= timezone.now()
    assert run_jobs().completed == 1
    job.refresh_from_db()
    assert (job.status, job.result) == (JobStatus.COMPLETED, "rested")


def test_one_run_jobs_call_runs_a_job_again_once_its_event_wakes_it():
    job = enqueue("steps.flow", {"tag": "loop", "key": "emitted-by-a-job", "timeout": 60})
    enqueue("steps.emit", {"key": "emitted-by-a-job", "payload": 7}, delay=0)
    result = run_jobs()
    job.refresh_from_db()
    assert (result.slept, job.status, job_result(job)["paid"]) == (1, JobStatus.COMPLETED, 7)


# -- what the docs-only adversary found (issue 25) ----------------------------------------


def test_a_woken_waiter_gets_its_payload_even_once_the_event_is_pruned():
    job = enqueue("steps.flow", {"tag": "pruned", "key": "paid-before-prune", "timeout": None})
    run_jobs()
    emit_event("paid-before-prune", {"ok": True})
    Event.objects.update(emitted_at=timezone.now() - timedelta(days=365))
    assert prune("default", keep={"completed": None}, holder="test").events == 1
    run_jobs()
    job.refresh_from_db()
    assert (job.status, job_result(job)["paid"]) == (JobStatus.COMPLETED, {"ok": True})


@pytest.mark.parametrize("runner", ["run_jobs", "worker"])
def test_a_handler_that_swallows_the_end_of_its_attempt_fails_and_says_why(runner):
    from tests.conftest import run_burst

    job = enqueue("steps.swallow", {}, max_attempts=1)
    if runner == "worker":
        run_burst(concurrency=1)
    else:
        run_jobs()
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED
    assert "StepError" in job.last_error
    assert "caught django_sqlq.exceptions.Suspended" in job.last_error


@pytest.mark.parametrize("key", ["a\x00b", "\ud800", "   "])
def test_event_keys_no_engine_can_store_are_refused_clearly(key):
    with pytest.raises(StepError):
        emit_event(key)
    assert not Event.objects.exists()


def test_a_sleep_until_a_datetime_past_a_century_is_refused():
    job = enqueue("steps.nap", {"seconds": 1}, max_attempts=1)
    steps = Steps("default", job.id)
    with pytest.raises(StepError, match="100 years"):
        steps.sleep("far", datetime.max.replace(tzinfo=UTC))


def _order(item: str) -> str:
    Order.objects.create(item=item)
    return item


def _taken_over(job: Job) -> tuple[Steps, Steps]:
    """Job ``job`` as a worker whose lease ran out left it (attempt 1 of "w1", still
    running on) and as the worker that took it over holds it (attempt 2 of "w2")."""
    Job.objects.filter(pk=job.pk).update(status="processing", locked_by="w2", attempts=2)
    stale = Steps("default", job.id, worker_id="w1", attempt=1)
    holder = Steps("default", job.id, worker_id="w2", attempt=2)
    for steps in (stale, holder):  # each attempt read the job's steps at its start
        assert steps.step(f"start {steps.worker_id}", _order, f"lease {steps.worker_id}")
    return stale, holder


def test_a_step_the_jobs_holder_recorded_is_refused_to_a_stale_attempt():
    """Two attempts of one job (the first's worker froze past its lease, another took the
    job over): the step the holder recorded is refused to the stale attempt, whose writes
    in it roll back."""
    from django_sqlq.exceptions import LeaseLostError

    stale, holder = _taken_over(enqueue("tests.noop"))
    assert holder.step("charge", _order, "lease holder") == "lease holder"
    with pytest.raises(LeaseLostError, match="recorded by another attempt"):
        stale.step("charge", _order, "lease stale")
    assert items("lease") == ["lease holder", "lease w1", "lease w2"]


def test_a_step_a_stale_attempt_recorded_first_is_the_holders_too():
    """The stale attempt ran on and took the next step before the holder did: its writes
    are the step's, committed once with its record. The holder's roll back, and it goes on
    with the recorded result (it was told its lease was lost, and the job failed for it)."""
    stale, holder = _taken_over(enqueue("tests.noop"))
    assert stale.step("charge", _order, "lease stale") == "lease stale"
    assert holder.step("charge", _order, "lease holder") == "lease stale"
    assert items("lease") == ["lease stale", "lease w1", "lease w2"]


def test_an_attempt_never_changes_another_jobs_step():
    """A job deleted (and its steps pruned) while an attempt of it runs on: that attempt's
    sleep, over, marks its step done by job and name. By id alone it marked another job's
    wait done: on SQLite (no AUTOINCREMENT) that wait had the deleted step's id, and its
    event's payload was lost."""
    doomed, other = enqueue("tests.noop"), enqueue("tests.noop")
    JobStep.objects.create(job_id=other.id, name="charge", result=1)
    JobStep.objects.create(
        job_id=doomed.id, name="nap", kind=StepKind.SLEEP, state=StepState.SLEEPING,
        wake_at=later(-1),
    )  # fmt: skip
    attempt = Steps("default", doomed.id)
    attempt.sleep("early-check", 0)  # reads the job's steps, the sleep's id among them
    nap_id = JobStep.objects.get(job_id=doomed.id, name="nap").pk
    Job.objects.filter(pk=doomed.pk).delete()
    JobStep.objects.filter(job_id=doomed.id).delete()
    JobStep.objects.create(
        job_id=other.id, name="paid", kind=StepKind.EVENT, state=StepState.WAITING,
        wait_key="k-other", wake_at=later(3600),
    )  # fmt: skip
    attempt.sleep("nap", 1)  # over: marks it done
    waiting = JobStep.objects.get(job_id=other.id, name="paid")
    assert (waiting.state, waiting.result) == (StepState.WAITING, None)
    if connection.vendor == "sqlite":
        assert waiting.pk == nap_id  # the id the deleted sleep had


def test_a_steps_record_is_seen_by_the_query_log_and_by_execute_wrappers():
    """The record of a step goes past Django's cursor when nothing watches it: what does
    watch (a test's query log, debug tools, a project's execute wrapper) still sees it."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    job = enqueue("tests.noop")
    steps = Steps("default", job.id)
    with CaptureQueriesContext(connection) as queries:
        steps.step("logged", _order, "seen logged")
    seen: list[str] = []

    def spy(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        seen.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(spy):
        steps.step("wrapped", _order, "seen wrapped")
    steps.step("unwatched", _order, "seen unwatched")
    for statements in ([q["sql"] for q in queries], seen):
        assert sum("INSERT INTO sqlq_job_step" in sql for sql in statements) == 1, statements
    names = JobStep.objects.filter(job_id=job.id).order_by("id").values_list("name", flat=True)
    assert list(names) == ["logged", "wrapped", "unwatched"]
    assert items("seen") == ["seen logged", "seen unwatched", "seen wrapped"]
