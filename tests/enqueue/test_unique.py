"""Unique jobs: enqueue(..., unique_key=...) writes no second job while one with the key is
live (scheduled, pending or processing), or finished less than unique_for ago."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings
from django.db import connection, connections, transaction
from django.test import Client, override_settings
from django.urls import reverse
from django.utils import timezone

from django_sqlq import bulk_enqueue, enqueue, lifecycle
from django_sqlq.db import ops_for
from django_sqlq.exceptions import InvalidJobError
from django_sqlq.models import Job, JobStatus
from tests.conftest import ROOT, run_burst, wait_for

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "other"])


def test_a_second_enqueue_with_the_key_returns_the_first_job():
    first = enqueue("tests.echo", {"n": 1}, unique_key="invoice:42")
    second = enqueue("tests.echo", {"n": 2}, unique_key="invoice:42")
    assert first.created is True
    assert second.created is False
    assert second.pk == first.pk
    assert second.uuid == first.uuid
    assert second.payload == {"n": 1}  # the job that exists, not the one asked for
    assert second.status == JobStatus.PENDING
    assert Job.objects.count() == 1
    assert Job.objects.get().unique_key == "invoice:42"


def test_other_keys_and_no_key_are_not_affected():
    a = enqueue("tests.noop", unique_key="a")
    b = enqueue("tests.noop", unique_key="b")
    plain = [enqueue("tests.noop"), enqueue("tests.noop")]
    assert a.created
    assert b.created
    assert all(job.created for job in plain)
    assert Job.objects.count() == 4
    assert Job.objects.filter(unique_key=None).count() == 2


def test_a_scheduled_job_holds_its_key():
    later = enqueue("tests.noop", delay=timedelta(hours=1), unique_key="k")
    assert later.status == JobStatus.SCHEDULED
    again = enqueue("tests.noop", unique_key="k")
    assert again.created is False
    assert again.pk == later.pk
    assert again.status == JobStatus.SCHEDULED


def test_a_processing_job_holds_its_key():
    job = enqueue("tests.noop", unique_key="k")
    (claimed,) = ops_for("default").claim(queues=None, worker_id="w", limit=1, lease_seconds=30)
    assert claimed.id == job.pk
    again = enqueue("tests.noop", unique_key="k")
    assert again.created is False
    assert again.pk == job.pk
    assert again.status == JobStatus.PROCESSING


def test_the_key_is_free_again_once_its_job_finished():
    first = enqueue("tests.noop", unique_key="k")
    run_burst()
    assert Job.objects.get(pk=first.pk).status == JobStatus.COMPLETED
    second = enqueue("tests.noop", unique_key="k")
    assert second.created is True
    assert second.pk != first.pk
    run_burst()
    assert Job.objects.completed().count() == 2


def test_a_retried_job_keeps_blocking_its_key():
    job = enqueue("tests.boom", unique_key="k", max_attempts=3)
    run_burst(backoff=lambda _: 600.0)
    stored = Job.objects.get(pk=job.pk)
    assert stored.status == JobStatus.SCHEDULED
    assert stored.attempts == 1
    again = enqueue("tests.boom", unique_key="k")
    assert again.created is False
    assert again.pk == job.pk
    assert Job.objects.count() == 1


@pytest.mark.parametrize("finish", ["complete", "fail", "cancel"])
def test_unique_for_covers_a_job_that_finished_within_it(finish):
    job = enqueue(
        "tests.boom" if finish == "fail" else "tests.noop",
        unique_key="k",
        max_attempts=1,
        delay=timedelta(hours=1) if finish == "cancel" else None,
    )
    if finish == "cancel":
        lifecycle.cancel([job.pk])
    else:
        run_burst()
    finished = {"complete": JobStatus.COMPLETED, "fail": JobStatus.FAILED,
                "cancel": JobStatus.CANCELLED}[finish]  # fmt: skip
    assert Job.objects.get(pk=job.pk).status == finished
    within = enqueue("tests.noop", unique_key="k", unique_for=timedelta(hours=1))
    assert within.created is False
    assert within.pk == job.pk
    assert within.status == finished
    # Without unique_for, a finished job does not hold its key.
    fresh = enqueue("tests.noop", unique_key="k")
    assert fresh.created is True


def test_unique_for_ends_by_the_finished_jobs_completed_at():
    job = enqueue("tests.noop", unique_key="k")
    run_burst()
    # It finished two hours ago.
    Job.objects.filter(pk=job.pk).update(completed_at=timezone.now() - timedelta(hours=2))
    blocked = enqueue("tests.noop", unique_key="k", unique_for=timedelta(hours=3))
    assert blocked.created is False
    assert blocked.pk == job.pk
    free = enqueue("tests.noop", unique_key="k", unique_for=timedelta(hours=1))
    assert free.created is True
    assert free.pk != job.pk
    # The new job is live: it holds the key, whatever unique_for says.
    again = enqueue("tests.noop", unique_key="k", unique_for=timedelta(hours=1))
    assert again.created is False
    assert again.pk == free.pk


def test_a_rolled_back_unique_job_frees_its_key():
    with pytest.raises(RuntimeError, match="roll back"), transaction.atomic():  # noqa: PT012 (the raise rolls back)
        enqueue("tests.noop", unique_key="k")
        raise RuntimeError("roll back")
    job = enqueue("tests.noop", unique_key="k")
    assert job.created is True
    assert Job.objects.count() == 1


def test_a_unique_enqueue_in_another_databases_transaction_is_decided_at_its_commit():
    with override_settings(SQLQ={**settings.SQLQ, "DATABASE": "other"}):
        first = enqueue("tests.noop", unique_key="k")
        with transaction.atomic(using="default"):
            second = enqueue("tests.noop", unique_key="k")
            assert second.created is None
            assert second.pk is None
        assert second.created is False
        assert second.pk == first.pk
        assert Job.objects.count() == 1


# -- bulk_enqueue -----------------------------------------------------------------------------


def test_bulk_enqueue_with_a_list_of_keys_writes_one_job_per_key():
    held = enqueue("tests.echo", {"n": "held"}, unique_key="c")
    jobs = bulk_enqueue(
        "tests.echo",
        [{"n": 0}, {"n": 1}, {"n": 2}, {"n": 3}, {"n": 4}],
        unique_key=["a", None, "a", "c", "b"],
    )
    assert len(jobs) == 5
    assert [job.created for job in jobs] == [True, True, False, False, True]
    assert jobs[2].pk == jobs[0].pk
    assert jobs[2].payload == {"n": 0}
    assert jobs[3].pk == held.pk
    assert jobs[3].payload == {"n": "held"}
    assert len({jobs[0].pk, jobs[1].pk, jobs[4].pk, held.pk}) == 4
    # Those without a key first, then those with one in the keys' order (no deadlock).
    assert jobs[1].pk < jobs[0].pk < jobs[4].pk
    assert Job.objects.count() == 4
    keys = Job.objects.exclude(unique_key=None).values_list("unique_key", flat=True)
    assert sorted(key for key in keys if key is not None) == ["a", "b", "c"]


def test_bulk_enqueue_with_a_key_function():
    jobs = bulk_enqueue(
        "tests.echo",
        [{"invoice": 1}, {"invoice": 2}, {"invoice": 1}, {}],
        unique_key=lambda payload: f"invoice:{payload['invoice']}" if payload else None,
    )
    assert [job.created for job in jobs] == [True, True, False, True]
    assert Job.objects.count() == 3
    assert jobs[3].unique_key is None


def test_bulk_enqueue_with_unique_for():
    done = enqueue("tests.noop", unique_key="a")
    run_burst()
    jobs = bulk_enqueue(
        "tests.noop", [{}, {}], unique_key=["a", "b"], unique_for=timedelta(minutes=5)
    )
    assert [job.created for job in jobs] == [False, True]
    assert jobs[0].pk == done.pk
    assert jobs[0].status == JobStatus.COMPLETED


def test_a_failed_bulk_enqueue_writes_no_job(monkeypatch):
    from django_sqlq.db.base import QueueOps

    calls = []
    original = QueueOps.insert_unique

    def second_fails(self: Any, **kwargs: Any) -> Any:
        calls.append(kwargs)
        if len(calls) == 2:
            raise RuntimeError("the database went away")
        return original(self, **kwargs)

    monkeypatch.setattr(QueueOps, "insert_unique", second_fails)
    with pytest.raises(RuntimeError):
        bulk_enqueue("tests.noop", [{}, {}, {}], unique_key=[None, "a", "b"])
    assert Job.objects.count() == 0


# -- validation -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"unique_key": 42}, "unique_key must be a string"),
        ({"unique_key": b"bytes"}, "unique_key must be a string"),
        ({"unique_key": ""}, "non-empty"),
        ({"unique_key": "k" * 256}, "at most 255"),
        ({"unique_key": "a\x00b"}, "NUL"),
        ({"unique_for": timedelta(hours=1)}, "unique_for needs a unique_key"),
        ({"unique_key": "k", "unique_for": 3600}, "unique_for must be a timedelta"),
        ({"unique_key": "k", "unique_for": timedelta(0)}, "positive"),
        ({"unique_key": "k", "unique_for": timedelta(seconds=-1)}, "positive"),
    ],
)
def test_enqueue_refuses_bad_unique_options_and_writes_nothing(kwargs, message):
    with pytest.raises(InvalidJobError, match=message):
        enqueue("tests.noop", **kwargs)
    assert not Job.objects.exists()


def test_the_longest_key_is_accepted():
    job = enqueue("tests.noop", unique_key="k" * 255)
    assert Job.objects.get(pk=job.pk).unique_key == "k" * 255


@pytest.mark.parametrize(
    ("unique_key", "message"),
    [
        ("one-key", "a list of keys, one per payload, or a function"),
        (["a"], "2 payloads and 1 unique keys"),
        ([None, 7], r"unique_key of payloads\[1\]: unique_key must be a string"),
        (lambda _: "", r"unique_key of payloads\[0\]"),
    ],
)
def test_bulk_enqueue_refuses_bad_keys_and_writes_nothing(unique_key, message):
    with pytest.raises(InvalidJobError, match=message):
        bulk_enqueue("tests.noop", [{}, {}], unique_key=unique_key)
    assert not Job.objects.exists()


def test_bulk_enqueue_refuses_unique_for_without_keys():
    with pytest.raises(InvalidJobError, match="unique_for needs a unique_key"):
        bulk_enqueue("tests.noop", [{}], unique_for=timedelta(hours=1))


# -- concurrency ------------------------------------------------------------------------------


def test_two_concurrent_transactions_end_with_one_job():
    """Two transactions enqueue the same key: the second waits until the first commits (on
    PostgreSQL its INSERT waits on the unique index; on SQLite for the write lock), then
    returns the first's job."""
    first_written = threading.Event()
    second_sent = threading.Event()  # the second has sent its first statement
    results: dict[str, Any] = {}

    def first() -> None:
        try:
            with transaction.atomic():
                results["first"] = enqueue("tests.noop", {"by": "first"}, unique_key="k")
                first_written.set()
                # Hold the transaction open until the second's statement is on its way:
                # it cannot finish before this commits.
                assert second_sent.wait(30)
                results["second_done_before_commit"] = "second" in results
        finally:
            connections.close_all()

    def announce(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        second_sent.set()
        return execute(sql, params, many, context)

    def second() -> None:
        try:
            first_written.wait(30)
            # SQLite: BEGIN IMMEDIATE waits for the first's commit (one writer); PostgreSQL:
            # the INSERT waits on the unique index.
            with connection.execute_wrapper(announce), transaction.atomic():
                results["second"] = enqueue("tests.noop", {"by": "second"}, unique_key="k")
        except Exception as exc:  # pragma: no cover - reported below
            results["error"] = exc
        finally:
            connections.close_all()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert "error" not in results, results.get("error")
    assert results["second_done_before_commit"] is False
    assert results["first"].created is True
    assert results["second"].created is False
    assert results["second"].pk == results["first"].pk
    assert results["second"].payload == {"by": "first"}
    assert Job.objects.count() == 1


ENQUEUER = """
import os, sys, time
import django
django.setup()
from django_sqlq import enqueue
start = float(sys.argv[1])
while time.time() < start:
    time.sleep(0.001)
job = enqueue("tests.noop", {"pid": os.getpid()}, unique_key="shared")
print(job.pk, job.created, flush=True)
"""


def test_processes_enqueueing_the_same_key_at_once_make_one_job(worker_env):
    start = time.time() + 3  # after every process has set Django up
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", ENQUEUER, str(start)],
            env=worker_env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    outputs = [proc.communicate(timeout=60) for proc in procs]
    for proc, (_out, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err
    answers = [out.split() for out, _ in outputs]
    assert len({pk for pk, _ in answers}) == 1
    assert sorted(created for _, created in answers) == ["False", "False", "False", "True"]
    wait_for(lambda: Job.objects.count() == 1)
    assert Job.objects.filter(unique_key="shared").count() == 1


# -- the tasks backend ------------------------------------------------------------------------


def add_key(task: Any, args: Any, kwargs: Any) -> str | None:  # noqa: ARG001 (UNIQUE_KEY's)
    """TASKS OPTIONS["UNIQUE_KEY"] of the tests: one live add() per pair of numbers."""
    return f"add:{args[0]}:{args[1]}" if task.name == "add" else None


@pytest.fixture
def unique_backend() -> Any:
    from django_sqlq import compat

    if not compat.AVAILABLE:
        pytest.skip("neither django.tasks (Django 6+) nor the django_tasks backport is installed")
    options = {"UNIQUE_KEY": "tests.enqueue.test_unique.add_key", "UNIQUE_FOR": 600}
    default = {**settings.TASKS["default"], "OPTIONS": options}
    with override_settings(TASKS={**settings.TASKS, "default": default}):
        yield compat.task_backends["default"]


@pytest.mark.usefixtures("unique_backend")
def test_the_tasks_backend_takes_the_key_from_its_option():
    from django_sqlq import compat
    from tests.testapp import tasks

    sent: list[Any] = []

    def receiver(sender: Any, task_result: Any, **kwargs: Any) -> None:  # noqa: ARG001
        sent.append(task_result)

    compat.task_enqueued.connect(receiver, weak=False)
    try:
        first = tasks.add.enqueue(1, 2)
        second = tasks.add.enqueue(1, 2)
        other = tasks.add.enqueue(2, 2)
    finally:
        compat.task_enqueued.disconnect(receiver)
    assert second.id == first.id
    assert other.id != first.id
    assert [result.id for result in sent] == [first.id, other.id]  # none for the duplicate
    assert Job.objects.count() == 2
    assert Job.objects.get(uuid=first.id).unique_key == "add:1:2"
    # UNIQUE_FOR: the finished job still holds its key for 600 seconds.
    run_burst()
    again = tasks.add.enqueue(1, 2)
    assert again.id == first.id
    assert again.status == compat.TaskResultStatus.SUCCESSFUL
    assert again.return_value == 3
    assert Job.objects.count() == 2


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"UNIQUE_KEY": 42}, "must be a function"),
        ({"UNIQUE_FOR": 60}, "unique_for needs a unique_key"),
        ({"UNIQUE_KEY": "tests.enqueue.test_unique.add_key", "UNIQUE_FOR": -1}, "positive"),
    ],
)
def test_the_tasks_backend_refuses_bad_unique_options(options, message):
    from django_sqlq import compat

    if not compat.AVAILABLE:
        pytest.skip("neither django.tasks (Django 6+) nor the django_tasks backport is installed")
    from django_sqlq.backend import SQLQBackend

    with pytest.raises(compat.InvalidTaskBackend, match=message):
        SQLQBackend("default", {"OPTIONS": options})


