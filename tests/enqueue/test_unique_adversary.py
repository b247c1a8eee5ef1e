"""Adversarial tests of unique jobs, written from the docs only (docs/howto/unique-jobs.md,
docs/reference/api.md, docs/howto/tasks-backend.md, docs/howto/admin.md, docs/howto/testing.md).

Each test asserts what the docs promise. The ones marked "Found from the docs" failed when
written (on the engine named) and were fixed; the others cover promises
tests/enqueue/test_unique.py did not."""

from __future__ import annotations

import enum
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.conf import settings
from django.db import connection, connections, transaction
from django.test import override_settings
from django.urls import reverse
from django.utils import timezone

from django_sqlq import abulk_enqueue, aenqueue, bulk_enqueue, enqueue, lifecycle
from django_sqlq.db import ops_for
from django_sqlq.exceptions import InvalidJobError, UniqueKeyHeldError
from django_sqlq.models import Job, JobStatus
from django_sqlq.testing import inline, run_jobs
from tests.conftest import ROOT, run_burst, wait_for

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "other"])

LIVE = (JobStatus.SCHEDULED, JobStatus.PENDING, JobStatus.PROCESSING)


def live_with(key: str) -> int:
    return Job.objects.filter(unique_key=key, status__in=LIVE).count()


def in_thread(target: Callable[[], Any]) -> threading.Thread:
    """Run ``target`` in a thread that closes its connections at the end."""

    def run() -> None:
        try:
            target()
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def backend_pid() -> int:
    """This thread's connection's server process (PostgreSQL), opening it if needed."""
    connection.ensure_connection()
    return int(connection.connection.info.backend_pid)  # type: ignore[union-attr]


def is_waiting(pid: int | None, sent: threading.Event) -> bool:
    """True once the other thread's statement waits on a lock held by a transaction: on
    PostgreSQL its backend is blocked (pg_blocking_pids, read live); on SQLite it has sent
    its statement (which waits for the one writer)."""
    if connection.vendor != "postgresql":
        return sent.is_set()
    if pid is None:
        return False
    with connection.cursor() as cursor:
        cursor.execute("SELECT cardinality(pg_blocking_pids(%s)) > 0", [pid])
        row = cursor.fetchone()
    return bool(row and row[0])


# -- bounds: what the docs say is refused, and what they say is accepted --------------------


@pytest.mark.parametrize(
    "key",
    [
        "\ud800",  # a lone surrogate
        "a\udc80b",
        "\ud83d\ude00",  # a pair written as two escapes: two lone surrogates in Python
        ["k"],
        ("k",),
        1.5,
        True,
        {"k": 1},
    ],
)
def test_keys_out_of_bounds_are_refused_everywhere_and_write_nothing(key):
    with pytest.raises(InvalidJobError):
        enqueue("tests.noop", unique_key=key)
    with pytest.raises(InvalidJobError):
        bulk_enqueue("tests.noop", [{}, {}], unique_key=[None, key])
    with pytest.raises(InvalidJobError):
        bulk_enqueue("tests.noop", [{}], unique_key=lambda _payload: key)
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    "unique_for",
    [
        timedelta.max,
        timedelta(days=365 * 101),
        timedelta(microseconds=-1),
        1.5,
        "1h",
        True,
    ],
)
def test_unique_for_out_of_bounds_is_refused_and_writes_nothing(unique_for):
    with pytest.raises(InvalidJobError):
        enqueue("tests.noop", unique_key="k", unique_for=unique_for)
    with pytest.raises(InvalidJobError):
        bulk_enqueue("tests.noop", [{}], unique_key=["k"], unique_for=unique_for)
    assert not Job.objects.exists()


def test_unique_for_of_a_hundred_years_is_accepted_and_holds():
    first = enqueue("tests.noop", unique_key="k", unique_for=timedelta(days=36500))
    run_burst()
    again = enqueue("tests.noop", unique_key="k", unique_for=timedelta(days=36500))
    assert first.created is True
    assert again.created is False
    assert again.pk == first.pk
    assert again.status == JobStatus.COMPLETED


