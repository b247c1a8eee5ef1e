"""Scenario 7: a long transaction holding old row versions, while jobs keep coming.

PostgreSQL: an idle-in-transaction REPEATABLE READ session holds back the xmin horizon, so
vacuum can reclaim none of the row versions that claims and completions leave behind.
MariaDB: the same session's read view holds back InnoDB's purge of the undo log (its history
list grows).
SQLite: a long read transaction pins the WAL, so checkpoints cannot reset it and it grows.
Either way throughput may drop, but never to zero, and the queue catches up afterwards.

Scaled down from a minute to SQLQ_FAULTS_HOLD_SECONDS (15 s by default).
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import cast

import pytest
from django.db import connections
from django.utils import timezone

from django_sqlq import bulk_enqueue
from django_sqlq.models import Job
from tests.faults.conftest import backends, errors_in, until

pytestmark = [pytest.mark.faults, pytest.mark.django_db(transaction=True)]

HOLD = float(os.environ.get("SQLQ_FAULTS_HOLD_SECONDS", "15"))
BEFORE, AFTER = 3.0, 4.0
BATCH, EVERY = 30, 0.1  # the producer: 30 jobs every 0.1 s, about 300 jobs/s
BUCKET = 2.0  # "never zero": no BUCKET-second window of the hold without a completion


class Producer(threading.Thread):
    def __init__(self, path: Path) -> None:
        super().__init__(name="producer", daemon=True)
        self.path = str(path)
        self.stop = threading.Event()
        self.sent = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            tick = time.monotonic()
            while not self.stop.is_set():
                payloads = [{"n": self.sent + i, "path": self.path} for i in range(BATCH)]
                bulk_enqueue("faults.record", payloads)
                self.sent += BATCH
                tick += EVERY
                self.stop.wait(max(0.0, tick - time.monotonic()))
        except BaseException as exc:
            self.error = exc
        finally:
            connections.close_all()


@contextmanager
def old_snapshot() -> Iterator[dict[str, object]]:
    """A session that read the jobs table in a transaction and then sits idle in it."""
    vendor = connections["default"].vendor
    facts: dict[str, object] = {}
    if vendor == "sqlite":
        name = connections["default"].settings_dict["NAME"]
        db = sqlite3.connect(name, isolation_level=None)
        try:
            db.execute("BEGIN")
            db.execute("SELECT count(*) FROM sqlq_job").fetchone()
            yield facts
            facts["wal_bytes_at_end_of_hold"] = Path(f"{name}-wal").stat().st_size
            db.execute("COMMIT")
        finally:
            db.close()
        return
    if vendor == "mysql":
        yield from _old_mariadb_snapshot(facts)
        return
    import psycopg

    params = dict(connections["default"].get_connection_params())
    params.pop("cursor_factory", None)
    params.pop("context", None)
    with psycopg.connect(**params) as pg:
        pg.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        pg.execute("SELECT count(*) FROM sqlq_job").fetchone()
        held = backends("SELECT count(*) FROM sqlq_job")
        assert held
        assert held[0]["state"] == "idle in transaction"
        assert held[0]["backend_xmin"]
        yield facts
        with connections["default"].cursor() as cursor:
            cursor.execute("SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'sqlq_job'")
            facts["dead_row_versions_at_end_of_hold"] = cursor.fetchone()[0]
        pg.rollback()


def _old_mariadb_snapshot(facts: dict[str, object]) -> Iterator[dict[str, object]]:
    import MySQLdb

    def history_length() -> int:
        with connections["default"].cursor() as cursor:
            cursor.execute(
                "SELECT count FROM information_schema.innodb_metrics "
                "WHERE name = 'trx_rseg_history_len'"
            )
            return int(cursor.fetchone()[0])

    db = MySQLdb.connect(**connections["default"].get_connection_params())
    try:
        with db.cursor() as cursor:
            cursor.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            cursor.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
            cursor.execute("SELECT count(*) FROM sqlq_job")
            cursor.fetchone()
            cursor.execute(
                "SELECT trx_isolation_level FROM information_schema.innodb_trx "
                "WHERE trx_mysql_thread_id = CONNECTION_ID()"
            )
            assert cursor.fetchone() == ("REPEATABLE READ",)
            before = history_length()
            yield facts
            facts["history_list_growth_during_hold"] = history_length() - before
            cursor.execute("ROLLBACK")
    finally:
        db.close()


def phase(seconds: float, producer: Producer) -> None:
    """Let ``seconds`` pass (a measured phase of the scenario), checking the producer."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        assert producer.error is None, producer.error
        time.sleep(min(0.1, max(0.0, end - time.monotonic())))


def rate(times: list[datetime], start: datetime, end: datetime) -> float:
    inside = sum(start <= t < end for t in times)
    return round(inside / max((end - start).total_seconds(), 1e-9), 1)


def test_throughput_survives_a_long_transaction(tmp_path, pool, report):
    workers = pool(2, "--concurrency", "2")
    workers.wait_ready()
    producer = Producer(tmp_path / "ran")
    producer.start()
    try:
        phase(BEFORE, producer)  # the baseline, at the producer's pace
        hold_start = timezone.now()
        with old_snapshot() as facts:
            phase(HOLD, producer)
            hold_end = timezone.now()
            backlog_at_end = Job.objects.pending().count()
        phase(AFTER, producer)
    finally:
        producer.stop.set()
        producer.join(30)
    assert producer.error is None, producer.error
    after_end = timezone.now()
    until(lambda: Job.objects.completed().count() == producer.sent, 60, "the backlog drained")
    caught_up = (timezone.now() - after_end).total_seconds()

    # Every job has completed (waited for above): no completed_at is None.
    done = cast("list[datetime]", list(Job.objects.values_list("completed_at", flat=True)))
    # Never zero while the old snapshot was held.
    buckets = Counter(int((t - hold_start).total_seconds() // BUCKET) for t in done)
    windows = range(int(HOLD // BUCKET))
    assert all(buckets[w] > 0 for w in windows), {w: buckets[w] for w in windows}
    assert workers.stop() == [0, 0]
    assert errors_in(workers.output()) == []
    per_second = Counter(int((t - hold_start).total_seconds()) for t in done)
    report(
        hold_seconds=HOLD,
        produced_per_second=BATCH / EVERY,
        jobs=producer.sent,
        completed_per_second_before=rate(done, hold_start - timedelta(seconds=BEFORE), hold_start),
        completed_per_second_during=rate(done, hold_start, hold_end),
        completed_per_second_after=rate(done, hold_end, after_end),
        slowest_second_during=min(per_second[s] for s in range(int(HOLD))),
        pending_at_end_of_hold=backlog_at_end,
        seconds_to_drain_after_the_producer_stopped=round(caught_up, 1),
        **facts,
    )