def test_the_admin_job_page_shows_the_key(admin_client):
    from django.urls import reverse

    job = enqueue("tests.noop", unique_key="invoice:42")
    page = admin_client.get(reverse("admin:django_sqlq_job_change", args=[job.pk]))
    assert page.status_code == 200
    assert "invoice:42" in page.content.decode()


def test_retrying_a_job_whose_key_a_live_job_holds_skips_it():
    failed = enqueue("tests.boom", unique_key="k", max_attempts=1)
    other_failed = enqueue("tests.boom", unique_key="other", max_attempts=1)
    plain_failed = enqueue("tests.boom", max_attempts=1)
    run_burst()
    live = enqueue("tests.noop", unique_key="k", delay=timedelta(hours=1))
    assert live.created is True
    outcome = lifecycle.retry_now([failed.pk, other_failed.pk, plain_failed.pk])
    assert (outcome.changed, outcome.skipped, outcome.held) == (2, 1, 1)
    assert Job.objects.get(pk=failed.pk).status == JobStatus.FAILED
    assert Job.objects.get(pk=other_failed.pk).status == JobStatus.PENDING
    assert Job.objects.get(pk=plain_failed.pk).status == JobStatus.PENDING


def test_retrying_two_finished_jobs_with_one_key_retries_the_newest():
    older = enqueue("tests.boom", unique_key="k", max_attempts=1)
    run_burst()
    newer = enqueue("tests.boom", unique_key="k", max_attempts=1)
    run_burst()
    assert newer.created is True
    assert newer.pk != older.pk
    outcome = lifecycle.retry_now([older.pk, newer.pk])
    assert (outcome.changed, outcome.skipped, outcome.held) == (1, 1, 1)
    assert Job.objects.get(pk=newer.pk).status == JobStatus.PENDING
    assert Job.objects.get(pk=older.pk).status == JobStatus.FAILED


def test_the_admins_retry_of_a_job_whose_key_is_held_names_the_key_as_the_reason(
    admin_client: Client,
) -> None:
    failed = enqueue("tests.boom", unique_key="k", max_attempts=1)
    run_burst()
    enqueue("tests.noop", unique_key="k", delay=timedelta(hours=1))
    url = reverse("admin:django_sqlq_job_retry", args=[failed.pk])
    response = admin_client.post(url, follow=True)
    [message] = [str(m) for m in response.context["messages"]]
    assert message.startswith("Retried 0 jobs")
    assert "Skipped 1 job whose unique key a live job holds" in message
    assert Job.objects.get(pk=failed.pk).status == JobStatus.FAILED
