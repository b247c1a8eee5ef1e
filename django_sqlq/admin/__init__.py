"""The Django admin for the queue: all jobs, failed jobs, workers, and a live dashboard.

Split as ``django.contrib.admin`` is; a module per part:

- :mod:`~django_sqlq.admin.jobs`: the job lists (``JobAdmin``, ``AllJobsAdmin``,
  ``FailedJobAdmin``): columns, search, permissions, the action views, delete;
- :mod:`~django_sqlq.admin.job_page`: one job's read-only page and its live box;
- :mod:`~django_sqlq.admin.chains`: a chain's page (its steps, the jobs that wait for it) and
  the job page's workflow section (its chain, what it depends on, what waits for it);
- :mod:`~django_sqlq.admin.actions`: retry, cancel, run now and delete, each a ``JobAction``
  holding the :mod:`django_sqlq.lifecycle` function that does it, and the lists' bulk actions;
- :mod:`~django_sqlq.admin.filters`: queue, type and "scheduled" filters;
- :mod:`~django_sqlq.admin.pagination`: ``BoundedCountPaginator`` and the change lists;
- :mod:`~django_sqlq.admin.dashboard_views`: the dashboard's views (its numbers come from
  :mod:`django_sqlq.dashboard`) and its entry in the admin index;
- :mod:`~django_sqlq.admin.workers`: the workers' list;
- :mod:`~django_sqlq.admin.schedules`: the recurring jobs, with "run now", and the
  schedules stored in the database (``DatabaseScheduleAdmin``);
- :mod:`~django_sqlq.admin.display`: badges, dates, JSON and links the pages share.

This module registers the models with the default admin site (Django's autodiscovery imports
it) and names the admin classes importable from ``django_sqlq.admin``.

Made for a table of millions of rows: the lists never count the whole table (a bounded
count, see :class:`BoundedCountPaginator`), filter choices come from the settings, the
handler registry and the newest rows, and the only ordering offered is the primary key.
"""

from __future__ import annotations

from django.contrib import admin

from django_sqlq.admin.actions import (
    ACTION_CHUNK,
    CANCEL,
    DELETE,
    PAGE_ACTIONS,
    RETRY,
    RUN_NOW,
    ActionReport,
    JobAction,
    cancel_jobs,
    delete_jobs,
    perform,
    retry_jobs,
    run_jobs_now,
)
from django_sqlq.admin.chains import ChainViews
from django_sqlq.admin.dashboard_views import QueueDashboardAdmin, QueueDashboardViews
from django_sqlq.admin.display import ERROR_LINE_CHARS, admin_links, status_badge
from django_sqlq.admin.filters import QueueFilter, TypeFilter, WhenFilter
from django_sqlq.admin.job_page import JobPageAdmin
from django_sqlq.admin.jobs import AllJobsAdmin, FailedJobAdmin, JobAdmin
from django_sqlq.admin.pagination import BoundedCountPaginator, JobChangeList, NulSafeChangeList
from django_sqlq.admin.schedules import DatabaseScheduleAdmin, ScheduleAdmin
from django_sqlq.admin.workers import WorkerProcessAdmin
from django_sqlq.models import (
    DatabaseSchedule,
    FailedJob,
    Job,
    QueueDashboard,
    ScheduleTick,
    WorkerProcess,
)

__all__ = [
    "ACTION_CHUNK",
    "CANCEL",
    "DELETE",
    "ERROR_LINE_CHARS",
    "PAGE_ACTIONS",
    "RETRY",
    "RUN_NOW",
    "ActionReport",
    "AllJobsAdmin",
    "BoundedCountPaginator",
    "ChainViews",
    "DatabaseScheduleAdmin",
    "FailedJobAdmin",
    "JobAction",
    "JobAdmin",
    "JobChangeList",
    "JobPageAdmin",
    "NulSafeChangeList",
    "QueueDashboardAdmin",
    "QueueDashboardViews",
    "QueueFilter",
    "ScheduleAdmin",
    "TypeFilter",
    "WhenFilter",
    "WorkerProcessAdmin",
    "admin_links",
    "cancel_jobs",
    "delete_jobs",
    "perform",
    "retry_jobs",
    "run_jobs_now",
    "status_badge",
]

admin.site.register(Job, AllJobsAdmin)
admin.site.register(FailedJob, FailedJobAdmin)
admin.site.register(QueueDashboard, QueueDashboardAdmin)
admin.site.register(WorkerProcess, WorkerProcessAdmin)
admin.site.register(ScheduleTick, ScheduleAdmin)
admin.site.register(DatabaseSchedule, DatabaseScheduleAdmin)
