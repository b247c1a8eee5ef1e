"""The job-control service: twice a second, while this worker runs jobs, it reads the
cancel requests among them (one probe of a partial index) and sets each one's cancel flag (an
async handler's task is cancelled), so a handler learns of a cancel within a second; and
about once a second it writes the progress the handlers reported since the last write.
Handlers never wait on the database for either: ``set_progress()`` only stores the value in
memory, and ``cancel_requested`` reads a flag.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Mapping

from django.db import DatabaseError

from django_sqlq.control import JobControl
from django_sqlq.db import ops_for
from django_sqlq.db.columns import ClaimedJob
from django_sqlq.logs import extra_for
from django_sqlq.worker.context import HeldJobs, WorkerContext
from django_sqlq.worker.dbretry import reset_connection
from django_sqlq.worker.maintenance.service import PeriodicService

logger = logging.getLogger("django_sqlq.worker")

#: Seconds between two reads of the cancel requests: about how late a worker learns of one.
CONTROL_INTERVAL = 0.5
#: Seconds between two writes of the progress reported (at most one statement each time).
PROGRESS_INTERVAL = 1.0


class JobControls(PeriodicService):
    """The controls of the jobs this worker holds, and the service that serves them."""

    name = "control"
    interval = CONTROL_INTERVAL

    def __init__(
        self, context: WorkerContext, *, held: HeldJobs, running: Mapping[int, ClaimedJob]
    ) -> None:
        super().__init__()
        self.context = context
        self.held = held
        self.running_jobs = running  # the runner pool's, by id: for log lines
        # No lock on the runners' path (two calls a job): each step is one operation on a
        # dict, a set or a deque, atomic in CPython (also free-threaded).
        self._controls: dict[int, JobControl] = {}
        # Jobs this worker holds whose cancel was requested (read by the last tick): a job
        # among them that starts after that is not run.
        self._requested: frozenset[int] = frozenset()
        # Controls of attempts that ended with progress not yet written.
        self._ended: deque[JobControl] = deque()
        self._progress_due = 0.0  # time.monotonic() of the next write of progress

    # -- the runners' side ------------------------------------------------------------------

    def begin(self, job_id: int, attempt: int) -> JobControl:
        control = JobControl(job_id, attempt)
        self._controls[job_id] = control
        if job_id in self._requested:
            control.request_cancel()
        return control

    def end(self, control: JobControl) -> None:
        self._controls.pop(control.job_id, None)
        if control.job_id in self._requested:
            # That request was for the attempt that just ended: a retry of the job, claimed
            # again before the next read, must not inherit it.
            self._requested = self._requested - {control.job_id}
        if control.has_progress:  # reported and not written yet: written at the next write
            self._ended.append(control)

    # -- the service ------------------------------------------------------------------------

    def run(self) -> None:
        try:
            super().run()
        finally:
            self.tick(final=True)  # the last progress of the last jobs

    def tick(self, *, final: bool = False) -> None:
        context = self.context
        progress = self._progress(final=final)
        try:
            ops = ops_for(context.database)
            if progress:
                ops.write_progress(progress, worker_id=context.worker_id, now=context.now())
            if not self.held.sorted():
                self._requested = frozenset()  # nothing held: no request can apply
                return
            requested = ops.cancel_requests(worker_id=context.worker_id)
        except DatabaseError as exc:
            logger.warning(
                "Worker %s: reading cancel requests or writing progress failed (%s: %s); "
                "will retry",
                context.worker_id,
                type(exc).__name__,
                exc,
            )
            reset_connection(context.database)
            return
        self._request(requested)

    def _progress(self, *, final: bool) -> list[tuple[int, int, float, str]]:
        """The progress to write now: none until PROGRESS_INTERVAL has passed since the last
        write (unless ``final``), then the latest report of each job that made one."""
        now = time.monotonic()
        if not final and now < self._progress_due:
            return []
        controls = list(self._controls.values())
        ended: list[JobControl] = []
        while self._ended:
            ended.append(self._ended.popleft())
        progress = [
            (control.job_id, control.attempt, *reported)
            for control in (*ended, *controls)
            if (reported := control.take_progress()) is not None
        ]
        if progress:
            self._progress_due = now + PROGRESS_INTERVAL
        return progress

    def _extra(self, control: JobControl) -> dict[str, object]:
        job = self.running_jobs.get(control.job_id)
        if job is not None:
            return extra_for(job)
        return {"job_id": control.job_id, "job_attempt": control.attempt}

    def _request(self, requested: list[int]) -> None:
        self._requested = frozenset(requested)
        running = [control for i in requested if (control := self._controls.get(i)) is not None]
        for control in running:
            if control.request_cancel():
                logger.info(
                    "Worker %s: job id=%s was cancelled while it ran; its handler was told",
                    self.context.worker_id,
                    control.job_id,
                    extra=self._extra(control),
                )
