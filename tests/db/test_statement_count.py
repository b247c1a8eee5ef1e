"""The statements a plain drain sends: one claim per batch, one completion per batch, nothing
per job (issue 22). A feature that adds a statement to the plain path fails here, whatever
its cost on this machine.

A real ``Worker`` drains no-op jobs in this process; every statement on the queue
database's connections, in every thread of the worker, is recorded and sorted by kind. The
counts are checked against the batches the worker claimed and wrote, as the worker itself
counted them (``QueueOps.claim`` and the completer's writes, observed), never against
totals written down here.
"""

from __future__ import annotations

import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import connections
from django.db.backends.signals import connection_created

from django_sqlq import bulk_enqueue
from django_sqlq.db import ops_for
from django_sqlq.db.columns import ClaimedJob
from django_sqlq.models import Job
from django_sqlq.worker import claimer as claimer_module
from django_sqlq.worker.completer import Completer
from django_sqlq.worker.maintenance.jobcontrols import CONTROL_INTERVAL
from django_sqlq.worker.queuecontrol import WOKEN_REFRESH_INTERVAL
from tests.conftest import run_burst

pytestmark = pytest.mark.django_db(transaction=True)

MARIADB = connections["default"].vendor == "mysql"

N = 1000
#: Claims that find nothing at the end of a burst: one while the last jobs still run, one
#: once the worker is idle, and one more if a wake-up comes between them.
END_LOOKS = 3
#: The worker's default (conf.py); the tests' settings poll far more often.
POLL_INTERVAL = 1.0
# A job whose row the heartbeat's lease renewal holds at the instant its batch is written is
# skipped by the batch statement (SKIP LOCKED, PostgreSQL) and written by the path that waits:
# one more completion statement, a few times in a run on a loaded machine. A statement per job
# would be a thousand more.
SKIPPED_SLACK = 5


class Statements:
    """Every statement sent on the default alias's connections while recording, by kind."""

    def __init__(self) -> None:
        self.kinds: Counter[str] = Counter()
        self.others: Counter[str] = Counter()
        self.lock = threading.Lock()
        self.seconds = 0.0
        table = Job._meta.db_table
        self.claim = f"UPDATE {table} SET status = 'processing'"
        self.completion = (
            f"UPDATE {table} SET status = CASE WHEN {table}.cancel_requested_at IS NULL "
            "THEN 'completed'"
        )
        #: The UPDATE that follows a claim's or a completion's locking read (MariaDB).
        self.updates: dict[str, str] = {}
        if MARIADB:
            # No UPDATE ... RETURNING: a claim is its locking read (of every queue at once),
            # then an UPDATE of the rows it found, none when it found none; a completion too.
            self.updates = {
                self.claim: "claim update",
                f"UPDATE {table} SET status = CASE WHEN cancel_requested_at IS NULL": (
                    "completion update"
                ),
            }
            # Over several queues, a read of ids first (locking nothing) sizes each queue's
            # arm: one per claim at most.
            self.claim_arm = re.compile(
                rf"SELECT \d+ AS arm, {re.escape(', '.join(ClaimedJob._fields))} FROM {table} "
            )
            self.probe_arm = re.compile(rf"SELECT \d+ AS arm, id FROM {table} ")
            self.completion = f"SELECT id, attempts, cancel_requested_at IS NULL FROM {table} "

    def kind(self, sql: str) -> str:
        for prefix, kind in self.updates.items():
            if sql.startswith(prefix):
                return kind
        if MARIADB:  # one arm per queue, or several
            if self.claim_arm.match(sql.lstrip("(")):
                return "claim"
            if self.probe_arm.match(sql.lstrip("(")):
                return "claim probe"
        elif sql.startswith(self.claim):
            return "claim"
        if sql.startswith(self.completion):
            return "completion"
        return "other"

    def __call__(
        self, execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any
    ) -> Any:
        kind = self.kind(sql)
        with self.lock:
            self.kinds[kind] += 1
            if kind == "other":
                self.others[" ".join(sql.split()[:8])] += 1
        return execute(sql, params, many, context)


@pytest.fixture
def statements() -> Iterator[Statements]:
    """Record the statements of this thread's connection and of every connection a worker
    thread opens meanwhile."""
    recorder = Statements()

    def install(sender: Any, connection: Any, **kwargs: Any) -> None:  # noqa: ARG001
        if connection.alias == "default" and recorder not in connection.execute_wrappers:
            connection.execute_wrappers.append(recorder)

    connection_created.connect(install)
    try:
        with connections["default"].execute_wrapper(recorder):
            yield recorder
    finally:
        connection_created.disconnect(install)


@pytest.fixture
def batches(monkeypatch: pytest.MonkeyPatch) -> tuple[list[int], list[int]]:
    """The jobs of each claim and of each completion write, as the worker makes them."""
    claimed: list[int] = []
    written: list[int] = []
    ops_class = type(ops_for("default"))
    claim, complete = ops_class.claim, Completer._write

    def counted_claim(self: Any, *args: Any, **kwargs: Any) -> Any:
        jobs = claim(self, *args, **kwargs)
        claimed.append(len(jobs))
        return jobs

    def counted_complete(self: Completer, batch: list[Any]) -> Any:
        written.append(len(batch))
        return complete(self, batch)

    monkeypatch.setattr(ops_class, "claim", counted_claim)
    monkeypatch.setattr(Completer, "_write", counted_complete)
    return claimed, written


