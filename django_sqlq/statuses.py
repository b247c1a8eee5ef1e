"""The job statuses: the values of the jobs table's ``status`` column.

Plain strings in a module that imports nothing, so that code which must not import the models
(the tasks backend, instantiated while apps may still be loading) names them too.
``django_sqlq.models.JobStatus`` is the model's choices over these same values.
"""

from __future__ import annotations

from typing import Final

BLOCKED: Final = "blocked"
SCHEDULED: Final = "scheduled"
PENDING: Final = "pending"
PROCESSING: Final = "processing"
COMPLETED: Final = "completed"
FAILED: Final = "failed"
CANCELLED: Final = "cancelled"

#: Every status, in the order of a job's life (the model's choices follow it).
ALL: Final = (BLOCKED, SCHEDULED, PENDING, PROCESSING, COMPLETED, FAILED, CANCELLED)
#: The statuses of a job that will not run again unless an operator retries it.
FINISHED: Final = (COMPLETED, FAILED, CANCELLED)
#: The statuses of a job that has yet to finish: while a job with a ``unique_key`` is in one
#: of them, no other job with that key can be enqueued (``sqlq_job_unique_key_live``).
LIVE: Final = (BLOCKED, SCHEDULED, PENDING, PROCESSING)
