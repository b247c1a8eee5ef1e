"""A claim over several queues, each holding a backlog: it locks no more than the batch it
keeps, and rows another worker is claiming do not starve the next queue.

On MariaDB the claim is one locking read with an arm per queue; each arm used to take a
whole batch, so over 20 queues holding work a claim locked and read 20 batches to keep one
(the drain of ``benchmarks/run shapes``, backlog: 0.43x an empty table). A read of ids
first sizes each arm (``db.mysql_path.MySQLClaimOps._shares``)."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_sqlq import bulk_enqueue
from django_sqlq.db import ops_for
from django_sqlq.models import Job
from tests.conftest import held_elsewhere

pytestmark = pytest.mark.django_db(transaction=True)

QUEUES = ["default", "emails", "reports"]  # tests.settings: SQLQ["QUEUES"]


def _backlogs(per_queue: int = 20) -> None:
    for queue in QUEUES:
        bulk_enqueue("tests.noop", [{} for _ in range(per_queue)], queue=queue)


def _claim(limit: int, turn: int = 0) -> list[str]:
    jobs = ops_for("default").claim(
        queues=QUEUES, worker_id="w", limit=limit, lease_seconds=60, turn=turn
    )
    return [Job.objects.get(pk=job.id).queue for job in jobs]


def test_a_claim_over_queues_with_backlogs_takes_its_batch_in_the_queues_order() -> None:
    _backlogs()
    assert _claim(5) == ["default"] * 5
    # The next claim starts at the next queue (turns), the batch spilling into the one after.
    taken = _claim(25, turn=1)
    assert taken == ["emails"] * 20 + ["reports"] * 5
    assert Job.objects.filter(status="processing").count() == 30


@pytest.mark.skipif(connection.vendor != "mysql", reason="MariaDB's claim: an arm per queue")
def test_the_locking_read_over_queues_asks_for_no_more_rows_than_the_batch() -> None:
    _backlogs()
    with CaptureQueriesContext(connection) as captured:
        assert len(_claim(5)) == 5
    locking = [q["sql"] for q in captured.captured_queries if "FOR UPDATE SKIP LOCKED" in q["sql"]]
    assert len(locking) == 1, locking
    assert sum(int(n) for n in re.findall(r"LIMIT (\d+)", locking[0])) == 5, locking[0]


@pytest.mark.skipif(
    connection.vendor == "sqlite", reason="row locks: SQLite has one writer at a time"
)
def test_rows_another_worker_is_claiming_do_not_starve_the_next_queue() -> None:
    """Another transaction holds the first queue's rows (a worker in the middle of its
    claim): a claim passes over them and takes the next queue's, a whole batch."""
    _backlogs()
    with held_elsewhere(lambda: list(Job.objects.select_for_update().filter(queue="default"))):
        assert _claim(8) == ["emails"] * 8
    assert Job.objects.filter(queue="default", status="pending").count() == 20
