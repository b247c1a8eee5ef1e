"""What a worker's services share, made once by ``Worker``: ``WorkerContext`` (who the
worker is, which database and queues it serves, its clock and its stop events), the ids
of the jobs it holds (``HeldJobs``) and its outcome counts (``Counts``).

The bottom of the worker package: the services get these from ``Worker``, which builds
and wires them; none of them imports ``Worker`` or reaches into a sibling.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime

from django_sqlq.conf import Settings

Clock = Callable[[], datetime]


class Flag:
    """A flag shared by reference. Unlike ``threading.Event`` it takes no lock, so that a
    signal handler may set it (see ``signals``: a handler that takes a lock the interrupted
    main thread holds deadlocks the process)."""

    __slots__ = ("_value",)

    def __init__(self) -> None:
        self._value = False

    def set(self) -> None:
        self._value = True

    def clear(self) -> None:
        self._value = False

    def is_set(self) -> bool:
        return self._value


@dataclass(frozen=True, slots=True, eq=False)
class WorkerContext:
    worker_id: str
    database: str
    conf: Settings
    #: The queues served; None serves every queue (the tasks backend's "*"), less
    #: ``exclude_queues``.
    queues: tuple[str, ...] | None
    exclude_queues: tuple[str, ...]
    concurrency: int
    poll_interval: float
    lease_seconds: float
    max_jobs: int | None = None
    clock: Clock | None = None
    #: Set on stop (SIGTERM, ``Worker.stop()``): claim nothing more.
    stop_event: threading.Event = field(default_factory=threading.Event)
    #: Set to wake the main loop before its poll interval (a runner finished, a NOTIFY).
    wakeup: threading.Event = field(default_factory=threading.Event)
    #: Set by a second signal (in its handler): database writes are tried once, not retried.
    forced: Flag = field(default_factory=Flag)

    def now(self) -> datetime | None:
        """The injected clock, or None: the database's clock."""
        return self.clock() if self.clock is not None else None

    def wake(self) -> None:
        self.wakeup.set()


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


@dataclass(slots=True)
class Counts:
    """What this worker has finished: written by the completer, read by the summary line,
    the heartbeat and ``Worker``."""

    done: int = 0
    failed: int = 0  # failed attempts, retried or not
    retried: int = 0  # failed attempts that will be retried
    cancelled: int = 0  # attempts recorded cancelled
