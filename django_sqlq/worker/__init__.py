"""The worker: claims jobs, runs their handlers, records outcomes, keeps its leases alive.

``Worker`` (in ``core``) is the composition; each part lives in a module of its own. The
names here are the ones the management command, the supervisor and the tests import.
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
