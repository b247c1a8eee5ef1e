"""The worker's view of the operator's queue controls: which queues are paused,
and the per-queue limits the claim must respect.

- Paused queues (``sqlq_queue.paused``, set by ``pause_queue()``, ``sqlq_queue pause`` or
  the admin) are read at most once a second (and at once when the worker is woken by a
  change, PostgreSQL's NOTIFY included), and left out of every claim: the claim statement
  itself is unchanged, so a worker with no paused queue claims exactly as before.
- ``--queue NAME:N``: at most N of this worker's jobs of that queue in hand (claimed and not
  finished); the claim reads at most the room left.
- ``SQLQ["QUEUE_LIMITS"]``: global limits, enforced by the claim (``QueueOps.claim``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Iterable, Mapping

from django.db import DatabaseError

from django_sqlq.db import ops_for
from django_sqlq.limits import QueueLimit
from django_sqlq.worker.context import WorkerContext

logger = logging.getLogger("django_sqlq.worker")

#: Paused queues are read again at least this often (seconds): a pause stops claims on
#: every worker within it.
REFRESH_INTERVAL = 1.0
#: ...and at most this often when woken by a change (a NOTIFY, SQLite's data_version).
WOKEN_REFRESH_INTERVAL = 0.1


class QueueControl:
    def __init__(
        self, context: WorkerContext, local_limits: Mapping[str, int] | None = None
    ) -> None:
        self.context = context
        self.local_limits = dict(local_limits or {})
        served = context.queues
        limits = context.conf.QUEUE_LIMITS
        #: The global limits of the queues this worker may claim from, or None.
        self.limits: dict[str, QueueLimit] | None = {
            name: limit for name, limit in limits.items() if served is None or name in served
        } or None
        self.paused: frozenset[str] = frozenset()
        #: What the claim leaves out: the worker's excluded queues and the paused ones.
        self.exclude: tuple[str, ...] = context.exclude_queues
        self.checked = float("-inf")
        self.warned = False
        # Jobs in hand per queue (claimed, not finished): only counted for --queue NAME:N.
        self.counting = bool(self.local_limits)
        self.in_hand: Counter[str] = Counter()
        self.lock = threading.Lock()

    def start(self) -> None:
        """At the worker's start: read the paused queues; write the rows the global limits
        lock (a queue's row holds its rate window)."""
        if self.limits:
            try:
                ops_for(self.context.database).ensure_queue_rows(list(self.limits))
            except DatabaseError as exc:
                logger.warning("Could not write the limited queues' rows: %s", exc)
        self.refresh(force=True)

    def refresh(self, *, force: bool = False, woke: bool = False) -> bool:
        """Read the paused queues again if they are due (at most once a second; sooner
        when woken by a change). Returns True when a queue was resumed."""
        age = time.monotonic() - self.checked
        if not (force or age >= REFRESH_INTERVAL or (woke and age >= WOKEN_REFRESH_INTERVAL)):
            return False
        self.checked = time.monotonic()
        try:
            paused = frozenset(ops_for(self.context.database).paused_queues())
        except DatabaseError as exc:
            if not self.warned:
                logger.warning(
                    "Could not read the paused queues (%s); has `migrate` been run? "
                    "Claiming as if none were paused.",
                    exc,
                )
                self.warned = True
            return False
        if paused != self.paused:
            served = self.context.queues
            shown = sorted(q for q in paused ^ self.paused if served is None or q in served)
            for name in shown:
                logger.info(
                    "Queue %s %s",
                    name,
                    "paused: claiming none of it" if name in paused else "resumed",
                )
            resumed = bool(self.paused - paused)
            self.paused = paused
            self.exclude = tuple(dict.fromkeys([*self.context.exclude_queues, *sorted(paused)]))
            return resumed
        return False

    def next_refresh_in(self) -> float | None:
        """Seconds until the paused queues must be read again, while some queue this worker
        serves is paused (so that a resume is seen within a second); else None."""
        if not self.paused:
            return None
        return max(0.0, self.checked + REFRESH_INTERVAL - time.monotonic())

    def caps(self) -> dict[str, int] | None:
        """This worker's room per --queue NAME:N queue, or None without such limits."""
        if not self.counting:
            return None
        with self.lock:
            return {
                name: max(0, limit - self.in_hand[name])
                for name, limit in self.local_limits.items()
            }

    def full(self) -> bool:
        """Whether a --queue NAME:N queue has no room left: its jobs may be waiting, so the
        claimer claims again as soon as one of its jobs finishes (it is woken then)."""
        if not self.counting:
            return False
        with self.lock:
            return any(self.in_hand[name] >= n for name, n in self.local_limits.items())

    def claimed(self, queues: Iterable[str]) -> None:
        if self.counting:
            with self.lock:
                self.in_hand.update(queues)

    def finished(self, queues: Iterable[str]) -> None:
        """Jobs finished or given back: room again on their queues."""
        if self.counting:
            with self.lock:
                self.in_hand.subtract(queues)