def drain(statements: Statements) -> None:
    bulk_enqueue("tests.noop", [{"i": i} for i in range(N)])
    statements.kinds.clear()
    statements.others.clear()
    started = time.monotonic()
    run_burst(concurrency=1, poll_interval=POLL_INTERVAL)
    statements.seconds = time.monotonic() - started
    assert Job.objects.completed().count() == N


def test_a_plain_drain_sends_one_claim_and_one_completion_per_batch(
    statements: Statements, batches: tuple[list[int], list[int]]
) -> None:
    claimed, written = batches
    drain(statements)

    # One claim statement per claim; each finds a batch but the burst's last looks at the
    # empty queue (while the last jobs run, and once idle).
    assert_one_claim_statement_per_claim(statements, claimed)
    assert sum(claimed) == N
    assert claimed.count(0) <= END_LOOKS, claimed
    # One completion statement per batch written; every job is written in one of them.
    assert len(written) <= statements.kinds["completion"] <= len(written) + SKIPPED_SLACK
    assert sum(written) == N
    assert min(written) >= 1
    # Batches, not jobs: fast jobs are claimed and written many at a time.
    assert len(claimed) <= N / 10, claimed
    assert len(written) <= N / 10, written
    assert_updates_follow_reads(statements, claimed)


def assert_one_claim_statement_per_claim(statements: Statements, claimed: list[int]) -> None:
    """A claim is one statement. On MariaDB over several queues, a read of ids comes first
    (sizing each queue's arm), and the locking read follows unless it found nothing."""
    probes = statements.kinds["claim probe"]
    if probes:
        assert MARIADB
        assert probes == len(claimed)
        assert len([n for n in claimed if n]) <= statements.kinds["claim"] <= len(claimed)
    else:
        assert statements.kinds["claim"] == len(claimed)


def assert_updates_follow_reads(statements: Statements, claimed: list[int]) -> None:
    """MariaDB: one UPDATE per claim that found jobs, at most one per completion's read."""
    if MARIADB:
        assert statements.kinds["claim update"] == len([n for n in claimed if n])
        assert statements.kinds["claim probe"] <= len(claimed)
        assert 1 <= statements.kinds["completion update"] <= statements.kinds["completion"]
    else:
        assert statements.kinds["claim update"] == statements.kinds["completion update"] == 0


def test_nothing_else_is_sent_per_job_or_per_batch(
    statements: Statements,
    batches: tuple[list[int], list[int]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With prefetch off, every claim takes one job (concurrency 1): batches of one, a
    thousand of them. What else the worker sends is its start and stop (measured here on
    an empty queue) and its upkeep, which runs on timers: the cancel requests every
    CONTROL_INTERVAL, the paused queues at most every WOKEN_REFRESH_INTERVAL, the next due
    time every poll interval. A statement a later feature sends per job or per batch grows
    with the batches instead, beyond that bound."""
    claimed, written = batches
    monkeypatch.setattr(claimer_module, "MAX_PREFETCH", 0)
    run_burst(concurrency=1, poll_interval=POLL_INTERVAL)  # nothing to do: start and stop
    start_and_stop = statements.kinds["other"]
    assert statements.kinds["claim"] <= END_LOOKS
    claimed.clear()
    drain(statements)

    nonempty = [n for n in claimed if n]
    assert len(nonempty) == N  # batches of one job
    assert_one_claim_statement_per_claim(statements, claimed)
    assert len(claimed) <= N + END_LOOKS
    assert len(written) <= len(nonempty)
    assert len(written) <= statements.kinds["completion"] <= len(written) + SKIPPED_SLACK
    assert sum(written) == N
    upkeep = 1 / CONTROL_INTERVAL + 1 / WOKEN_REFRESH_INTERVAL + 1 / POLL_INTERVAL
    others = statements.kinds["other"]
    assert others <= start_and_stop + upkeep * statements.seconds, (
        statements.seconds,
        statements.others.most_common(10),
    )
    assert others < len(nonempty), statements.others.most_common(10)
    assert_updates_follow_reads(statements, claimed)


def test_the_claim_recognised_here_is_the_workers(statements: Statements) -> None:
    """The kinds above match the statements the engine's QueueOps sends (a renamed statement
    would otherwise count as "other" and the first test would fail for the wrong reason)."""
    ops = ops_for("default")
    sql, _ = ops.claim_sql(["default"], worker_id="w", limit=1, lease_seconds=60)
    assert statements.kind(sql) == "claim"


def test_failed_attempts_are_written_in_batches_too(batches: tuple[list[int], list[int]]) -> None:
    """A drain of jobs that all fail writes their failures as it writes completions: many
    in one transaction of the outcome writer, not a transaction per job."""
    _, written = batches
    bulk_enqueue("tests.boom", [{"i": i} for i in range(N)], max_attempts=1)
    run_burst(concurrency=1, poll_interval=POLL_INTERVAL)
    assert Job.objects.failed().count() == N
    assert sum(written) == N
    assert len(written) <= N / 10, written
