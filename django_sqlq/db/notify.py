"""Wake-ups: how idle workers learn that jobs were committed, where the engine can tell
(PostgreSQL's NOTIFY, SQLite's ``data_version``), so that they need not poll the table."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

from django_sqlq.db.dialect import Dialect


class NotifyOps(Dialect):
    """The defaults, for an engine that cannot tell: nothing to send, nothing to hear."""

    def notify(self, queues: Sequence[str]) -> None:
        """Wake idle workers once the current transaction commits. Default: nothing."""

    def data_version(self) -> Any:
        """A cheap value that changes when another connection commits, or None."""
        return None

    def change_check_interval(self, poll_interval: float) -> float:
        """How often an idle worker calls data_version()."""
        return poll_interval

    def listen(
        self,
        *,
        # The default for engines without notifications; the others override it.
        queues: Sequence[str] | None,  # noqa: ARG002
        wake: Callable[[], None],  # noqa: ARG002
        stop: threading.Event,  # noqa: ARG002
        logger: logging.Logger,  # noqa: ARG002
        alias: str | None = None,  # noqa: ARG002
        probe: Callable[[str], None] | None = None,  # noqa: ARG002
    ) -> threading.Thread | None:
        """Start a thread that calls ``wake()`` when jobs for ``queues`` are committed, if
        the engine can tell. Returns it, or None. ``alias``: listen through this database
        alias instead of this connection's. ``probe(token)``: called once listening; it
        sends a notification with that payload, and the listener warns if it never hears it."""
        return None