@pytest.mark.parametrize("char", ["é", "😀", "字"])
def test_non_ascii_keys_count_characters_not_bytes(char):
    key = char * 255  # up to 1,020 bytes in UTF-8
    first = enqueue("tests.noop", unique_key=key)
    assert Job.objects.get(pk=first.pk).unique_key == key
    assert enqueue("tests.noop", unique_key=key).pk == first.pk
    with pytest.raises(InvalidJobError):
        enqueue("tests.noop", unique_key=char * 256)
    assert Job.objects.count() == 1


def test_keys_compare_exactly_case_spaces_and_normalisation_included():
    keys = ["Key", "key", "key ", "e\u0301", "\u00e9", "ss", "ß"]
    jobs = [enqueue("tests.noop", unique_key=key) for key in keys]
    assert all(job.created for job in jobs)
    assert Job.objects.count() == len(keys)


@pytest.mark.parametrize(
    "key",
    ["%(now)s", "%s", "%%", "{seconds}", "'; DROP TABLE sqlq_job; --", "a\\b", "\n\t\x01"],
)
def test_keys_that_look_like_sql_or_placeholders_are_plain_values(key):
    first = enqueue("tests.noop", unique_key=key)
    again = enqueue("tests.noop", unique_key=key, unique_for=timedelta(hours=1))
    many = bulk_enqueue("tests.noop", [{}, {}], unique_key=[key, key])
    assert first.created is True
    assert again.pk == first.pk
    assert [job.pk for job in many] == [first.pk, first.pk]
    assert Job.objects.get().unique_key == key


@pytest.mark.parametrize("key", [" ", "\t", "   "])
def test_a_key_of_blanks_is_refused_as_empty(key):
    """Found from the docs: they said "a string of 1 to 255 characters", and a key of
    blanks is refused as empty (like a blank queue name: most likely a key built from an
    empty value). The docs now say "not only blanks"; it writes nothing."""
    with pytest.raises(InvalidJobError, match="unique_key"):
        enqueue("tests.noop", unique_key=key)
    assert not Job.objects.exists()


class Colour(enum.StrEnum):
    RED = "red"


def test_a_str_subclass_key_is_the_same_key_as_its_string():
    first = enqueue("tests.noop", unique_key=Colour.RED)
    again = enqueue("tests.noop", unique_key="red")
    assert again.created is False
    assert again.pk == first.pk


# -- bulk_enqueue ------------------------------------------------------------------------------


def test_a_huge_mixed_batch_keeps_order_and_flags_across_statement_boundaries():
    """25,000 payloads (so several statements of 10,000), a key on every 1,000th, and the
    last payload repeating the first key: one Job per payload, in order."""
    n = 25_000
    keys: list[str | None] = [None if i % 1000 else f"k{i}" for i in range(n)]
    keys[-1] = "k0"
    jobs = bulk_enqueue("tests.echo", [{"n": i} for i in range(n)], unique_key=keys)
    assert len(jobs) == n
    assert all(job.payload == {"n": i} for i, job in enumerate(jobs[:-1]))
    assert all(job.created is True for job in jobs[:-1])
    assert jobs[-1].created is False
    assert jobs[-1].pk == jobs[0].pk
    assert Job.objects.count() == n - 1
    assert len({job.pk for job in jobs}) == n - 1


def test_a_rolled_back_batch_with_keys_frees_every_key():
    with pytest.raises(RuntimeError, match="roll back"), transaction.atomic():  # noqa: PT012 (the raise rolls back)
        bulk_enqueue("tests.noop", [{}, {}, {}], unique_key=["a", "a", "b"])
        raise RuntimeError("roll back")
    assert not Job.objects.exists()
    jobs = bulk_enqueue("tests.noop", [{}, {}, {}], unique_key=["a", "a", "b"])
    assert [job.created for job in jobs] == [True, False, True]


def test_a_key_function_that_raises_writes_nothing():
    def key(payload: dict[str, int]) -> str:
        if payload["n"] == 2:
            raise KeyError("no key for 2")
        return str(payload["n"])

    with pytest.raises(KeyError):
        bulk_enqueue("tests.noop", [{"n": 1}, {"n": 2}], unique_key=key)
    assert not Job.objects.exists()


