"""django_sqlq.testing and its pytest plugin: assertions on enqueued jobs, running due jobs in
the test's own transaction, the inline mode."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import transaction
from django.test import TestCase, override_settings
from django.utils import timezone

from django_sqlq import enqueue, handler
from django_sqlq.conf import get_settings
from django_sqlq.exceptions import ConfigurationError
from django_sqlq.models import Job
from django_sqlq.testing import (
    assert_enqueued,
    enqueued_jobs,
    inline,
    refute_enqueued,
    run_job,
    run_jobs,
)
from tests.testapp.models import Order

pytestmark = pytest.mark.django_db(databases=["default", "other"])


@handler("tests.testing.place_order")
def place_order(payload: dict[str, Any]) -> int:
    """Writes a row and enqueues a follow-up job: both in the caller's transaction."""
    order = Order.objects.create(item=payload["item"])
    enqueue("tests.testing.confirm", {"order_id": order.pk}, queue="emails")
    return order.pk


@handler("tests.testing.confirm")
def confirm(payload: dict[str, Any]) -> str:
    order = Order.objects.get(pk=payload["order_id"])
    return f"confirmed {order.item}"


@handler("tests.testing.write_then_fail")
def write_then_fail(payload: dict[str, Any]) -> None:
    Order.objects.create(item="half-done")
    if payload.get("integrity"):
        # A database error: on PostgreSQL it aborts the transaction it happens in.
        Order.objects.create(id=Order.objects.get(item="half-done").pk, item="duplicate")
    raise ValueError("nope")


@handler("tests.testing.async_count")
async def async_count(payload: dict[str, Any]) -> int:
    return await sync_to_async(Order.objects.filter(item=payload["item"]).count)()


# -- assertions -------------------------------------------------------------------------


def test_assert_enqueued_by_type_payload_subset_queue_and_count():
    enqueue("tests.echo", {"to": "a@example.com", "lang": "en"}, queue="emails")
    enqueue("tests.echo", {"to": "b@example.com", "lang": "en"}, queue="emails")
    enqueue("tests.noop")

    assert len(assert_enqueued("tests.echo", count=2)) == 2
    [job] = assert_enqueued("tests.echo", payload={"to": "b@example.com"}, queue="emails")
    assert job.payload == {"to": "b@example.com", "lang": "en"}
    assert_enqueued(queue="default", count=1)
    assert_enqueued(payload={"lang": "en"}, count=2)
    refute_enqueued("tests.echo", queue="default")
    refute_enqueued("tests.echo", payload={"to": "c@example.com"})
    refute_enqueued("tests.add")
    assert [j.payload["to"] for j in enqueued_jobs("tests.echo")] == [
        "a@example.com",
        "b@example.com",
    ]


def test_assertions_take_the_handler_function():
    enqueue(place_order, {"item": "book"})
    assert_enqueued(place_order, payload={"item": "book"})
    assert_enqueued("tests.testing.place_order", count=1)


def test_failed_assertions_say_what_was_enqueued():
    enqueue("tests.echo", {"to": "a@example.com"}, queue="emails")
    with pytest.raises(AssertionError) as missing:
        assert_enqueued("tests.echo", payload={"to": "z@example.com"})
    message = str(missing.value)
    assert "payload containing {'to': 'z@example.com'}" in message
    assert "tests.echo queue=emails payload={'to': 'a@example.com'}" in message

    with pytest.raises(AssertionError, match="Expected 2 job"):
        assert_enqueued("tests.echo", count=2)
    with pytest.raises(AssertionError, match=r"Expected no job with type='tests\.echo'"):
        refute_enqueued("tests.echo")


def test_only_waiting_jobs_count_as_enqueued():
    enqueue("tests.echo", {"n": 1})
    run_jobs()
    refute_enqueued("tests.echo")
    assert Job.objects.get().status == "completed"


def test_a_rolled_back_enqueue_is_not_enqueued():
    # The raise is what rolls the transaction back.
    with pytest.raises(RuntimeError, match="roll back"), transaction.atomic():  # noqa: PT012
        enqueue("tests.echo", {"n": 1})
        raise RuntimeError("roll back")
    refute_enqueued("tests.echo")


# -- run_jobs in the test's transaction ---------------------------------------------------


def test_run_jobs_runs_due_jobs_and_the_jobs_they_enqueue_in_the_tests_transaction():
    """A plain (non-transactional) test: handlers see the test's uncommitted rows."""
    order = Order.objects.create(item="lamp")
    enqueue("tests.testing.confirm", {"order_id": order.pk})
    enqueue("tests.testing.place_order", {"item": "book"}, priority=5)

    outcome = run_jobs()

    assert (outcome.completed, outcome.retried, outcome.failed) == (3, 0, 0)
    jobs = {job.type: job for job in Job.objects.filter(type="tests.testing.place_order")}
    placed = jobs["tests.testing.place_order"]
    assert placed.status == "completed"
    assert placed.completed_at is not None
    assert placed.attempts == 1
    assert placed.locked_by == "django_sqlq.testing"
    confirmations = Job.objects.filter(type="tests.testing.confirm").order_by("id")
    assert [j.result for j in confirmations] == ["confirmed lamp", "confirmed book"]
    # Priority first: the order was placed before the lamp's confirmation ran.
    assert outcome.job_ids[0] == placed.pk
    assert run_jobs().ran == 0


