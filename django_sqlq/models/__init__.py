"""django_sqlq's tables, one module per table: jobs (``Job`` and its statuses), blockers,
workers, queues, schedules, steps and events, and maintenance. Every model and the names
that go with them are imported from here (``from django_sqlq.models import Job``), as
migrations name them."""

from django_sqlq.models.blockers import JobBlocker
from django_sqlq.models.jobs import (
    FINISHED_STATUSES,
    PRIORITY_MAX,
    PRIORITY_MIN,
    Chain,
    DependencyPolicy,
    FailedJob,
    Job,
    JobQuerySet,
    JobStatus,
    QueueDashboard,
    new_uuid,
)
from django_sqlq.models.maintenance import Maintenance
from django_sqlq.models.managers import QueueDatabaseManager
from django_sqlq.models.queues import Queue, QueueQuerySet
from django_sqlq.models.schedules import DatabaseSchedule, ScheduleTick
from django_sqlq.models.steps import Event, JobStep, StepKind, StepState
from django_sqlq.models.workers import WorkerProcess, WorkerProcessQuerySet

__all__ = [
    "FINISHED_STATUSES",
    "PRIORITY_MAX",
    "PRIORITY_MIN",
    "Chain",
    "DatabaseSchedule",
    "DependencyPolicy",
    "Event",
    "FailedJob",
    "Job",
    "JobBlocker",
    "JobQuerySet",
    "JobStatus",
    "JobStep",
    "Maintenance",
    "Queue",
    "QueueDashboard",
    "QueueDatabaseManager",
    "QueueQuerySet",
    "ScheduleTick",
    "StepKind",
    "StepState",
    "WorkerProcess",
    "WorkerProcessQuerySet",
    "new_uuid",
]
