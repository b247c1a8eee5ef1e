"""The inbox: claimed jobs waiting for a runner thread.

A deque under one condition, so that a batch of claimed jobs is handed over with one
notify (``queue.Queue`` notifies per item). Each item carries the time it was put in, so
that jobs waiting too long can be given back to the queue (see claimer.PREFETCH_HOLD).
"""

from __future__ import annotations

import queue as queue_module
import threading
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

STOP = object()  # tells a runner thread to exit


class Inbox:
    """Claimed jobs waiting for a runner thread (see the module docstring)."""

    def __init__(self) -> None:
        self._items: deque[tuple[float, Any]] = deque()
        self._ready = threading.Condition()

    def __len__(self) -> int:
        return len(self._items)

    def put_many(self, items: Sequence[Any]) -> None:
        now = time.monotonic()
        with self._ready:
            self._items.extend((now, item) for item in items)
            self._ready.notify(len(items))

    def put(self, item: Any) -> None:
        self.put_many([item])

    def get(self) -> Any:
        try:
            return self._items.popleft()[1]  # atomic: no lock needed when there is work
        except IndexError:
            pass
        with self._ready:
            while not self._items:
                self._ready.wait()
            return self._items.popleft()[1]

    def get_nowait(self) -> Any:
        with self._ready:
            if not self._items:
                raise queue_module.Empty
            return self._items.popleft()[1]

    def oldest(self) -> float | None:
        """When the item that has waited longest was put in, or None if empty."""
        try:
            return self._items[0][0]
        except IndexError:
            return None

    def take_older_than(self, cutoff: float) -> list[Any]:
        """Remove and return the items put in before ``cutoff`` (the oldest come first)."""
        taken: list[Any] = []
        with self._ready:
            while True:
                try:
                    item = self._items.popleft()  # a runner may take items meanwhile
                except IndexError:
                    break
                if item[0] >= cutoff or item[1] is STOP:
                    self._items.appendleft(item)
                    break
                taken.append(item[1])
        return taken