def test_a_batch_in_another_databases_transaction_is_decided_at_its_commit():
    with override_settings(SQLQ={**settings.SQLQ, "DATABASE": "other"}):
        held = enqueue("tests.noop", unique_key="held")
        with transaction.atomic(using="default"):
            jobs = bulk_enqueue(
                "tests.noop", [{"i": i} for i in range(4)], unique_key=["a", "a", None, "held"]
            )
            assert [job.created for job in jobs] == [None] * 4
        assert [job.created for job in jobs] == [True, False, True, False]
        assert jobs[1].pk == jobs[0].pk
        assert jobs[3].pk == held.pk
        assert Job.objects.count() == 3


def test_aenqueue_and_abulk_enqueue_with_keys():
    @async_to_sync
    async def view() -> tuple[Job, Job, list[Job]]:
        first = await aenqueue("tests.noop", unique_key="k")
        again = await aenqueue("tests.noop", unique_key="k")
        many = await abulk_enqueue("tests.noop", [{}, {}, {}], unique_key=["k", "m", "m"])
        return first, again, many

    first, again, many = view()
    assert first.created is True
    assert again.created is False
    assert again.pk == first.pk
    assert [job.created for job in many] == [False, True, False]
    assert many[0].pk == first.pk
    assert many[2].pk == many[1].pk
    assert Job.objects.count() == 2


# -- concurrency -------------------------------------------------------------------------------


def test_two_batches_with_the_same_keys_in_opposite_orders_both_succeed():
    """Found from the docs (PostgreSQL, fixed).
    "Each key blocks as in enqueue()" and bulk_enqueue returns one
    Job per payload. Two batches over the same keys in opposite orders: each has written its
    first key when it reaches the other's, so each INSERT waits on the other transaction and
    PostgreSQL kills one with "deadlock detected" (OperationalError): that batch is lost.
    Several web processes enqueueing overlapping sets of keys meet this by themselves.
    (Writing a batch's keys in one order, sorted, would avoid it.) On SQLite the batches
    run one after the other."""
    state: dict[str, dict[str, Any]] = {
        name: {"started": threading.Event(), "first_done": threading.Event(), "pid": None}
        for name in ("a", "b")
    }
    results: dict[str, Any] = {}

    def batch(name: str, other: str, keys: list[str]) -> None:
        mine, theirs = state[name], state[other]

        def after_first_insert(execute: Any, sql: str, params: Any, many: bool, ctx: Any) -> Any:
            out = execute(sql, params, many, ctx)
            if "INSERT" in sql and not mine["first_done"].is_set():
                mine["first_done"].set()
                # Go on once the other batch has written its first key, or waits for us.
                wait_for(
                    lambda: (
                        theirs["first_done"].is_set()
                        or is_waiting(theirs["pid"], theirs["started"])
                    )
                )
            return out

        try:
            if connection.vendor == "postgresql":
                mine["pid"] = backend_pid()
            mine["started"].set()
            with connection.execute_wrapper(after_first_insert):
                results[name] = bulk_enqueue("tests.noop", [{"by": name}] * 2, unique_key=keys)
        except Exception as exc:
            results[f"{name} error"] = exc

    threads = [
        in_thread(lambda: batch("a", "b", ["x", "y"])),
        in_thread(lambda: batch("b", "a", ["y", "x"])),
    ]
    for thread in threads:
        thread.join(60)
    assert "a error" not in results, results["a error"]
    assert "b error" not in results, results["b error"]
    assert len(results["a"]) == len(results["b"]) == 2
    assert Job.objects.count() == 2
    assert live_with("x") == live_with("y") == 1


