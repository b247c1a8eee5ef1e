"""SIGTERM/SIGINT for the worker and the supervisor: one mechanism for both.

The first signal asks for a graceful stop; with the worker, a second one forces it
(``ForcedStop`` in the main thread, see :func:`worker_signals`).

A Python signal handler runs in the main thread between two bytecodes, possibly while that
thread holds the lock inside a ``threading.Event`` or ``Condition`` (in ``Event.wait``), and
those locks are not reentrant: a handler that calls ``Event.set()`` can deadlock the process.
So the handler here only counts the signal and starts a short-lived thread that does the
work (``on_stop``). Only ``on_force`` (a later signal, if given) runs in the handler itself,
so that it can raise in the main thread to interrupt what it is doing.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any, Protocol

logger = logging.getLogger("django_sqlq.worker")

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)

OnStop = Callable[[int, int], None]  # (signal number, how many received so far)
OnForce = Callable[[int], None]


def handler(on_stop: OnStop, on_force: OnForce | None = None) -> Callable[[int, Any], None]:
    """A signal handler: ``on_stop(signum, count)`` in a new thread for each signal, or
    ``on_force(signum)`` in the handler for the second and later ones when given."""
    received = 0

    def handle(signum: int, frame: FrameType | None) -> None:  # noqa: ARG001 (signal.signal's)
        nonlocal received
        received += 1
        if received > 1 and on_force is not None:
            on_force(signum)
            return
        threading.Thread(
            target=on_stop, args=(signum, received), name="sqlq-stop", daemon=True
        ).start()

    return handle


def install(on_stop: OnStop, on_force: OnForce | None = None) -> dict[int, Any]:
    """Install the handler for SIGTERM and SIGINT; returns the previous handlers."""
    handle = handler(on_stop, on_force)
    return {sig: signal.signal(sig, handle) for sig in STOP_SIGNALS}


def restore(previous: dict[int, Any]) -> None:
    for sig, old in previous.items():
        signal.signal(sig, old)


@contextlib.contextmanager
def stop_signals(on_stop: OnStop, on_force: OnForce | None = None) -> Iterator[None]:
    """SIGTERM/SIGINT handled as :func:`handler` says while the block runs (in the main
    thread only: elsewhere Python cannot install handlers, and this does nothing)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = install(on_stop, on_force)
    try:
        yield
    finally:
        restore(previous)


class StartupInterrupted(BaseException):
    """Raised in the main thread by a stop signal while a command is still starting (see
    :class:`EarlyStop`): a BaseException, so that no ``except Exception`` on the way keeps
    the start-up going."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class EarlyStop:
    """SIGTERM/SIGINT while a command is still starting (option, system and migration
    checks), before the worker or the supervisor installs its own handlers. Until
    :meth:`forward_to` names what stops the work, the first one raises StartupInterrupted in
    the main thread (what SIGINT's KeyboardInterrupt does by default, for SIGTERM too): no job
    has been claimed, so the command ends at once, exit 0, instead of ending by the signal
    (exit -15). After it, a signal calls that ``stop`` (from a thread, see :func:`handler`).
    A second signal ends the process as the signal's default action does."""

    def __init__(self) -> None:
        self._stop: Callable[[], None] | None = None
        self._received = 0

    def handle(self, signum: int, frame: FrameType | None) -> None:  # noqa: ARG002
        self._received += 1
        if self._received > 1:
            signal.signal(signum, signal.SIG_DFL)
            signal.raise_signal(signum)
            return
        stop = self._stop
        if stop is None:
            raise StartupInterrupted(signum)
        threading.Thread(target=stop, name="sqlq-stop", daemon=True).start()

    def forward_to(self, stop: Callable[[], None]) -> None:
        """From now on a signal calls ``stop`` instead of interrupting the start-up."""
        self._stop = stop


@contextlib.contextmanager
def early_stop() -> Iterator[EarlyStop]:
    """An :class:`EarlyStop` handling SIGTERM/SIGINT while the block runs (main thread
    only), the previous handlers restored after it."""
    early = EarlyStop()
    if threading.current_thread() is not threading.main_thread():
        yield early
        return
    previous: dict[int, Any] = {sig: signal.signal(sig, early.handle) for sig in STOP_SIGNALS}
    try:
        yield early
    finally:
        restore(previous)


def name(signum: int) -> str:
    return signal.Signals(signum).name


class ForcedStop(BaseException):
    """Raised in the main thread by a second SIGTERM/SIGINT."""


class Stoppable(Protocol):
    """What the signals need of the worker (``Worker``)."""

    worker_id: str
    forced: bool

    def stop(self) -> None: ...


def worker_signals(worker: Stoppable) -> contextlib.AbstractContextManager[None]:
    """SIGTERM/SIGINT for ``worker``: the first asks for a graceful stop, the second
    forces it."""

    def on_stop(signum: int, count: int) -> None:  # noqa: ARG001 (handler()'s callback)
        worker.stop()  # first: once the line is out, the worker claims nothing more
        logger.info(
            "Worker %s received %s: finishing running jobs, then stopping",
            worker.worker_id,
            name(signum),
        )

    def on_force(signum: int) -> None:  # noqa: ARG001 (handler()'s callback)
        worker.forced = True  # before raising: see the finally clause in Worker.run
        raise ForcedStop()

    return stop_signals(on_stop, on_force)
