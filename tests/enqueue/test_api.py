"""enqueue() and bulk_enqueue(): what gets written, when, and what is refused."""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.db import connections, transaction
from django.test import override_settings
from django.utils import timezone

from django_sqlq import bulk_enqueue, enqueue
from django_sqlq.exceptions import (
    InvalidJobError,
    PayloadError,
    UnknownHandlerError,
    UnknownQueueError,
)
from django_sqlq.models import Job, JobStatus
from tests.testapp import jobs as test_jobs

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "other"])


def test_enqueue_writes_a_pending_job():
    job = enqueue("tests.echo", {"to": "a@example.com"}, priority=5)
    stored = Job.objects.get(pk=job.pk)
    assert stored.type == "tests.echo"
    assert stored.payload == {"to": "a@example.com"}
    assert stored.status == JobStatus.PENDING
    assert stored.priority == 5
    assert stored.attempts == 0
    assert stored.max_attempts == 5
    assert stored.queue == "default"
    assert stored.scheduled_at is not None
    assert stored.created_at is not None
    # The returned instance carries what the database filled in.
    assert job.scheduled_at == stored.scheduled_at


def test_enqueue_accepts_the_function_and_its_dotted_path():
    by_func = enqueue(test_jobs.echo, {"x": 1})
    assert by_func.type == "tests.echo"
    by_path = enqueue("tests.testapp.jobs.by_path")
    assert by_path.type == "tests.testapp.jobs.by_path"
    assert by_path.payload == {}


def test_enqueue_rejects_an_unregistered_function():
    with pytest.raises(UnknownHandlerError, match="not_a_handler"):
        enqueue(test_jobs.not_a_handler)
    assert not Job.objects.exists()


def test_job_in_rolled_back_transaction_does_not_exist():
    # The raise is what rolls the transaction back.
    with pytest.raises(RuntimeError, match="roll back"), transaction.atomic():  # noqa: PT012
        enqueue("tests.noop")
        raise RuntimeError("roll back")
    assert Job.objects.count() == 0


def test_job_in_committed_transaction_exists():
    with transaction.atomic():
        job = enqueue("tests.noop")
        # Same database: the row is already there, inside the transaction.
        assert Job.objects.filter(pk=job.pk).exists()
    assert Job.objects.filter(pk=job.pk).exists()


def test_enqueue_is_one_query_outside_a_transaction(django_assert_max_num_queries, engine):
    with django_assert_max_num_queries(1 if engine == "sqlite" else 2):
        # PostgreSQL adds the NOTIFY that wakes idle workers.
        enqueue("tests.noop")


@override_settings(SQLQ={"DATABASE": "other", "QUEUES": ["default"]})
def test_cross_database_enqueue_waits_for_the_callers_commit():
    with transaction.atomic(using="default"):
        job = enqueue("tests.noop", {"n": 1})
        # Registered on the caller's connection, not written yet.
        assert len(connections["default"].run_on_commit) == 1
        assert not Job.objects.using("other").exists()
        assert job.pk is None
    stored = Job.objects.using("other").get()
    assert stored.pk == job.pk
    assert stored.payload == {"n": 1}
    assert not Job.objects.using("default").exists()


@override_settings(SQLQ={"DATABASE": "other", "QUEUES": ["default"]})
def test_cross_database_enqueue_in_a_rolled_back_transaction_writes_nothing():
    # The raise is what rolls the transaction back.
    with pytest.raises(RuntimeError, match="roll back"), transaction.atomic(using="default"):  # noqa: PT012
        enqueue("tests.noop")
        raise RuntimeError("roll back")
    assert not Job.objects.using("other").exists()


@override_settings(SQLQ={"DATABASE": "other", "QUEUES": ["default"]})
def test_cross_database_enqueue_happens_on_real_commit():
    with transaction.atomic(using="default"):
        enqueue("tests.noop")
        assert not Job.objects.using("other").exists()
    assert Job.objects.using("other").count() == 1


@pytest.mark.parametrize(
    "payload",
    [
        {1, 2},
        b"bytes",
        {"n": math.nan},
        {"n": math.inf},
        object(),
    ],
    ids=["set", "bytes", "nan", "inf", "object"],
)
def test_payload_json_cannot_hold_is_refused(payload):
    with pytest.raises(PayloadError, match="cannot be stored as JSON"):
        enqueue("tests.noop", payload)
    assert not Job.objects.exists()


def test_cyclic_payload_is_refused():
    cycle: dict[str, Any] = {}
    cycle["self"] = cycle
    with pytest.raises(PayloadError):
        enqueue("tests.noop", cycle)
    assert not Job.objects.exists()


@override_settings(SQLQ={"MAX_PAYLOAD_BYTES": 100})
def test_payload_over_the_size_limit_is_refused():
    with pytest.raises(PayloadError, match="over the limit of 100 bytes"):
        enqueue("tests.noop", {"blob": "x" * 200})
    assert not Job.objects.exists()


@pytest.mark.parametrize("priority", [-101, 101, 1.5, "1", True])
def test_bad_priority_is_refused(priority):
    with pytest.raises(InvalidJobError, match="priority"):
        enqueue("tests.noop", priority=priority)
    assert not Job.objects.exists()


def test_unknown_queue_is_refused():
    with pytest.raises(UnknownQueueError, match="Unknown queue 'nope'"):
        enqueue("tests.noop", queue="nope")
    assert not Job.objects.exists()