def test_a_transaction_that_rolls_back_lets_the_waiting_enqueue_write_its_job():
    """unique-jobs.md: "if it rolls back, the INSERT writes the job" (PostgreSQL waits on the
    index; SQLite's second transaction starts after the first ends)."""
    written = threading.Event()
    sent = threading.Event()
    pid: dict[str, int] = {}
    results: dict[str, Any] = {}

    def first() -> None:
        try:
            with transaction.atomic():
                enqueue("tests.noop", {"by": "first"}, unique_key="k")
                written.set()
                wait_for(lambda: is_waiting(pid.get("second"), sent))
                raise RuntimeError("roll back")
        except RuntimeError:
            pass

    def second() -> None:
        if connection.vendor == "postgresql":
            pid["second"] = backend_pid()
        assert written.wait(30)
        sent.set()
        try:
            with transaction.atomic():
                results["second"] = enqueue("tests.noop", {"by": "second"}, unique_key="k")
        except Exception as exc:  # pragma: no cover - reported below
            results["error"] = exc

    threads = [in_thread(first), in_thread(second)]
    for thread in threads:
        thread.join(60)
    assert "error" not in results, results.get("error")
    assert results["second"].created is True
    stored = Job.objects.get()
    assert stored.payload == {"by": "second"}
    assert stored.pk == results["second"].pk


@pytest.mark.parametrize("what", ["deleted", "completed"])
def test_the_holder_going_away_between_the_insert_and_the_read(what):
    """The holder is deleted (the admin) or finishes (a worker) right after the INSERT found
    the key taken and before enqueue() reads the holder: enqueue() still answers sensibly."""
    holder = enqueue("tests.noop", {"n": 1}, unique_key="k")
    done = threading.Event()

    def act() -> None:
        if what == "deleted":
            Job.objects.filter(pk=holder.pk).delete()
        else:
            run_burst()

    def meanwhile(execute: Any, sql: str, params: Any, many: bool, ctx: Any) -> Any:
        out = execute(sql, params, many, ctx)
        # The statement that finds the key taken: the INSERT (MariaDB: its plain read first).
        if ("INSERT" in sql or "live_unique_key" in sql) and not done.is_set():
            done.set()
            in_thread(act).join(30)
        return out

    with connection.execute_wrapper(meanwhile):
        job = enqueue("tests.noop", {"n": 2}, unique_key="k")
    assert done.is_set()
    if what == "deleted":
        # The key was free when it looked again: the job is written.
        assert job.created is True
        assert Job.objects.get().payload == {"n": 2}
    else:
        # The key was taken when it wrote: it returns the holder, now completed.
        assert job.created is False
        assert job.pk == holder.pk
        assert job.status == JobStatus.COMPLETED
        assert Job.objects.count() == 1


def _retry_while_an_enqueue_is_uncommitted(retry: Callable[[], Any]) -> dict[str, Any]:
    """A failed job holds key "k" in its row (not live). One transaction enqueues "k" and
    stays open; meanwhile ``retry()`` (the admin's Retry) runs in another thread and waits
    (PostgreSQL: on the unique index; SQLite: for the writer). Then the first commits."""
    written = threading.Event()
    release = threading.Event()
    sent = threading.Event()
    pid: dict[str, int] = {}
    results: dict[str, Any] = {}

    def enqueuer() -> None:
        with transaction.atomic():
            results["new"] = enqueue("tests.noop", {"new": True}, unique_key="k")
            written.set()
            assert release.wait(30)

    def retrier() -> None:
        if connection.vendor == "postgresql":
            pid["retrier"] = backend_pid()
        assert written.wait(30)
        sent.set()
        try:
            results["retry"] = retry()
        except Exception as exc:
            results["error"] = exc

    threads = [in_thread(enqueuer), in_thread(retrier)]
    try:
        assert written.wait(30)
        wait_for(lambda: is_waiting(pid.get("retrier"), sent))
    finally:
        release.set()
        for thread in threads:
            thread.join(60)
    return results


def failed_keyed_job() -> Job:
    job = enqueue("tests.boom", unique_key="k", max_attempts=1)
    run_burst()
    assert Job.objects.get(pk=job.pk).status == JobStatus.FAILED
    return job


