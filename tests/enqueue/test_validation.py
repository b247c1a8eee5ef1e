"""Bounds at the door (django_sqlq.validation): every name, time and duration that enters
through enqueue(), bulk_enqueue(), @handler, the tasks backend, settings.SQLQ or
sqlq_worker's options, at its minimum, at its maximum and just past it. Nothing refused
is written, on either engine."""

from __future__ import annotations

import argparse
import math
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.test import override_settings
from django.utils import timezone

from django_sqlq import bulk_enqueue, enqueue, handler
from django_sqlq.conf import get_settings
from django_sqlq.db import json_depth_limit
from django_sqlq.exceptions import (
    ConfigurationError,
    InvalidJobError,
    PayloadError,
    UnknownQueueError,
)
from django_sqlq.jsoncodec import MAX_DEPTH, encode_json
from django_sqlq.management.option_types import (
    interval_seconds,
    positive_float,
    queue_name,
    worker_count,
    worker_name,
)
from django_sqlq.models import Job
from django_sqlq.validation import MAX_DELAY_SECONDS, RUN_AT_MAX, RUN_AT_MIN
from django_sqlq.worker import Worker

pytestmark = pytest.mark.django_db(transaction=True)

US = timedelta(microseconds=1)
SQLQ = {"QUEUES": ["default"], "POLL_INTERVAL": 0.05}


def refused(match: str, **options: Any) -> None:
    """enqueue and bulk_enqueue both refuse ``options`` and write nothing."""
    with pytest.raises(InvalidJobError, match=match):
        enqueue("tests.noop", **options)
    with pytest.raises(InvalidJobError, match=match):
        bulk_enqueue("tests.noop", [{}, {}], **options)
    assert not Job.objects.exists()


def accepted(**options: Any) -> Job:
    job = enqueue("tests.noop", **options)
    assert len(bulk_enqueue("tests.noop", [{}, {}], **options)) == 2
    # Every row reads back (a row Python's datetime cannot hold breaks the admin's list).
    assert len(list(Job.objects.all())) == 3
    job.refresh_from_db()
    return job


# -- delay -----------------------------------------------------------------------------------


@pytest.mark.parametrize("delay", [0, 0.0, timedelta(0), MAX_DELAY_SECONDS,
                                   timedelta(seconds=MAX_DELAY_SECONDS)])  # fmt: skip
def test_delay_at_its_bounds_is_accepted(delay):
    accepted(delay=delay)


@pytest.mark.parametrize(
    "delay",
    [-0.001, MAX_DELAY_SECONDS + 0.001, 1e12, timedelta(days=3_000_000), math.inf, math.nan,
     timedelta(microseconds=-1)],
)  # fmt: skip
def test_delay_past_its_bounds_is_refused(delay):
    refused("delay must be a finite number of seconds", delay=delay)


# -- run_at ----------------------------------------------------------------------------------


@pytest.mark.parametrize("run_at", [RUN_AT_MIN, RUN_AT_MAX - US,
                                    datetime(8999, 12, 31, 23, tzinfo=UTC)])  # fmt: skip
def test_run_at_at_its_bounds_is_accepted(run_at):
    job = accepted(run_at=run_at)
    assert job.scheduled_at == run_at


@pytest.mark.parametrize(
    "run_at",
    [RUN_AT_MIN - US, RUN_AT_MAX, datetime(9999, 12, 31, 23, 59, tzinfo=UTC),
     datetime(1, 1, 1, tzinfo=UTC), datetime.max.replace(tzinfo=UTC)],
)  # fmt: skip
def test_run_at_past_its_bounds_is_refused(run_at):
    refused("run_at must be between 1970-01-01 and 9000-01-01", run_at=run_at)


@override_settings(USE_TZ=False)
def test_naive_run_at_without_use_tz_has_the_same_bounds():
    accepted(run_at=datetime(8999, 1, 1))
    Job.objects.all().delete()
    refused("run_at must be between", run_at=datetime(9999, 1, 1))
    refused("run_at must be between", run_at=datetime(1969, 12, 31))


# -- timeout ---------------------------------------------------------------------------------


@pytest.mark.parametrize("timeout", [1e-6, 1, threading.TIMEOUT_MAX])
def test_timeout_at_its_bounds_is_accepted(timeout):
    assert accepted(timeout=timeout).timeout == timeout


@pytest.mark.parametrize(
    "timeout", [0, -1, threading.TIMEOUT_MAX * 1.0001, 1e10, math.inf, math.nan, True, "5"]
)
def test_timeout_past_its_bounds_is_refused(timeout):
    refused("timeout must be", timeout=timeout)