def test_naive_run_at_is_refused_with_use_tz():
    with pytest.raises(InvalidJobError, match="naive"):
        enqueue("tests.noop", run_at=datetime(2030, 1, 1))
    assert not Job.objects.exists()


def test_run_at_and_delay_together_are_refused():
    with pytest.raises(InvalidJobError, match="not both"):
        enqueue("tests.noop", run_at=timezone.now(), delay=5)


@pytest.mark.parametrize("max_attempts", [0, -1, 2.5])
def test_bad_max_attempts_is_refused(max_attempts):
    with pytest.raises(InvalidJobError, match="max_attempts"):
        enqueue("tests.noop", max_attempts=max_attempts)
    assert not Job.objects.exists()


@pytest.mark.parametrize("name", ["", "   ", "x" * 10_000])
def test_bad_type_names_are_refused(name):
    with pytest.raises(InvalidJobError):
        enqueue(name)
    assert not Job.objects.exists()


def test_errors_subclass_the_matching_builtins():
    assert issubclass(PayloadError, TypeError)
    assert issubclass(PayloadError, ValueError)
    assert issubclass(UnknownQueueError, ValueError)
    assert issubclass(UnknownHandlerError, LookupError)


def test_delay_uses_the_database_clock():
    job = enqueue("tests.noop", delay=timedelta(hours=1))
    stored = Job.objects.get(pk=job.pk)
    assert (
        timedelta(minutes=59)
        < stored.scheduled_at - stored.created_at
        <= timedelta(hours=1, seconds=1)
    )
    assert job.scheduled_at == stored.scheduled_at


def test_run_at_is_stored():
    when = timezone.now() + timedelta(days=2)
    job = enqueue("tests.noop", run_at=when)
    assert Job.objects.get(pk=job.pk).scheduled_at == when


def test_bulk_enqueue_writes_all_in_few_statements(django_assert_max_num_queries):
    with django_assert_max_num_queries(4):
        jobs = bulk_enqueue("tests.echo", [{"n": i} for i in range(500)], queue="emails")
    assert len(jobs) == 500
    assert all(job.pk is not None for job in jobs)
    assert Job.objects.filter(queue="emails").count() == 500
    assert sorted(Job.objects.values_list("payload__n", flat=True)) == list(range(500))


def test_bulk_enqueue_with_one_bad_payload_writes_nothing():
    with pytest.raises(PayloadError, match=r"payloads\[2\]"):
        bulk_enqueue("tests.echo", [{"n": 0}, {"n": 1}, {"n": {1}}])
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    "payloads", ["abc", b"ab", bytearray(b"ab"), {"to": "a@example.com"}, None, 3]
)
def test_bulk_enqueue_refuses_one_payload_where_the_list_goes(payloads):
    # Before: a string or a dict is iterable, so bulk_enqueue("t", {"to": ...}) made one job
    # per key ("to"), and a string one per character; None and 3 raised a bare TypeError.
    with pytest.raises(PayloadError, match=r"takes a list .* use enqueue\(\)"):
        bulk_enqueue("tests.echo", payloads)
    assert not Job.objects.exists()


def test_bulk_enqueue_takes_any_iterable_of_payloads():
    jobs = bulk_enqueue("tests.echo", ({"n": n} for n in range(3)))
    assert len(jobs) == 3
    assert len(bulk_enqueue("tests.echo", ())) == 0
    assert sorted(Job.objects.values_list("payload__n", flat=True)) == [0, 1, 2]


def test_bulk_enqueue_rolls_back_with_the_caller():
    # The raise is what rolls the transaction back.
    with pytest.raises(RuntimeError, match="roll back"), transaction.atomic():  # noqa: PT012
        bulk_enqueue("tests.echo", [{"n": i} for i in range(10)])
        raise RuntimeError("roll back")
    assert not Job.objects.exists()


def test_decode_json_reads_text_bytes_and_decoded_values():
    from django_sqlq.jsoncodec import decode_json, encode_json

    value = {"a": [1, "é", None]}
    assert decode_json(encode_json(value)) == value
    assert decode_json(encode_json(value).encode()) == value
    assert decode_json(value) is value


def test_new_jobs_get_time_ordered_version_7_uuids() -> None:
    """enqueue() and bulk_enqueue() (SQL), and the ORM (models.new_uuid) write version 7
    uuids: a later job's sorts after an earlier one's (the unique index's new entries go to
    its end), and the random part differs."""
    import time
    import uuid

    from django_sqlq.models import Job, new_uuid

    made = [enqueue("tests.noop").uuid]
    time.sleep(0.002)
    made += [job.uuid for job in bulk_enqueue("tests.noop", [{}, {}])]
    time.sleep(0.002)
    made.append(Job.objects.create(type="tests.noop").uuid)
    time.sleep(0.002)
    made.append(new_uuid())
    assert all(isinstance(u, uuid.UUID) and u.version == 7 for u in made), made
    assert all(u.variant == uuid.RFC_4122 for u in made)
    assert made[0] < min(made[1], made[2])
    assert max(made[1], made[2]) < made[3] < made[4]
    assert len({u.int & ((1 << 62) - 1) for u in made}) == len(made)
    assert [u for (u,) in Job.objects.order_by("id").values_list("uuid")] == made[:4]