def test_retry_now_racing_an_enqueue_of_the_key_skips_the_job():
    """Found from the docs (PostgreSQL, fixed).
    "retry_now skips a failed or cancelled job whose key a live job
    holds" and "a job whose status changed between the page and the click ... is skipped and
    left as it is". When the live job is being enqueued in a transaction that commits while
    retry_now waits, retry_now raises IntegrityError (duplicate key value violates unique
    constraint "sqlq_job_unique_key_live") instead of skipping, and retries no job of the
    batch."""
    failed = failed_keyed_job()
    results = _retry_while_an_enqueue_is_uncommitted(lambda: lifecycle.retry_now([failed.pk]))
    assert "error" not in results, results["error"]
    assert (results["retry"].changed, results["retry"].skipped) == (0, 1)
    assert Job.objects.get(pk=failed.pk).status == JobStatus.FAILED
    assert live_with("k") == 1


def test_the_admins_retry_racing_an_enqueue_of_the_key_says_it_skipped(admin_client):
    """Found from the docs (PostgreSQL, fixed).
    the same race through the admin's Retry now button: a server
    error (the IntegrityError) instead of the page with its "Skipped 1 job" message."""
    failed = failed_keyed_job()
    url = reverse("admin:django_sqlq_job_retry", args=[failed.pk])
    results = _retry_while_an_enqueue_is_uncommitted(lambda: admin_client.post(url, follow=True))
    assert "error" not in results, results["error"]
    response = results["retry"]
    assert response.status_code == 200
    messages = [str(m) for m in response.context["messages"]]
    assert any("Skipped 1 job" in m for m in messages), messages
    assert Job.objects.get(pk=failed.pk).status == JobStatus.FAILED
    assert live_with("k") == 1


# -- retries, finished jobs, the worker's own transitions -------------------------------------


def test_a_job_failed_by_the_reaper_counts_for_unique_for():
    """A worker that died: its job's lease expires, the reaper fails it (one attempt). That
    job "became failed" and has a completed_at, so unique_for covers it."""
    job = enqueue("tests.noop", unique_key="k", max_attempts=1)
    (claimed,) = ops_for("default").claim(queues=None, worker_id="dead", limit=1, lease_seconds=1)
    assert claimed.id == job.pk
    later = timezone.now() + timedelta(minutes=5)
    run_burst(clock=lambda: later)
    stored = Job.objects.get(pk=job.pk)
    assert stored.status == JobStatus.FAILED
    assert stored.completed_at is not None
    within = enqueue("tests.noop", unique_key="k", unique_for=timedelta(hours=1))
    assert within.created is False
    assert within.pk == job.pk
    fresh = enqueue("tests.noop", unique_key="k")
    assert fresh.created is True


def test_a_keyed_job_keeps_its_key_through_run_jobs_retries_then_frees_it():
    job = enqueue("tests.boom", unique_key="k", max_attempts=2)
    outcome = run_jobs(max_jobs=1)
    assert outcome.retried == 1
    assert enqueue("tests.noop", unique_key="k").pk == job.pk  # waiting for its retry
    outcome = run_jobs(with_scheduled=True)
    assert outcome.failed == 1
    assert Job.objects.get(pk=job.pk).status == JobStatus.FAILED
    again = enqueue("tests.noop", unique_key="k")
    assert again.created is True
    assert again.pk != job.pk


# -- inline mode -------------------------------------------------------------------------------


def test_inline_mode_never_runs_the_holder_of_a_taken_key(tmp_path: Path) -> None:
    """Inline mode runs each job it writes; a call that finds its key taken writes nothing,
    so it must not run the holder: not a job a worker is running, not one scheduled later,
    not a finished one returned under unique_for."""
    record = str(tmp_path / "ran")
    running = enqueue("tests.record", {"n": 1, "path": record}, unique_key="running")
    (claimed,) = ops_for("default").claim(queues=None, worker_id="w", limit=1, lease_seconds=30)
    assert claimed.id == running.pk
    later = enqueue("tests.record", {"n": 2, "path": record}, unique_key="later", delay=3600)
    with inline():
        done = enqueue("tests.record", {"n": 3, "path": record}, unique_key="done")
        assert done.status == JobStatus.COMPLETED
        answers = [
            enqueue("tests.record", {"n": 4, "path": record}, unique_key="running"),
            enqueue("tests.record", {"n": 5, "path": record}, unique_key="later"),
            *bulk_enqueue("tests.record", [{"n": 6, "path": record}], unique_key=["later"]),
            enqueue(
                "tests.record",
                {"n": 7, "path": record},
                unique_key="done",
                unique_for=timedelta(hours=1),
            ),
        ]
    assert [job.created for job in answers] == [False] * 4
    assert [job.pk for job in answers] == [running.pk, later.pk, later.pk, done.pk]
    ran = Path(record).read_text().split("\n")
    assert [line.split()[0] for line in ran if line] == ["3"]  # only the job it wrote
    assert Job.objects.get(pk=running.pk).attempts == 1
    assert Job.objects.get(pk=later.pk).status == JobStatus.SCHEDULED
    assert Job.objects.get(pk=done.pk).attempts == 1


