"""The worker: ``Worker`` builds the parts that claim jobs, run their handlers, write
their outcomes and keep their leases alive, wires them together, and runs them until
stopped. Each part gets the ``WorkerContext`` (``context``) and the siblings it works
with, never the ``Worker``.

Threads, each with its own database connection:

- the main thread runs the claimer's loop (``claimer``): it claims up to as many jobs as
  there are free slots, in one statement, puts them in the runner pool's inbox, and has
  the completer (``completer``) write the outcomes the runners buffered, completed and
  failed, in batches (fenced by worker id and attempt number);
- ``concurrency`` runner threads (``pool``) run handlers (``invoke``);
- the maintenance services (``maintenance``): the heartbeat renews the leases of all the
  jobs this worker holds in one statement (until the last running job is finished, also
  after SIGTERM), records the worker's liveness and runs the reaper; the tidier VACUUMs;
  the job controls read the cancel requests (twice a second) and write the handlers'
  progress (once a second); the ticker enqueues the recurring jobs' ticks; the pruner
  deletes finished jobs older than ``KEEP_FINISHED``.

Signal handlers (``signals``) only set an event. On stop the worker claims nothing more,
lets running jobs finish, gives back jobs it claimed but did not start, and returns. A
second signal gives back the unstarted jobs, records each interrupted attempt as failed at
once (retried or failed by its attempts, fenced like every outcome; a job whose outcome
cannot be written is left to its lease), and exits.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime

from django.db import DatabaseError, connections

from django_sqlq import registry, validation
from django_sqlq.conf import Settings, get_settings
from django_sqlq.db.columns import ClaimedJob
from django_sqlq.models import WorkerProcess
from django_sqlq.retries import RetryPolicy
from django_sqlq.worker.claimer import Claimer
from django_sqlq.worker.completer import Completer
from django_sqlq.worker.context import Clock, Counts, HeldJobs, WorkerContext
from django_sqlq.worker.maintenance import (
    Heartbeat,
    JobControls,
    Pruner,
    Reaper,
    Scheduler,
    Service,
    Tidier,
)
from django_sqlq.worker.pool import RunnerPool
from django_sqlq.worker.queuecontrol import QueueControl
from django_sqlq.worker.signals import ForcedStop, worker_signals
from django_sqlq.worker.staging import Stager
from django_sqlq.worker.startup import WorkerError, check_ready, unreachable
from django_sqlq.worker.stats import WorkerStats
from django_sqlq.worker.summary import Summary

logger = logging.getLogger("django_sqlq.worker")
# A line per job (started: DEBUG, finished: INFO). sqlq_worker shows them from -v 2; at the
# default verbosity a summary line every SUMMARY_INTERVAL seconds stands in for them.
job_logger = logging.getLogger("django_sqlq.worker.jobs")

__all__ = ["Worker", "WorkerError", "default_worker_id", "unreachable"]


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Worker:
    """Runs jobs from the queue database until stopped (or, with ``burst``, until idle)."""

    def __init__(
        self,
        *,
        queues: Sequence[str] | None = None,
        exclude_queues: Sequence[str] = (),
        all_queues: bool = False,
        concurrency: int = 1,
        poll_interval: float | None = None,
        database: str | None = None,
        worker_id: str | None = None,
        max_jobs: int | None = None,
        lease_seconds: float | None = None,
        clock: Clock | None = None,
        backoff: Callable[[int], float] | None = None,
        settings: Settings | None = None,
        on_ready: Callable[[Worker], None] | None = None,
        queue_limits: Mapping[str, int] | None = None,
    ) -> None:
        conf = settings or get_settings()
        self.on_ready = on_ready
        self.conf = conf
        self.database = database or conf.DATABASE
        # None serves every queue (the tasks backend's "*"), less exclude_queues.
        self.queues: tuple[str, ...] | None = (
            None if all_queues else tuple(queues) if queues is not None else conf.QUEUES
        )
        self.exclude_queues = tuple(exclude_queues)
        queue_limits = dict(queue_limits or {})
        for name, most in queue_limits.items():
            if self.queues is not None and name not in self.queues:
                raise ValueError(
                    f"queue_limits names {name!r}, a queue this worker does not serve"
                )
            if isinstance(most, bool) or not isinstance(most, int) or most < 1:
                raise ValueError(f"queue_limits[{name!r}] must be an integer >= 1, got {most!r}")
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.concurrency = concurrency
        self.poll_interval = validation.seconds(
            "poll_interval",
            poll_interval if poll_interval is not None else conf.POLL_INTERVAL,
            maximum=validation.MAX_INTERVAL_SECONDS,
            allow_zero=True,
            error=ValueError,
        )
        self.worker_id = (
            validation.check_worker_id(worker_id) if worker_id else default_worker_id()
        )
        self.max_jobs = max_jobs
        self.lease_seconds = validation.seconds(
            "lease_seconds",
            lease_seconds if lease_seconds is not None else conf.LEASE_SECONDS,
            maximum=validation.MAX_INTERVAL_SECONDS,
            error=ValueError,
        )
        self.clock = clock
        if backoff is None:
            conf.backoff_function()  # a policy that cannot be imported: an error at start
        self.retries = (
            RetryPolicy(backoff) if backoff is not None else RetryPolicy.from_settings(conf)
        )

        # What every part shares (frozen: the attributes above are not changed later).
        self.context = context = WorkerContext(
            worker_id=self.worker_id,
            database=self.database,
            conf=conf,
            queues=self.queues,
            exclude_queues=self.exclude_queues,
            concurrency=concurrency,
            poll_interval=self.poll_interval,
            lease_seconds=self.lease_seconds,
            max_jobs=max_jobs,
            clock=clock,
        )
        self.stop_event = context.stop_event
        self.wakeup = context.wakeup

        # The parts, each in a module of its own (see the package docstring), given the
        # context and the siblings they work with.
        self.held = held = HeldJobs()
        self.counts = counts = Counts()
        self.stats = stats = WorkerStats()  # per queue, for the Prometheus view (metrics)
        running: dict[int, ClaimedJob] = {}  # the jobs running now, by id
        self.controls = JobControls(context, held=held, running=running)
        self.queue_control = QueueControl(context, queue_limits)
        self.staging = Stager(context)
        self.completer = Completer(
            context,
            held=held,
            counts=counts,
            stats=stats,
            retries=self.retries,
            retry_scheduled=self.staging.retry_scheduled,
        )
        self.pool = RunnerPool(
            context,
            completer=self.completer,
            controls=self.controls,
            queue_control=self.queue_control,
            held=held,
            stats=stats,
            running=running,
        )
        self.tidier = Tidier(context)
        self.reaper = Reaper(context)
        self.heartbeat = Heartbeat(
            context, held=held, reaper=self.reaper, counts=counts, stats=stats
        )
        self.summary = Summary(self.worker_id, counts, running)
        self.claimer = Claimer(
            context,
            pool=self.pool,
            completer=self.completer,
            staging=self.staging,
            queue_control=self.queue_control,
            held=held,
            tidier=self.tidier,
            summary=self.summary,
        )
        self.pruner = Pruner(context)
        self.scheduler = Scheduler(context)  # recurring jobs (SQLQ["SCHEDULE"], @handler(cron=))
        # Maintenance started with the runners, stopped once they are done.
        self.services: list[Service] = [self.heartbeat, self.controls, self.pruner, self.scheduler]

    @property
    def jobs_claimed(self) -> int:
        return self.claimer.jobs_claimed

    @property
    def jobs_done(self) -> int:
        return self.counts.done

    @property
    def jobs_failed(self) -> int:
        """Failed attempts, retried or not."""
        return self.counts.failed

    @property
    def jobs_retried(self) -> int:
        """Failed attempts that will be retried."""
        return self.counts.retried

    @property
    def forced(self) -> bool:
        """Whether a second signal came: database writes are tried once, running jobs
        abandoned."""
        return self.context.forced.is_set()

    @forced.setter
    def forced(self, value: bool) -> None:
        if value:
            self.context.forced.set()
        else:
            self.context.forced.clear()

    def now(self) -> datetime | None:
        """The injected clock, or None: the database's clock."""
        return self.context.now()

    def stop(self) -> None:
        """Ask the worker to stop gracefully (what SIGTERM does). Safe from any thread."""
        self.stop_event.set()
        self.wakeup.set()

    def wake(self) -> None:
        self.wakeup.set()

    def run(self, *, burst: bool = False, install_signal_handlers: bool = True) -> int:
        """Work until stopped; with ``burst``, until no runnable job is left. Returns the
        number of jobs this worker finished (completed, failed or cancelled attempts)."""
        self._check_ready()
        registry.autodiscover()
        logger.info(
            "Worker %s starting: queues=%s concurrency=%d database=%s",
            self.worker_id,
            ",".join(self.queues) if self.queues is not None else "*",
            self.concurrency,
            self.database,
        )
        # A bad schedule stops the worker here, naming it. A --burst worker checks the
        # schedules but enqueues no ticks: it drains what is there and exits.
        self.scheduler.prepare(active=not burst)
        self._register()
        self.pool.start()
        for service in self.services:
            service.start()
        signals = worker_signals(self) if install_signal_handlers else contextlib.nullcontext()
        forced = False
        try:
            with signals:
                try:
                    self.reaper.reap()
                    self.queue_control.start()
                    self.summary.start()
                    if self.on_ready is not None:
                        self.on_ready(self)  # sqlq_worker prints the ready line itself
                    else:
                        logger.info("Worker %s ready", self.worker_id)
                    self.claimer.loop(burst=burst)
                finally:
                    # Claim nothing more; give back what was claimed and not started, wait
                    # for the running jobs. Not after a second signal: it may have arrived
                    # before this point (still in the loop), and waiting for the running
                    # jobs is what it cancels; the except clause below does the rest.
                    self.stop_event.set()
                    if not self.forced:
                        self.pool.release_unstarted()
                        self.pool.stop()
                        self.completer.flush(force=True)
                        self.tidier.join()
        except ForcedStop:
            forced = True
            self.forced = True  # from here on, database writes are tried once, not retried
            self.pool.release_unstarted()
            try:
                # Finished jobs are not lost, if the database answers.
                self.completer.flush(force=True)
            except DatabaseError:
                logger.exception("Worker %s could not record finished jobs", self.worker_id)
        finally:
            self.stop_event.set()
            for service in self.services:
                service.stop()
            if not forced:
                for service in self.services:
                    service.join(timeout=5)
            else:
                # Out of the except clause: the tasks framework's task_finished logging
                # would attach the ForcedStop it finds in sys.exc_info() as a traceback.
                self.completer.record_interrupted(list(self.pool.running.values()))
            self._unregister()
            connections.close_all()
        # "gracefully": its running jobs were finished and the rest given back (the word
        # db_worker's last line has, which scripts moving from it look for).
        logger.info(
            "Worker %s stopped %s: %d done, %d failed, %d retried, %d cancelled",
            self.worker_id,
            "at once, by a second signal" if forced else "gracefully",
            self.jobs_done,
            self.jobs_failed - self.jobs_retried,
            self.jobs_retried,
            self.counts.cancelled,
        )
        return self.jobs_done + self.jobs_failed + self.counts.cancelled

    def _check_ready(self) -> None:
        """Raise WorkerError unless this worker can start (sqlq_worker --processes checks
        once, before starting any child)."""
        check_ready(self.database)

    def _register(self) -> None:
        try:
            WorkerProcess.objects.using(self.database).register(
                self.worker_id,
                queues=list(self.queues) if self.queues is not None else ["*"],
                concurrency=self.concurrency,
            )
        except DatabaseError as exc:
            logger.warning("Worker %s could not register itself: %s", self.worker_id, exc)

    def _unregister(self) -> None:
        try:
            WorkerProcess.objects.using(self.database).deregister(
                self.worker_id,
                jobs_done=self.jobs_done,
                jobs_failed=self.jobs_failed,
                stats=self.stats.as_json(),
            )
        except DatabaseError as exc:
            logger.warning("Worker %s could not record its stop: %s", self.worker_id, exc)
