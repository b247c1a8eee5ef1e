"""``sqlq_worker --processes N``: one supervisor, N worker processes.

For CPU-bound handlers, which threads cannot spread over cores. The supervisor forks N
children, each running an ordinary :class:`~django_sqlq.worker.Worker` with its own database
connections; it restarts a child that dies (killed, crashed, out of memory; not one that
exits 0 because it finished, as with ``--burst`` or ``--max-jobs``) and passes
SIGTERM/SIGINT on to them, so stopping behaves as for a single worker: the first signal lets
running jobs finish, a second one forces the exit.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import signal
import threading
import time
from dataclasses import dataclass, field
from multiprocessing.process import BaseProcess
from typing import Any

from django.db import connections

from django_sqlq.worker import signals as stopsignals

logger = logging.getLogger("django_sqlq.supervisor")

# A child that dies sooner than this after its start counts as crash-looping: the supervisor
# waits longer before each restart (up to MAX_RESTART_DELAY) instead of spinning.
HEALTHY_AFTER = 10.0
MAX_RESTART_DELAY = 30.0


_STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT}


def _child(worker_kwargs: dict[str, Any], burst: bool) -> None:
    """The body of one child process."""
    from django_sqlq.worker import Worker

    # The parent's handlers were copied by fork, and Worker.run installs its own only once
    # it runs: a signal that arrives before then (the supervisor stopping while this child
    # starts) must stop the worker, not kill the process or be lost.
    early: list[int] = []
    made: list[Worker] = []

    def before_run(signum: int, count: int) -> None:  # noqa: ARG001 (the callback signature)
        if made:
            made[0].stop()
        else:
            early.append(signum)

    stopsignals.install(before_run)
    # Blocked by the supervisor around the fork (see Supervisor._start): only now that this
    # process has handlers of its own can it take them; one that came meanwhile arrives here.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)
    worker = Worker(**worker_kwargs)
    made.append(worker)
    if early:
        worker.stop()
    worker.run(burst=burst)
    os._exit(1 if worker.forced else 0)


@dataclass
class _Slot:
    index: int
    process: BaseProcess | None = None
    started: float = 0.0
    restarts: int = 0
    delay: float = 0.0
    finished: bool = False
    exit_codes: list[int] = field(default_factory=list)


class Supervisor:
    def __init__(
        self, *, processes: int, worker_kwargs: dict[str, Any], burst: bool = False
    ) -> None:
        if processes < 1:
            raise ValueError("processes must be at least 1")
        self.processes = processes
        self.worker_kwargs = worker_kwargs
        self.burst = burst
        self.stop_event = threading.Event()
        self.signals_received = 0
        self.context = multiprocessing.get_context("fork")

    def _kwargs_for(self, index: int) -> dict[str, Any]:
        kwargs = dict(self.worker_kwargs)
        if kwargs.get("worker_id"):
            kwargs["worker_id"] = f"{kwargs['worker_id']}-{index}"
        return kwargs

    def _start(self, slot: _Slot) -> None:
        connections.close_all()  # never share a connection with a child
        process = self.context.Process(
            target=_child,
            args=(self._kwargs_for(slot.index), self.burst),
            name=f"sqlq-worker-{slot.index}",
            daemon=False,
        )
        # A child starts with copies of the supervisor's signal handlers: a SIGTERM that
        # reached it before _child replaced them would run the supervisor's handler there.
        # Keep the stop signals blocked across the fork; the child unblocks them itself.
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
        try:
            process.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)
        slot.process = process
        slot.started = time.monotonic()
        logger.info("Supervisor started worker process %d (pid %s)", slot.index, process.pid)

    def _forward(self, signum: int) -> None:
        for slot in self.slots:
            if slot.process is not None and slot.process.is_alive() and slot.process.pid:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(slot.process.pid, signum)

    def _on_signal(self, signum: int, count: int) -> None:
        """In a helper thread (see django_sqlq.worker.signals), for every SIGTERM/SIGINT: stop
        restarting children and pass the signal on (a second one forces their exit)."""
        self.signals_received = count
        if count == 1:
            logger.info("Supervisor received %s: stopping workers", stopsignals.name(signum))
        self.stop_event.set()
        self._forward(signum)

    def run(self) -> int:
        """Run until stopped (or, with ``burst``, until every child has drained the queue).
        Returns 0 when every child exited cleanly the last time, else 1."""
        self.slots = [_Slot(index=i) for i in range(self.processes)]
        previous = stopsignals.install(self._on_signal)
        try:
            for slot in self.slots:
                self._start(slot)
            logger.info("Supervisor ready: %d worker processes", self.processes)
            while True:
                self.stop_event.wait(0.2)
                alive = 0
                for slot in self.slots:
                    alive += self._watch(slot)
                if alive == 0:
                    break
        finally:
            stopsignals.restore(previous)
        codes = [slot.exit_codes[-1] for slot in self.slots if slot.exit_codes]
        return 0 if all(code == 0 for code in codes) else 1

    def _watch(self, slot: _Slot) -> int:
        """Check one child; restart it if it died. Returns 1 if it is (still) running."""
        process = slot.process
        if slot.finished or process is None:
            return 0
        if process.is_alive():
            return 1
        process.join()
        code = process.exitcode if process.exitcode is not None else -1
        slot.exit_codes.append(code)
        if self.stop_event.is_set() or code == 0:
            # Exit 0 is a worker that finished its work (--burst, --max-jobs) or was stopped
            # on purpose: done, not restarted. Only a crash or a kill is restarted.
            slot.finished = True
            return 0
        lived = time.monotonic() - slot.started
        crash_looping = lived < HEALTHY_AFTER
        slot.delay = min(MAX_RESTART_DELAY, slot.delay * 2 or 0.5) if crash_looping else 0.0
        slot.restarts += 1
        logger.error(
            "Worker process %d (pid %s) died with exit code %s after %.1fs; restarting in %.1fs",
            slot.index,
            process.pid,
            code,
            lived,
            slot.delay,
        )
        if self.stop_event.wait(slot.delay):
            slot.finished = True
            return 0
        self._start(slot)
        return 1