def test_inline_bulk_enqueue_fills_in_the_outcome_of_a_key_given_twice():
    """Found from the docs (both engines, fixed).
    inline mode returns "the Job with its outcome filled in", and
    in bulk_enqueue "a key given twice writes one job, and the later payload's place in the
    returned list holds that job". Inline, that later place holds a copy taken before the
    job ran: status pending, while the job (and the first place) is completed."""
    with inline():
        jobs = bulk_enqueue("tests.echo", [{"n": 1}, {"n": 2}], unique_key=["n", "n"])
    assert [job.created for job in jobs] == [True, False]
    assert jobs[1].pk == jobs[0].pk
    assert jobs[0].status == JobStatus.COMPLETED
    assert jobs[1].status == JobStatus.COMPLETED
    assert jobs[1].result == jobs[0].result == {"n": 1}


# -- the tasks backend -------------------------------------------------------------------------


def shared_key(task: Any, args: Any, kwargs: Any) -> str:  # noqa: ARG001 (UNIQUE_KEY's)
    return "shared"


def first_arg_key(task: Any, args: Any, kwargs: Any) -> str:  # noqa: ARG001 (UNIQUE_KEY's)
    return f"first:{args[0]}"


def int_key(task: Any, args: Any, kwargs: Any) -> int:  # noqa: ARG001 (UNIQUE_KEY's)
    return 42


def empty_key(task: Any, args: Any, kwargs: Any) -> str:  # noqa: ARG001 (UNIQUE_KEY's)
    return ""


@pytest.fixture
def with_options() -> Callable[..., Any]:
    """with_options(**OPTIONS): a context manager over TASKS["default"] with these OPTIONS."""
    from django_sqlq import compat

    if not compat.AVAILABLE:
        pytest.skip("neither django.tasks (Django 6+) nor the django_tasks backport is installed")

    def make(**options: Any) -> Any:
        default = {**settings.TASKS["default"], "OPTIONS": options}
        return override_settings(TASKS={**settings.TASKS, "default": default})

    return make


def test_a_task_whose_key_a_plain_job_holds_says_so_and_names_the_holder(with_options):
    """Found from the docs: "Keys are not tied to a job type", and a task whose key a job
    holds returns that job's TaskResult. A plain enqueue() job has no TaskResult: the task
    raised TaskResultDoesNotExist ("Job 1 is not a task"), which told the caller neither
    that the key blocked it nor which job holds it. It raises UniqueKeyHeldError naming
    the job, and writes nothing."""
    from tests.testapp import tasks

    held = enqueue("tests.noop", unique_key="shared")
    with (
        with_options(UNIQUE_KEY="tests.enqueue.test_unique_adversary.shared_key"),
        pytest.raises(
            UniqueKeyHeldError, match=rf"'shared'.*held by job {held.pk} \(tests.noop\)"
        ) as raised,
    ):
        tasks.add.enqueue(1, 2)
    assert raised.value.holder == held
    assert Job.objects.count() == 1


