"""The change watch: tells an idle worker that the jobs table may have changed, cheaply
(see ``ChangeWatch``)."""

from __future__ import annotations

import logging
import threading
from typing import Any

from django.db import DatabaseError, connections

from django_sqlq.db import ops_for
from django_sqlq.worker.context import WorkerContext

logger = logging.getLogger("django_sqlq.worker")


class ChangeWatch:
    """Tells an idle worker that the jobs table may have changed, cheaply.

    SQLite: ``PRAGMA data_version`` moves when any other connection commits; checked every
    ``interval`` seconds. PostgreSQL: a LISTEN connection in a thread wakes the worker when
    an enqueue commits (see db.postgresql.listen). Either way, polling the table every
    ``poll_interval`` remains the fallback (for scheduled jobs coming due and for lost
    notifications).
    """

    def __init__(self, context: WorkerContext) -> None:
        self.context = context
        self.flag = threading.Event()
        self.ops = ops_for(context.database)
        self.interval = self.ops.change_check_interval(
            context.poll_interval, context.conf.WAKE_CHECK_INTERVAL
        )
        self.last = self._version()
        # SQLQ["LISTEN_DATABASE"]: LISTEN through another alias of the queue's database
        # (a direct connection beside a transaction-mode pooler).
        listen_alias = context.conf.LISTEN_DATABASE
        if context.database != context.conf.DATABASE:
            listen_alias = None
        self.listener = self.ops.listen(
            queues=context.queues,
            wake=self._notified,
            stop=context.stop_event,
            logger=logger,
            alias=listen_alias,
            probe=self._probe,
        )

    def _probe(self, token: str) -> None:
        """Send a NOTIFY the way enqueues do: through the queue's database alias (called
        from the LISTEN thread, on a connection of that thread's own)."""
        try:
            ops_for(self.context.database).notify([token])
        finally:
            connections[self.context.database].close()

    def _notified(self) -> None:
        self.flag.set()
        self.context.wake()

    def _version(self) -> Any:
        try:
            return self.ops.data_version()
        except DatabaseError:
            return None

    def seen(self) -> bool:
        """True once after something changed since the last call."""
        if self.flag.is_set():
            self.flag.clear()
            return True
        version = self._version()
        if version is not None and version != self.last:
            self.last = version
            return True
        return False
