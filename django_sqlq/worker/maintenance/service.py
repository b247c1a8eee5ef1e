"""The shape of a maintenance duty: a thread of its own, with one start/stop (River's
``startstop.BaseStartStop``). ``PeriodicService`` runs ``tick()`` every ``interval``."""

from __future__ import annotations

import threading

from django.db import connections


def join(thread: threading.Thread, timeout: float | None = None) -> None:
    """Wait for ``thread``; in short slices, so that a second signal can interrupt the
    main thread meanwhile."""
    if timeout is not None:
        thread.join(timeout)
        return
    while thread.is_alive():
        thread.join(timeout=0.1)


class Service:
    """A duty that runs ``run()`` in a daemon thread named ``sqlq-<name>``. ``start()``
    again once it has ended runs it again; ``stop()`` asks it to end; ``join()`` waits."""

    name = "service"

    def __init__(self) -> None:
        self.stopping = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        if self.running:
            return
        self._thread = threading.Thread(target=self._main, name=f"sqlq-{self.name}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.stopping.set()

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            join(self._thread, timeout)

    def _main(self) -> None:
        try:
            self.run()
        finally:
            connections.close_all()  # this thread's own

    def run(self) -> None:
        raise NotImplementedError


class PeriodicService(Service):
    """Runs ``tick()`` every ``interval`` seconds until stopped."""

    interval = 1.0

    def run(self) -> None:
        while not self.stopping.wait(self.interval):
            self.tick()

    def tick(self) -> None:
        raise NotImplementedError
