"""The worker's maintenance duties, one module each (River's ``internal/maintenance/``).

- ``heartbeat``: renews the leases of the jobs this worker holds and its row in the
  workers table; runs the reaper.
- ``reaper``: returns expired leases (of dead workers) to the queue.
- ``tidier``: PostgreSQL's VACUUM of the jobs table after many claims.
- ``jobcontrols``: the cancel requests among the running jobs, and their progress.
- ``ticks``: enqueues the ticks of recurring jobs, each once across all workers.
- ``pruner``: deletes finished jobs older than ``KEEP_FINISHED`` (one pruner at a time
  across all workers, by a lease in the maintenance table).
- ``service``: the ``Service``/``PeriodicService`` base, one thread and one start/stop.

A new duty is a ``PeriodicService`` in a module of its own here, given a
``WorkerContext`` and what else it needs by ``Worker``, and listed in ``Worker.services``:
the worker starts these with its runners and stops them once the runners are done.
"""

from django_sqlq.worker.maintenance.heartbeat import Heartbeat
from django_sqlq.worker.maintenance.jobcontrols import JobControls
from django_sqlq.worker.maintenance.pruner import Pruner
from django_sqlq.worker.maintenance.reaper import Reaper
from django_sqlq.worker.maintenance.service import PeriodicService, Service
from django_sqlq.worker.maintenance.ticks import Scheduler
from django_sqlq.worker.maintenance.tidier import Tidier

__all__ = [
    "Heartbeat",
    "JobControls",
    "PeriodicService",
    "Pruner",
    "Reaper",
    "Scheduler",
    "Service",
    "Tidier",
]
