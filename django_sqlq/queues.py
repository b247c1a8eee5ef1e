"""Queues as an operator sees them: which exist, pause and resume, and what each is doing.

A paused queue still takes new jobs (``enqueue()`` works as ever); no worker claims from it
until it is resumed. Jobs already running finish. The state is a row of ``sqlq_queue``, so
it holds across worker restarts and for every host. Workers read it at most a second after
it changes (PostgreSQL also wakes them with a NOTIFY, as an enqueue does).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from django.db import connections, transaction
from django.utils import timezone

from django_sqlq import compat, dashboard, validation
from django_sqlq.conf import get_settings
from django_sqlq.db import ops_for
from django_sqlq.limits import QueueLimit
from django_sqlq.models import Queue, WorkerProcess

if TYPE_CHECKING:
    from django_sqlq.backend import SQLQBackend

__all__ = [
    "QueueState",
    "configured_queues",
    "known_queues",
    "pause_queue",
    "queue_states",
    "resume_queue",
    "worker_queues",
]


def configured_queues(*, limited: bool = False, also: Iterable[str] = ()) -> tuple[str, ...]:
    """The queues a worker and the admin know, in the order they are listed: those the
    settings name (``SQLQ["QUEUES"]``, then those of django_sqlq's tasks backends,
    ``TASKS[alias]["QUEUES"]``); with ``limited``, then those of ``QUEUE_LIMITS``; then
    ``also``, the names the caller found elsewhere (paused rows, recent jobs), as given."""
    conf = get_settings()
    names = dict.fromkeys(conf.QUEUES)
    for backend in _tasks_backends():
        names.update(dict.fromkeys(backend.queue_names))
    if limited:
        names.update(dict.fromkeys(conf.QUEUE_LIMITS))
    names.update(dict.fromkeys(also))
    return tuple(names)


def worker_queues() -> tuple[str, ...] | None:
    """The names a worker's ``--queue`` may take: the configured queues; None (any name)
    when a django_sqlq tasks backend has an empty ``QUEUES``, which allows every name."""
    if any(backend.served_queues() is None for backend in _tasks_backends()):
        return None
    return configured_queues()


def _tasks_backends() -> list[SQLQBackend]:
    """django_sqlq's backends in ``settings.TASKS``; none without Django's tasks framework."""
    if not compat.AVAILABLE:
        return []
    # The tasks backend needs Django's tasks framework, an optional dependency: without
    # it, django_sqlq.backend cannot be imported (and no backend names a queue).
    from django_sqlq.backend import sqlq_backends

    return list(sqlq_backends().values())


def _set_paused(name: str, paused: bool, database: str | None) -> bool:
    validation.check_name("queue name", name, max_length=100)
    alias = database or get_settings().DATABASE
    rows = Queue.objects.using(alias).filter(name=name)

    def update() -> int:
        return rows.exclude(paused=paused).update(
            paused=paused, paused_at=timezone.now() if paused else None, updated_at=timezone.now()
        )

    with transaction.atomic(using=alias):
        ops = ops_for(alias)
        # The UPDATE first: it locks the queue's row for writing at once. Writing the row
        # first (ensure_queue_rows) took a shared lock on it where it exists (MariaDB's
        # INSERT IGNORE of a duplicate), and a worker's claim waiting to lock that row for
        # its limits then deadlocked with this UPDATE (error 1213).
        changed = update()
        if not changed and not rows.exists():  # a queue with no row yet
            ops.ensure_queue_rows([name])
            changed = update()
        # Workers of this queue (and those serving every queue) wake on commit and read
        # the paused queues at once (PostgreSQL; elsewhere within a second).
        ops.notify([name])
    return bool(changed)


def pause_queue(name: str, *, database: str | None = None) -> bool:
    """Pause queue ``name``: workers on every host stop claiming its jobs within a second;
    running jobs finish; enqueueing still works. Returns False if it was paused already.
    Any queue name can be paused, even one with no jobs yet."""
    return _set_paused(name, True, database)


def resume_queue(name: str, *, database: str | None = None) -> bool:
    """Resume queue ``name``: workers claim from it again within a second. Returns False if
    it was not paused."""
    return _set_paused(name, False, database)


@dataclass(frozen=True)
class QueueState:
    """One queue as ``sqlq_queue status`` and the admin show it."""

    name: str
    paused: bool = False
    paused_at: datetime | None = None
    pending: int = 0  # runnable now
    scheduled: int = 0
    running: int = 0
    limit: QueueLimit | None = None

    @property
    def limit_display(self) -> str:
        return self.limit.describe() if self.limit is not None else ""


def queue_states(*, database: str | None = None) -> list[QueueState]:
    """Every known queue: the configured ones, those with a limit, a row in ``sqlq_queue``
    (paused or limited once) or waiting/running jobs; with counts the dashboard's bounded
    queries give (never a read of finished rows)."""
    conf = get_settings()
    alias = database or conf.DATABASE
    rows = {row.name: row for row in Queue.objects.using(alias)}
    known = configured_queues(limited=True, also=sorted(rows))
    counts = {
        row.name: row for row in dashboard.queue_rows(alias, timezone.now(), configured=known)
    }
    states = []
    for name in list(counts):
        row = rows.get(name)
        count = counts[name]
        states.append(
            QueueState(
                name=name,
                paused=bool(row and row.paused),
                paused_at=row.paused_at if row else None,
                pending=count.runnable,
                scheduled=count.scheduled,
                running=count.processing,
                limit=conf.QUEUE_LIMITS.get(name),
            )
        )
    return states


def paused_names(*, database: str | None = None) -> set[str]:
    """The paused queues' names."""
    alias = database or get_settings().DATABASE
    connections[alias].ensure_connection()
    return set(ops_for(alias).paused_queues())


def known_queues(*, database: str | None = None) -> list[str]:
    """Every queue name something knows: the settings (``SQLQ["QUEUES"]``, the tasks
    backends' ``QUEUES``, ``QUEUE_LIMITS``), a row of ``sqlq_queue``, waiting or running
    jobs, or a registered worker's ``--queue``. ``sqlq_queue`` refuses other names."""
    alias = database or get_settings().DATABASE
    names = dict.fromkeys(state.name for state in queue_states(database=alias))
    for served in WorkerProcess.objects.using(alias).values_list("queues", flat=True):
        if isinstance(served, list):
            names.update(dict.fromkeys(q for q in served if isinstance(q, str) and q != "*"))
    return list(names)
