"""The worker: claims jobs, runs their handlers, records outcomes, keeps its leases alive.

``Worker`` (``core``) is the composition; each part lives in a module of its own:
``claimer`` (the main loop: claim sizes, prefetch, give-back, wake-ups), ``staging``
(scheduled jobs coming due), ``changes`` (the change watch), ``inbox`` and ``pool`` (the
runner threads), ``invoke`` (running one handler), ``hooks``, ``completer`` (writing
outcomes), ``maintenance/`` (heartbeat, reaper, tidier: services with one start/stop),
``signals`` (shared with the supervisor), ``retry``, ``startup``, ``summary``. See
docs/explanation/worker.md. The names here are the ones the management command, the
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