def test_a_handler_timeout_past_its_bounds_is_refused():
    with pytest.raises(InvalidJobError, match="A handler timeout must be"):

        @handler("tests.never_registered", timeout=1e10)
        def never(payload: Any) -> None:  # pragma: no cover
            pass


# -- names -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "match"),
    [("a\x00b", "NUL character"), ("a\udcffb", "lone surrogate"), ("\ud800", "lone surrogate")],
)
def test_type_names_no_engine_can_store_are_refused(name, match):
    with pytest.raises(InvalidJobError, match=match):
        enqueue(name)
    with pytest.raises(InvalidJobError, match=match):
        bulk_enqueue(name, [{}])
    assert not Job.objects.exists()


@pytest.mark.parametrize("queue", ["a\x00b", "a\udcffb"])
def test_queue_names_no_engine_can_store_are_refused(queue):
    with pytest.raises(UnknownQueueError):
        enqueue("tests.noop", queue=queue)
    assert not Job.objects.exists()
    with (
        override_settings(SQLQ={"QUEUES": ["default", queue]}),
        pytest.raises(ConfigurationError, match=r"SQLQ\['QUEUES'\]: A queue name cannot"),
    ):
        get_settings()
    with pytest.raises(argparse.ArgumentTypeError, match="A queue name cannot"):
        queue_name(queue)


# -- settings --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "low", "high"),
    [
        ("LEASE_SECONDS", 0.1, 86400),
        ("POLL_INTERVAL", 0.001, 86400),
        ("RETRY_BACKOFF_BASE", 0, MAX_DELAY_SECONDS),
        ("RETRY_BACKOFF_MAX", 0, MAX_DELAY_SECONDS),
        ("KEEP_FINISHED", 0, MAX_DELAY_SECONDS),
        ("MAX_ATTEMPTS", 1, 2**31 - 1),
        ("WAKE_CHECK_INTERVAL", 0.001, 60),
    ],
)
def test_duration_settings_at_and_past_their_bounds(key, low, high):
    for value in (low, high):
        with override_settings(SQLQ={**SQLQ, key: value}):
            got = getattr(get_settings(), key)
            # KEEP_FINISHED: one number stands for every finished status.
            assert (set(got.values()) == {value}) if key == "KEEP_FINISHED" else got == value
    integer = key in ("KEEP_FINISHED", "MAX_ATTEMPTS")
    step = 1 if integer else 0.0001
    for value in (low - step, high + step, *(() if integer else (math.inf, math.nan))):
        with (
            override_settings(SQLQ={**SQLQ, key: value}),
            pytest.raises(ConfigurationError, match=rf"SQLQ\['{key}'\] must be"),
        ):
            get_settings()


def test_a_project_without_sqlq_settings_reads_them_once():
    """A project on the defaults (no ``settings.SQLQ``, or an empty one) gets the settings
    from the cache after the first read, as a project with its own does: each enqueue()
    validated every setting again."""
    empty: dict[str, object] | None
    for empty in (None, {}):
        with override_settings():
            if empty is None:
                del settings.SQLQ
            else:
                settings.SQLQ = empty
            first = get_settings()
            assert first.QUEUES == ("default",)
            assert get_settings() is first


POLICY_ANSWER: list[float] = [0.0]


def policy(attempts: int) -> float:  # noqa: ARG001 (a backoff policy)
    return POLICY_ANSWER[0]


@override_settings(SQLQ={**SQLQ, "RETRY_BACKOFF": "tests.enqueue.test_validation.policy"})
@pytest.mark.parametrize(
    ("answer", "expected"),
    [(1e300, MAX_DELAY_SECONDS), (math.inf, MAX_DELAY_SECONDS), (math.nan, 0.0), (-5, 0.0),
     (7, 7.0)],
)  # fmt: skip
def test_a_backoff_policy_answer_is_bounded(answer, expected):
    from django_sqlq.retries import backoff_seconds

    POLICY_ANSWER[0] = answer
    assert backoff_seconds(1) == expected


# -- the worker's options --------------------------------------------------------------------


def test_worker_durations_at_and_past_their_bounds():
    assert positive_float("86400") == 86400
    assert positive_float("0.001") == 0.001
    assert interval_seconds("0") == 0
    assert interval_seconds("86400") == 86400
    for bad in ("0", "-1", "86400.001", "1e10", "inf", "nan"):
        with pytest.raises(argparse.ArgumentTypeError, match="must be a number of seconds"):
            positive_float(bad)
    for bad in ("-0.001", "86400.001", "inf", "nan"):
        with pytest.raises(argparse.ArgumentTypeError, match="must be a number of seconds"):
            interval_seconds(bad)
    Worker(poll_interval=86400, lease_seconds=86400)
    with pytest.raises(ValueError, match="poll_interval must be"):
        Worker(poll_interval=1e10)
    with pytest.raises(ValueError, match="lease_seconds must be"):
        Worker(lease_seconds=math.inf)


