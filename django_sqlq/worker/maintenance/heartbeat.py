"""The heartbeat: keeps this worker's leases and its row in the workers table alive.

Every third of ``lease_seconds`` (at most every 10 s) it renews the leases of all the jobs
the worker holds, in one statement, records the worker's liveness and counts, and, every
half lease (at most every 30 s), runs the reaper. It stops only once the last running job
is finished, also after SIGTERM: until then the running jobs need their leases renewed,
or another worker would take them over mid-run.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

from django.db import DatabaseError

from django_sqlq import lifecycle
from django_sqlq.models import WorkerProcess
from django_sqlq.worker.maintenance.service import PeriodicService
from django_sqlq.worker.retry import reset_connection

if TYPE_CHECKING:
    from django_sqlq.worker.core import Worker

logger = logging.getLogger("django_sqlq.worker")


class HeldJobs:
    """The ids of the jobs this worker holds: claimed, and their outcome not yet written (or
    given up on). The heartbeat renews these leases and no others, so a job the worker lost
    track of (a claim whose reply never arrived, an outcome that could not be written) is
    not kept alive forever: its lease runs out and the reaper frees it."""

    def __init__(self) -> None:
        self._ids: set[int] = set()
        self._lock = threading.Lock()

    def add(self, ids: Iterable[int]) -> None:
        with self._lock:
            self._ids.update(ids)

    def discard(self, ids: Iterable[int]) -> None:
        with self._lock:
            self._ids.difference_update(ids)

    def sorted(self) -> list[int]:
        with self._lock:
            return sorted(self._ids)


class Heartbeat(PeriodicService):
    name = "heartbeat"

    def __init__(self, worker: Worker) -> None:
        super().__init__()
        self.worker = worker
        self.interval = max(0.05, min(worker.lease_seconds / 3, 10.0))
        self.reap_every = max(self.interval, min(worker.lease_seconds / 2, 30.0))
        self.last_reap = 0.0

    def run(self) -> None:
        self.last_reap = time.monotonic()  # the worker reaps once as it starts
        super().run()

    def tick(self) -> None:
        worker = self.worker
        try:
            held = worker.held.sorted()
            if held:
                lifecycle.extend_leases(
                    worker.database,
                    worker_id=worker.worker_id,
                    lease_seconds=worker.lease_seconds,
                    now=worker.now(),
                    job_ids=held,
                )
            WorkerProcess.objects.using(worker.database).heartbeat(
                worker.worker_id,
                jobs_done=worker.jobs_done,
                jobs_failed=worker.jobs_failed,
                stats=worker.stats.as_json(),
            )
            if time.monotonic() - self.last_reap >= self.reap_every:
                self.last_reap = time.monotonic()
                worker.reaper.reap()
        except DatabaseError as exc:
            logger.warning(
                "Worker %s: heartbeat failed (%s: %s); will retry",
                worker.worker_id,
                type(exc).__name__,
                exc,
            )
            reset_connection(worker.database)
