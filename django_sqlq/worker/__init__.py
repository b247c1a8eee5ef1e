"""The worker: claims jobs, runs their handlers, records outcomes, keeps its leases alive.

``Worker`` (``core``) builds the parts and wires them; each lives in a module of its own
and gets what it needs (``context``: the worker's identity, database, clock and stop
events; and its siblings), never the ``Worker``: ``claimer`` (the main loop: claim sizes,
prefetch, give-back, wake-ups), ``staging`` (scheduled jobs coming due), ``changes`` (the
change watch), ``queuecontrol`` (paused queues, per-queue limits), ``inbox`` and ``pool``
(the runner threads), ``invoke`` (running one handler), ``completer`` (writing every
attempt's outcome in batches, through ``django_sqlq.outcomes``), ``maintenance/``
(heartbeat, reaper, tidier, job controls, ticks, pruner: services with one start/stop),
``signals`` (shared with the supervisor), ``dbretry`` (database errors), ``startup``,
``summary``, ``stats``.
See docs/explanation/worker.md. The names here are the ones the management command, the
supervisor and the tests import.
"""

from django_sqlq.worker.core import (
    Worker,
    WorkerError,
    default_worker_id,
    job_logger,
    logger,
    unreachable,
)
from django_sqlq.worker.signals import ForcedStop

__all__ = [
    "ForcedStop",
    "Worker",
    "WorkerError",
    "default_worker_id",
    "job_logger",
    "logger",
    "unreachable",
]
