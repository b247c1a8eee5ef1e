"""Wake-ups: how idle workers learn that jobs were committed, where the engine can tell
(PostgreSQL's NOTIFY, SQLite's ``data_version``), so that they need not poll the table;
and the LISTEN connection that hears PostgreSQL's notifications."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper

from django_sqlq.db.dialect import Dialect


class NotifyOps(Dialect):
    """The defaults, for an engine that cannot tell: nothing to send, nothing to hear."""

    def notify(self, queues: Sequence[str]) -> None:
        """Wake idle workers once the current transaction commits. Default: nothing."""

    def data_version(self) -> Any:
        """A cheap value that changes when another connection commits, or None."""
        return None

    def change_check_interval(
        self,
        poll_interval: float,
        wanted: float | None = None,  # noqa: ARG002 (for engines that check for commits)
    ) -> float:
        """How often an idle worker calls data_version(): every ``poll_interval`` where the
        engine cannot tell (or tells by other means, LISTEN); an engine that can checks at
        its own pace, or at ``wanted`` (``SQLQ["WAKE_CHECK_INTERVAL"]``), never less often
        than it polls."""
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


#: The channel of django_sqlq's notifications on PostgreSQL; each names a queue.
CHANNEL = "django_sqlq"

# A worker checks at start-up that notifications reach its LISTEN connection: it sends
# itself one (through the queue's database alias, the way enqueues send theirs) and waits
# this long for it.
PROBE_TIMEOUT = 2.0
PROBE_PREFIX = "sqlq-probe:"


def _listen_forever(  # noqa: C901 (one reconnecting loop that also runs the start-up probe)
    params: dict[str, Any],
    queues: set[str] | None,
    wake: Callable[[], None],
    stop: threading.Event,
    logger: logging.Logger,
    probe: Callable[[str], None] | None,
    where: str,
) -> None:
    """LISTEN on a connection of its own; call wake() for each notification about one of
    ``queues``. A lost connection is logged and re-opened with backoff; meanwhile the
    worker's polling carries on, so a lost notification only delays pickup.

    With ``probe``, once listening, call ``probe(token)`` (which must send a NOTIFY with
    that payload through another connection); if the token is not heard within
    PROBE_TIMEOUT, notifications do not reach this connection (a pooler in transaction
    mode between it and PostgreSQL): log one warning and stop listening; the worker polls.
    """
    import psycopg  # optional: PostgreSQL's driver, installed where PostgreSQL is used

    params.pop("cursor_factory", None)
    failures = 0
    token: str | None = None
    deadline = 0.0
    while not stop.is_set():
        try:
            with psycopg.connect(**params, autocommit=True) as conn:
                conn.execute(f"LISTEN {CHANNEL}")
                if failures:
                    logger.info("LISTEN connection re-established")
                failures = 0
                wake()  # anything committed while we were not listening
                if probe is not None and token is None:
                    token = f"{PROBE_PREFIX}{uuid.uuid4().hex}"
                    deadline = time.monotonic() + PROBE_TIMEOUT
                    try:
                        probe(token)
                    except Exception as exc:
                        logger.warning("Could not send the start-up NOTIFY probe: %s", exc)
                        probe = None
                while not stop.is_set():
                    for note in conn.notifies(timeout=0.1 if probe is not None else 0.5):
                        if probe is not None and note.payload == token:
                            logger.debug(
                                "LISTEN (%s): the start-up NOTIFY arrived; woken by notifications",
                                where,
                            )
                            probe = None
                        elif queues is None or note.payload in queues:
                            logger.debug("Woken by NOTIFY %s", note.payload)
                            wake()
                        if stop.is_set():
                            break
                    if probe is not None and time.monotonic() > deadline:
                        logger.warning(
                            "Notifications do not arrive: the worker LISTENs through %s, "
                            "and a NOTIFY it sent itself at start-up was not heard within "
                            "%.0fs. A connection pooler in transaction mode (PgBouncer "
                            "pool_mode = transaction, most managed poolers) does this. "
                            "Falling back to polling: new jobs wait up to POLL_INTERVAL. "
                            "Fix: point SQLQ['LISTEN_DATABASE'] at a database alias that "
                            "connects to PostgreSQL directly or through a session-mode pool.",
                            where,
                            PROBE_TIMEOUT,
                        )
                        return
        except psycopg.Error as exc:
            failures += 1
            delay = min(5.0, 0.1 * 2**failures)
            logger.warning("LISTEN connection lost (%s); retrying in %.1fs", exc, delay)
            stop.wait(delay)


def listen_in_thread(
    connection: BaseDatabaseWrapper,
    *,
    queues: Sequence[str] | None,
    wake: Callable[[], None],
    stop: threading.Event,
    logger: logging.Logger,
    probe: Callable[[str], None] | None,
) -> threading.Thread:
    """Start a thread that LISTENs with the settings of ``connection`` (PostgreSQL), on a
    connection of its own, and calls ``wake()`` for each notification about ``queues``
    (None: any), until ``stop`` is set. Returns it."""
    params = dict(connection.get_connection_params())
    where = (
        f"database alias {connection.alias!r} "
        f"({params.get('host') or 'local socket'}:{params.get('port') or 5432})"
    )
    thread = threading.Thread(
        target=_listen_forever,
        args=(
            params,
            set(queues) if queues is not None else None,
            wake,
            stop,
            logger,
            probe,
            where,
        ),
        name="sqlq-listen",
        daemon=True,
    )
    thread.start()
    return thread