@pytest.mark.parametrize(
    "pragmas",
    [{"journal_mode": "wal; drop table sqlq_job"}, {"journal_mode": ""}, {"synchronous": 1.5},
     {"bad name;": 1}, {5: 1}],
)  # fmt: skip
def test_sqlite_pragmas_no_pragma_statement_can_hold_are_refused(pragmas):
    # Before: accepted by the settings and silent in the system checks; every connection to
    # a SQLite queue database then failed ("Unsafe SQLite pragma value").
    from django_sqlq.checks import check_settings

    with override_settings(SQLQ={**SQLQ, "SQLITE_PRAGMAS": pragmas}):
        with pytest.raises(ConfigurationError, match="SQLITE_PRAGMAS"):
            get_settings()
        assert [message.id for message in check_settings()] == ["django_sqlq.E001"]
    with override_settings(SQLQ={**SQLQ, "SQLITE_PRAGMAS": {"journal_mode": "WAL",
                                                            "busy_timeout": 5000}}):  # fmt: skip
        get_settings()


def test_worker_ids_no_engine_can_store_are_refused():
    # Before: accepted; PostgreSQL then refused every claim (too long, a NUL) and the worker
    # retried forever; a lone surrogate raised a bare UnicodeEncodeError.
    longest = "w" * 255
    assert worker_name(longest) == longest
    assert Worker(worker_id=longest).worker_id == longest
    for bad, match in (("w" * 256, "at most 255"), ("w\x00", "NUL"), ("w\ud800", "surrogate")):
        with pytest.raises(argparse.ArgumentTypeError, match=match):
            worker_name(bad)
        with pytest.raises(InvalidJobError, match=match):
            Worker(worker_id=bad)
        with pytest.raises(CommandError, match=match) as raised:
            call_command("sqlq_worker", burst=True, worker_id=bad)
        assert raised.value.returncode == 2
    # With --processes N the processes are ID-0 ... ID-(N-1): those must fit too.
    with pytest.raises(CommandError, match="at most 255") as raised:
        call_command("sqlq_worker", burst=True, processes=10, worker_id="w" * 254)
    assert raised.value.returncode == 2
    assert not Job.objects.exists()


# -- the tasks backend -----------------------------------------------------------------------


def test_the_tasks_backend_has_the_same_bounds():
    from django_sqlq import compat

    if not compat.AVAILABLE:
        pytest.skip("no tasks framework installed")
    from tests.testapp import tasks

    tasks.add.using(run_after=RUN_AT_MAX - US).enqueue(1, 2)
    assert len(list(Job.objects.all())) == 1
    for run_after in (RUN_AT_MAX, datetime(9999, 12, 31, tzinfo=UTC), RUN_AT_MIN - US):
        with pytest.raises(compat.InvalidTask, match="run_after must be between"):
            tasks.add.using(run_after=run_after).enqueue(1, 2)
    assert Job.objects.count() == 1


def test_worker_counts_at_and_past_their_bounds():
    assert worker_count("1") == 1
    assert worker_count("1000") == 1000
    for bad in ("0", "1001", "1e9"):
        with pytest.raises(argparse.ArgumentTypeError):
            worker_count(bad)


# -- payloads and options at enqueue (moved from the fault suite: they need no fault) --------

MB = 1_000_000


def test_a_50_mb_payload_is_refused_under_the_default_limit():
    blob = {"blob": "x" * (50 * MB)}
    with pytest.raises(PayloadError, match=r"is 50000011 bytes as JSON, over the limit of"):
        enqueue("faults.size", blob)
    with pytest.raises(PayloadError, match=r"payloads\[1\]: .* over the limit"):
        bulk_enqueue("faults.size", [{"blob": "small"}, blob])
    assert not Job.objects.exists()


def test_a_payload_nested_too_deeply_is_refused():
    deep: list[Any] = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(PayloadError, match="nested too deeply"):
        enqueue("tests.echo", deep)
    assert not Job.objects.exists()


def _nested(levels: int) -> Any:
    value: Any = "core"
    for _ in range(levels):
        value = [value]
    return value


def test_the_deepest_payload_the_queue_database_stores_is_accepted_one_more_level_refused():
    """MariaDB's JSON_VALID (the columns' CHECK) refuses text nested more than 31 levels, the
    other engines 1,000: the limit is the queue database's, said at enqueue, not by the
    database's CHECK at the INSERT (an IntegrityError, before)."""
    deepest = json_depth_limit(MAX_DEPTH)
    # At MariaDB's limit; elsewhere 500 levels (Python 3.11's encoder stops short of 1,000).
    job = enqueue("tests.echo", _nested(min(deepest, 500)))
    if deepest <= 100:  # read back (500 levels would need a deeper recursion limit)
        assert Job.objects.get(pk=job.pk).payload == _nested(deepest)
    with pytest.raises(PayloadError, match=f"more than {deepest} levels"):
        enqueue("tests.echo", _nested(deepest + 1))
    with pytest.raises(PayloadError, match=f"more than {deepest} levels"):
        bulk_enqueue("tests.echo", [{}, _nested(deepest + 1)])
    assert list(Job.objects.values_list("pk", flat=True)) == [job.pk]