def test_a_duplicate_tasks_result_round_trips_and_sends_no_signal(with_options):
    from django_sqlq import compat
    from tests.testapp import tasks

    sent: list[str] = []

    def receiver(sender: Any, task_result: Any, **kwargs: Any) -> None:  # noqa: ARG001
        sent.append(task_result.id)

    compat.task_enqueued.connect(receiver, weak=False)
    try:
        with with_options(UNIQUE_KEY="tests.enqueue.test_unique_adversary.first_arg_key"):
            first = tasks.add.enqueue(1, 2)
            again = tasks.add.enqueue(1, 5)  # same key, other arguments
            backend = compat.task_backends["default"]
            assert again.id == first.id
            assert again.args == [1, 2]  # the holder's, not the ones just passed
            assert backend.get_result(again.id) == again
            # The jobs table in another database: decided at the caller's commit.
            with override_settings(SQLQ={**settings.SQLQ, "DATABASE": "other"}):
                held = tasks.add.enqueue(7, 1)
                with transaction.atomic(using="default"):
                    late = tasks.add.enqueue(7, 2)
                    assert late.id == ""
                assert late.id == held.id
    finally:
        compat.task_enqueued.disconnect(receiver)
    assert sent == [first.id, held.id]


@pytest.mark.parametrize("key_function", ["int_key", "empty_key"])
def test_a_unique_key_function_returning_a_bad_key_is_refused_and_writes_nothing(
    with_options, key_function
):
    from django_sqlq import compat
    from tests.testapp import tasks

    with (
        with_options(UNIQUE_KEY=f"tests.enqueue.test_unique_adversary.{key_function}"),
        pytest.raises((compat.InvalidTask, InvalidJobError), match="unique_key"),
    ):
        tasks.add.enqueue(1, 2)
    assert not Job.objects.exists()


@pytest.mark.parametrize("unique_for", [10**12, 1e15, float("inf"), float("nan")])
def test_a_unique_for_option_out_of_bounds_raises_invalid_task_backend(with_options, unique_for):
    """Found from the docs (both engines, fixed).
    tasks-backend.md: "A bad OPTIONS value (... UNIQUE_FOR
    without UNIQUE_KEY or not positive) ... raises InvalidTaskBackend when the backend is
    first used", and a unique_for is at most 100 years. A number of seconds too big for a
    timedelta, infinite or NaN raises OverflowError or ValueError instead."""
    from django_sqlq import compat
    from tests.testapp import tasks

    with (
        with_options(
            UNIQUE_KEY="tests.enqueue.test_unique_adversary.shared_key", UNIQUE_FOR=unique_for
        ),
        pytest.raises(compat.InvalidTaskBackend, match="UNIQUE_FOR"),
    ):
        tasks.add.enqueue(1, 2)
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    "unique_key",
    ["not a path", "", "tests.no_such_module.key", "tests.settings.SECRET_KEY"],
)
def test_a_unique_key_option_that_is_no_function_raises_invalid_task_backend(
    with_options, unique_key
):
    """Found from the docs (both engines, fixed).
    tasks-backend.md: "A bad OPTIONS value (... a UNIQUE_KEY
    that is not a function or a dotted path ...) raises InvalidTaskBackend when the backend
    is first used". A string that is no dotted path, a path to no module, or a path to
    something that is not a function raises ImportError or TypeError at each enqueue."""
    from django_sqlq import compat
    from tests.testapp import tasks

    with (
        with_options(UNIQUE_KEY=unique_key),
        pytest.raises(compat.InvalidTaskBackend, match="UNIQUE_KEY"),
    ):
        tasks.add.enqueue(1, 2)
    assert not Job.objects.exists()


# -- the admin ---------------------------------------------------------------------------------


def test_the_admins_retry_of_every_failed_job_retries_the_newest_of_a_key(admin_client):
    """admin.md / unique-jobs.md: of several selected jobs with one key, Retry retries only
    the newest. With "Select all" over more jobs than the admin's action handles at once."""
    now = timezone.now()

    def failed(**fields: Any) -> Job:
        return Job(
            type="tests.echo",
            queue="default",
            status=JobStatus.FAILED,
            attempts=1,
            max_attempts=1,
            completed_at=now,
            **fields,
        )

    (older,) = Job.objects.bulk_create([failed(unique_key="k", payload={"v": "old"})])
    Job.objects.bulk_create([failed(payload={}) for _ in range(1200)])
    (newer,) = Job.objects.bulk_create([failed(unique_key="k", payload={"v": "new"})])
    response = admin_client.post(
        reverse("admin:django_sqlq_failedjob_changelist"),
        {"action": "retry_jobs", "_selected_action": [older.pk], "index": 0, "select_across": 1},
        follow=True,
    )
    assert response.status_code == 200
    assert Job.objects.get(pk=newer.pk).status == JobStatus.PENDING
    assert Job.objects.get(pk=older.pk).status == JobStatus.FAILED
    assert Job.objects.pending().count() == 1201