def test_run_jobs_by_queue():
    enqueue("tests.echo", {"n": 1}, queue="emails")
    enqueue("tests.echo", {"n": 2}, queue="reports")
    assert run_jobs("emails").completed == 1
    assert_enqueued("tests.echo", queue="reports", count=1)
    assert run_jobs(["default", "reports"]).completed == 1


def test_run_jobs_leaves_future_jobs_unless_asked():
    later = enqueue("tests.echo", {"n": 1}, delay=3600)
    assert run_jobs().ran == 0
    assert run_jobs(now=timezone.now() + timedelta(minutes=30)).ran == 0
    assert run_jobs(now=timezone.now() + timedelta(hours=2)).completed == 1
    later.refresh_from_db()
    assert later.status == "completed"

    enqueue("tests.echo", {"n": 2}, run_at=timezone.now() + timedelta(days=1))
    assert run_jobs(with_scheduled=True).completed == 1


def test_max_jobs_stops_early():
    for n in range(3):
        enqueue("tests.echo", {"n": n})
    assert run_jobs(max_jobs=2).ran == 2
    assert_enqueued("tests.echo", count=1)


@pytest.mark.parametrize("integrity", [False, True])
def test_a_failing_handler_is_retried_then_failed_and_its_writes_undone(integrity):
    """The failure is recorded as the worker records it; what the handler wrote is rolled
    back (a savepoint) and the test's transaction stays usable, also after a database error
    (which aborts a PostgreSQL transaction)."""
    Order.objects.create(item="kept")
    job = enqueue("tests.testing.write_then_fail", {"integrity": integrity}, max_attempts=2)

    # SQLQ["RETRY_BACKOFF_BASE"] is 0 in the test settings: the retry is due at once.
    outcome = run_jobs()

    assert (outcome.completed, outcome.retried, outcome.failed) == (0, 1, 1)
    job.refresh_from_db()
    assert job.status == "failed"
    assert job.attempts == 2
    assert job.last_error.startswith("ValueError: nope") or "IntegrityError" in job.last_error
    assert len(job.errors) == 2
    assert list(Order.objects.values_list("item", flat=True)) == ["kept"]


def test_a_retry_waits_for_its_backoff():
    with override_settings(SQLQ={**settings.SQLQ, "RETRY_BACKOFF_BASE": 60.0}):
        job = enqueue("tests.boom", max_attempts=3)
        assert run_jobs().retried == 1
        job.refresh_from_db()
        assert job.status == "scheduled"
        assert job.scheduled_at > timezone.now()
        assert run_jobs().ran == 0
        assert run_jobs(now=timezone.now() + timedelta(hours=2)).retried == 1


def test_raise_errors_raises_after_recording_the_attempt():
    from tests.testapp.jobs import Boom

    job = enqueue("tests.boom", {"why": "testing"}, max_attempts=1)
    with pytest.raises(Boom, match="it went boom: testing"):
        run_jobs(raise_errors=True)
    job.refresh_from_db()
    assert job.status == "failed"


@override_settings(SQLQ={**settings.SQLQ, "CHECK_TYPES": False})
def test_an_unknown_type_fails_the_job():
    job = enqueue("tests.testing.nobody_handles_this", max_attempts=1)
    assert run_jobs().failed == 1
    job.refresh_from_db()
    assert "No handler is registered" in job.last_error


def test_run_job_runs_one_job_whatever_its_schedule():
    first = enqueue("tests.add", {"a": 1, "b": 2}, delay=3600)
    other = enqueue("tests.add", {"a": 2, "b": 2})
    assert run_job(first) == "completed"
    assert first.status == "completed"
    assert first.result == 3
    assert run_job(first) is None  # no longer waiting
    assert run_job(other.pk) == "completed"


def test_async_handlers_use_the_tests_connection():
    Order.objects.create(item="pen")
    job = enqueue("tests.testing.async_count", {"item": "pen"})
    assert run_jobs().completed == 1
    job.refresh_from_db()
    assert job.result == 1