def test_a_payload_one_statement_cannot_carry_is_refused_at_enqueue():
    """MariaDB carries a statement of at most max_allowed_packet (16 MiB by default), the
    JSON text escaped in it: a payload within MAX_PAYLOAD_BYTES but past that is refused at
    enqueue, by name, and the caller's transaction goes on (the server closed the
    connection: the caller's transaction was lost). Here the packet is made small; the
    other engines have no such limit."""
    from django.db import connection, transaction

    from django_sqlq.db import json_size_limit

    limit = get_settings().MAX_PAYLOAD_BYTES
    if connection.vendor != "mysql":
        assert json_size_limit(limit) == limit
        return
    connection.ensure_connection()
    real = json_size_limit(limit)
    assert real < limit  # 16 MiB: a 10 MiB payload, escaped, can pass it
    connection.connection.sqlq_max_packet = 300_000
    try:
        assert json_size_limit(limit) == 300_000 // 2 - 64 * 1024
        with transaction.atomic():
            kept = enqueue("tests.echo", {"blob": "x" * 50_000})
            with pytest.raises(PayloadError, match="max_allowed_packet"):
                enqueue("tests.echo", {"blob": "x" * 100_000})
            with pytest.raises(PayloadError, match="max_allowed_packet"):
                bulk_enqueue("tests.echo", [{}, {"blob": "x" * 100_000}])
        assert list(Job.objects.values_list("pk", flat=True)) == [kept.pk]
    finally:
        connection.connection.sqlq_max_packet = None  # read again


@pytest.mark.parametrize(
    "text", ["nul \x00 inside", "half a pair \ud83d", "other half \ude00", "\ude00\ud83d"]
)
def test_text_jsonb_cannot_hold_is_refused_on_every_engine(text):
    with pytest.raises(PayloadError, match="PostgreSQL's jsonb refuses"):
        enqueue("tests.echo", {"text": text})
    with pytest.raises(PayloadError, match="PostgreSQL's jsonb refuses"):
        enqueue("tests.echo", {text: 1})
    assert not Job.objects.exists()


def test_run_at_with_delay_writes_nothing_single_or_bulk():
    with pytest.raises(InvalidJobError, match="not both"):
        enqueue("tests.noop", run_at=timezone.now(), delay=5)
    with pytest.raises(InvalidJobError, match="not both"):
        bulk_enqueue("tests.noop", [{}, {}], run_at=timezone.now(), delay=timedelta(seconds=5))
    assert not Job.objects.exists()


@pytest.mark.parametrize("timeout", [0, -1, math.nan, math.inf, True, "5"])
def test_bad_timeouts_are_refused(timeout):
    with pytest.raises(InvalidJobError, match="timeout"):
        enqueue("tests.noop", timeout=timeout)
    assert not Job.objects.exists()


@pytest.mark.parametrize("delay", [-1, math.nan, math.inf, "5", True])
def test_bad_delays_are_refused(delay):
    with pytest.raises(InvalidJobError, match="delay"):
        enqueue("tests.noop", delay=delay)
    assert not Job.objects.exists()


@pytest.mark.parametrize("queue", [None, 5, ["default"], "", "x" * 10_000])
def test_queues_that_are_not_known_names_are_refused(queue):
    with pytest.raises(UnknownQueueError):
        enqueue("tests.noop", queue=queue)
    with pytest.raises(UnknownQueueError):
        bulk_enqueue("tests.noop", [{}], queue=queue)
    assert not Job.objects.exists()


def test_bulk_enqueue_refuses_what_enqueue_refuses():
    with pytest.raises(InvalidJobError, match="at most 255 characters"):
        bulk_enqueue("x" * 10_000, [{}, {}])
    with pytest.raises(InvalidJobError, match="max_attempts"):
        bulk_enqueue("tests.noop", [{}, {}], max_attempts=-3)
    with pytest.raises(PayloadError, match=r"payloads\[1\]"):
        bulk_enqueue("tests.noop", [{}, {"n": "\x00"}])
    assert not Job.objects.exists()


def test_encode_json_names_what_it_refuses():
    with pytest.raises(PayloadError, match="handler's return value"):
        encode_json({1, 2}, what="handler's return value")