# -- worker processes, enqueuer processes and the admin on the same keys ---------------------

KEYED_ENQUEUER = """
import os, sys, time
import django
django.setup()
from django_sqlq import enqueue
start, path, rounds = float(sys.argv[1]), sys.argv[2], int(sys.argv[3])
while time.time() < start:
    time.sleep(0.001)
for i in range(rounds):
    n = os.getpid() * 1000 + i
    job = enqueue("tests.record", {"n": n, "path": path}, unique_key=f"k{i % 4}")
    print(job.pk, job.created, job.unique_key, flush=True)
"""


def test_workers_enqueuers_and_the_admin_on_the_same_keys(
    tmp_path, spawn_worker, worker_env, admin_client
):
    """Two sqlq_worker processes, three processes enqueueing the same four keys, and an
    operator cancelling waiting jobs and reading the lists meanwhile: every job written runs
    at most once, every "not created" answer names a job with that key, and no key ever has
    two live jobs (the index); the admin's pages stay up."""
    log = tmp_path / "ran"
    workers = [spawn_worker("--concurrency", "2", "-v", "0") for _ in range(2)]
    for worker in workers:
        worker.wait_ready()
    start = time.time() + 3  # after every process has set Django up
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", KEYED_ENQUEUER, str(start), str(log), "60"],
            env=worker_env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    changelist = reverse("admin:django_sqlq_job_changelist")
    while any(proc.poll() is None for proc in procs):
        waiting = list(Job.objects.waiting().values_list("pk", flat=True)[:5])
        if waiting:
            response = admin_client.post(
                changelist,
                {"action": "cancel_jobs", "_selected_action": waiting, "index": 0},
                follow=True,
            )
            assert response.status_code == 200
        assert admin_client.get(changelist + "?q=k1").status_code == 200
    outputs = [proc.communicate(timeout=60) for proc in procs]
    for proc, (_out, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err
    answers = [line.split() for out, _ in outputs for line in out.splitlines()]
    assert len(answers) == 180
    wait_for(lambda: not Job.objects.filter(status__in=LIVE).exists(), timeout=120)
    keys = dict(Job.objects.values_list("pk", "unique_key"))
    created = [int(pk) for pk, flag, _key in answers if flag == "True"]
    assert len(created) == len(set(created)) == len(keys)  # each job written once, told once
    for pk, _flag, key in answers:
        assert keys[int(pk)] == key
    ran = Counter(line.split()[0] for line in log.read_text().splitlines() if line)
    assert max(ran.values()) == 1
    # Every completed job ran; so did some jobs cancelled while they ran (the admin's cancel
    # of a job a worker claimed between the page and the click is a cancel request).
    completed = Job.objects.completed().count()
    cancelled_running = Job.objects.filter(
        status=JobStatus.CANCELLED, cancel_requested_at__isnull=False
    ).count()
    assert completed <= len(ran) <= completed + cancelled_running
    statuses = set(Job.objects.values_list("status", flat=True))
    assert statuses <= {JobStatus.COMPLETED, JobStatus.CANCELLED}


def test_the_admin_job_page_escapes_the_key(admin_client):
    key = "<script>alert('key')</script>"
    job = enqueue("tests.noop", unique_key=key)
    page = admin_client.get(reverse("admin:django_sqlq_job_change", args=[job.pk]))
    assert page.status_code == 200
    html = page.content.decode()
    assert key not in html
    assert "&lt;script&gt;alert(&#x27;key&#x27;)&lt;/script&gt;" in html