def test_jobs_enqueued_on_commit_need_captured_callbacks(django_capture_on_commit_callbacks):
    """A view that enqueues in transaction.on_commit: in a test transaction nothing commits;
    captureOnCommitCallbacks(execute=True) runs the callbacks, so the job exists."""

    def view() -> None:
        with transaction.atomic():
            order = Order.objects.create(item="cup")
            transaction.on_commit(lambda: enqueue("tests.testing.confirm", {"order_id": order.pk}))

    view()
    refute_enqueued("tests.testing.confirm")

    with django_capture_on_commit_callbacks(execute=True):
        view()
    assert_enqueued("tests.testing.confirm", count=1)
    assert run_jobs().completed == 1


@override_settings(SQLQ={**settings.SQLQ, "DATABASE": "other"})
def test_a_queue_in_another_database(django_capture_on_commit_callbacks):
    """The jobs table in another database: an enqueue inside the caller's transaction is
    written on its commit (captured), and run_jobs() runs on the queue database. (In a test
    every database is inside a transaction: ``using`` names the caller's.)"""
    with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
        enqueue("tests.echo", {"n": 1}, using="default")
        refute_enqueued("tests.echo")
    [job] = assert_enqueued("tests.echo", count=1)
    assert job._state.db == "other"
    assert run_jobs().completed == 1
    assert Job.objects.using("other").get().status == "completed"


# -- inline mode ------------------------------------------------------------------------


def test_inline_mode_runs_each_job_at_enqueue():
    order = Order.objects.create(item="mug")
    with inline():
        job = enqueue("tests.testing.confirm", {"order_id": order.pk})
        later = enqueue("tests.add", {"a": 1, "b": 1}, delay=3600)
        failing = enqueue("tests.boom", max_attempts=1)
    assert job.status == "completed"
    assert job.result == "confirmed mug"
    assert later.status == "completed"
    assert later.result == 2
    assert failing.status == "failed"
    assert "it went boom" in failing.last_error
    refute_enqueued()
    # Back to normal after the block.
    enqueue("tests.noop")
    assert_enqueued("tests.noop")


@inline()
def test_inline_mode_as_a_decorator_with_bulk_enqueue():
    from django_sqlq import bulk_enqueue

    jobs = bulk_enqueue("tests.echo", [{"n": 1}, {"n": 2}])
    assert [j.status for j in jobs] == ["completed", "completed"]
    assert [j.result for j in jobs] == [{"n": 1}, {"n": 2}]


def test_inline_mode_through_settings_and_in_another_database(
    django_capture_on_commit_callbacks,
):
    with override_settings(SQLQ={**settings.SQLQ, "DATABASE": "other", "TESTING": "inline"}):
        with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
            job = enqueue("tests.echo", {"n": 1}, using="default")
            assert job.pk is None  # written on the caller's commit
        assert job.status == "completed"
        assert Job.objects.using("other").get().result == {"n": 1}


def test_testing_setting_is_validated():
    with override_settings(SQLQ={"TESTING": "eager"}), pytest.raises(ConfigurationError):
        get_settings()


# -- the pytest plugin's fixtures --------------------------------------------------------


def test_sqlq_fixture(sqlq):
    enqueue("tests.add", {"a": 2, "b": 3})
    [job] = sqlq.assert_enqueued("tests.add", payload={"a": 2})
    assert sqlq.run_jobs().completed == 1
    sqlq.refute_enqueued("tests.add")
    job.refresh_from_db()
    assert job.result == 5
    with pytest.raises(AttributeError):
        sqlq.no_such_helper  # noqa: B018


@pytest.mark.usefixtures("sqlq_inline")
def test_sqlq_inline_fixture():
    job = enqueue("tests.add", {"a": 2, "b": 3})
    assert job.status == "completed"
    assert job.result == 5


@pytest.mark.django_db(transaction=True, databases=["default", "other"])
def test_sqlq_fixture_in_a_transactional_test(sqlq):
    """With real commits too: run_jobs works in autocommit mode."""
    enqueue("tests.testing.place_order", {"item": "chair"})
    assert sqlq.run_jobs().completed == 2
    assert Order.objects.get().item == "chair"


# -- Django's TestCase ---------------------------------------------------------------------


class DjangoTestCaseTests(TestCase):
    databases = {"default", "other"}

    def test_enqueue_and_run_in_a_plain_testcase(self):
        order = Order.objects.create(item="desk")
        with self.captureOnCommitCallbacks(execute=True):
            transaction.on_commit(lambda: enqueue("tests.testing.confirm", {"order_id": order.pk}))
        assert_enqueued("tests.testing.confirm", payload={"order_id": order.pk})
        assert run_jobs().completed == 1
        assert Job.objects.get().result == "confirmed desk"


# -- Django's tasks framework ------------------------------------------------------------


def test_run_jobs_runs_task_framework_tasks_and_sends_its_signals():
    """@task functions enqueued through the backend are ordinary jobs: run_jobs() runs them in
    the test's transaction, and the framework's result and signals follow."""
    from django_sqlq import compat

    if not compat.AVAILABLE:
        pytest.skip("neither django.tasks (Django 6+) nor the django_tasks backport is installed")
    from tests.testapp import tasks

    finished: list[Any] = []

    def receiver(sender: Any, task_result: Any, **kwargs: Any) -> None:  # noqa: ARG001
        finished.append(task_result.status)

    compat.task_finished.connect(receiver, weak=False)
    try:
        result = tasks.add.enqueue(2, 3)
        assert_enqueued(count=1)
        assert run_jobs().completed == 1
    finally:
        compat.task_finished.disconnect(receiver)
    result.refresh()
    assert result.status == compat.TaskResultStatus.SUCCESSFUL
    assert result.return_value == 5
    assert finished == [compat.TaskResultStatus.SUCCESSFUL]


def test_inline_mode_runs_task_framework_tasks_too():
    """Inline mode is the ImmediateBackend of django_sqlq: a @task's enqueue() runs it at
    once as well, and the TaskResult it returns carries the outcome (it stayed READY, never
    run: a test relying on inline mode for tasks saw nothing happen)."""
    from django_sqlq import compat

    if not compat.AVAILABLE:
        pytest.skip("neither django.tasks (Django 6+) nor the django_tasks backport is installed")
    from tests.testapp import tasks

    with inline():
        result = tasks.add.enqueue(2, 3)
        failed = tasks.fail.enqueue("no")
    assert result.status == compat.TaskResultStatus.SUCCESSFUL
    assert result.return_value == 5
    assert result.worker_ids == ["django_sqlq.testing"]
    assert tasks.add.get_result(result.id) == result
    assert failed.status == compat.TaskResultStatus.FAILED
    assert [e.exception_class_path for e in failed.errors] == ["tests.testapp.tasks.TaskFailed"]
    refute_enqueued()


def test_assertions_take_a_task_as_the_target():
    """A Django user asserts on the @task itself, as on a handler function (it raised
    "enqueue() takes a handler name, dotted path or function")."""
    from django_sqlq import compat

    if not compat.AVAILABLE:
        pytest.skip("neither django.tasks (Django 6+) nor the django_tasks backport is installed")
    from tests.testapp import tasks

    tasks.add.enqueue(2, 3)
    tasks.add.using(priority=7).enqueue(4, 5)
    [job] = assert_enqueued(tasks.add, payload={"args": [2, 3]})
    assert job.type == "tests.testapp.tasks.add"
    assert_enqueued(tasks.add, count=2)
    assert_enqueued(tasks.add.using(priority=7), count=2)  # the function decides the type
    assert enqueued_jobs(tasks.add, queue="emails") == []
    refute_enqueued(tasks.echo)
    with pytest.raises(AssertionError, match=r"no job with type='tests\.testapp\.tasks\.add'"):
        refute_enqueued(tasks.add)


def test_payload_matching_tells_booleans_from_numbers_and_takes_tuples():
    """JSON tells true from 1 and false from 0; Python's == does not, so payload={"notify":
    True} matched a job enqueued with {"notify": 1} (a passing assertion that should fail).
    A tuple matches the list JSON stored (enqueue() takes tuples)."""
    enqueue("tests.echo", {"notify": 1, "count": 0, "ids": [1, 2], "nested": {"on": False}})
    refute_enqueued("tests.echo", payload={"notify": True})
    refute_enqueued("tests.echo", payload={"count": False})
    refute_enqueued("tests.echo", payload={"nested": {"on": 0}})
    assert_enqueued("tests.echo", payload={"notify": 1, "count": 0, "nested": {"on": False}})
    assert_enqueued("tests.echo", payload={"ids": (1, 2)})
    assert_enqueued("tests.echo", payload={"notify": 1.0})  # one JSON number


@pytest.mark.parametrize("bad", [-1, 1.5, "1", True])
def test_a_bad_count_or_max_jobs_is_an_error_not_a_silent_pass(bad):
    """run_jobs(max_jobs=-1) ran nothing and reported nothing, assert_enqueued(count=-1)
    could only fail with a puzzling message: bad input is an error at once."""
    enqueue("tests.noop")
    with pytest.raises(ValueError, match="count must be"):
        assert_enqueued("tests.noop", count=bad)
    with pytest.raises(ValueError, match="max_jobs must be"):
        run_jobs(max_jobs=bad if bad != 1.5 else 0)
    assert run_jobs(max_jobs=1).completed == 1


def test_refute_enqueued_of_a_misspelt_type_is_an_error_not_a_pass():
    enqueue("tests.echo", {"to": "a@example.com"})
    with pytest.raises(ValueError, match=r"'tests.ecko'.*Did you mean 'tests.echo'"):
        refute_enqueued("tests.ecko")
    # A registered type, a handler's dotted path and a @task's path are known.
    refute_enqueued("tests.add")
    refute_enqueued("tests.testapp.jobs.add")
