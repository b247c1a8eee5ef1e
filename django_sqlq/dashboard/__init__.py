"""What the admin's dashboard knows about the queue: counts per queue, throughput, workers,
and the alerts an operator should see first.

:mod:`~django_sqlq.dashboard.queries` reads the database; :mod:`~django_sqlq.dashboard.rows`
holds what it read; :mod:`~django_sqlq.dashboard.alerts` words what is wrong and
:mod:`~django_sqlq.dashboard.charts` lays out the throughput bars. Nothing here renders HTML:
:mod:`django_sqlq.admin.dashboard_views` and its templates do.
"""

from django_sqlq.dashboard.alerts import alerts
from django_sqlq.dashboard.charts import Chart, ChartBar, chart
from django_sqlq.dashboard.durations import format_age
from django_sqlq.dashboard.queries import (
    RUNNING_ROWS,
    asleep_counts,
    bounded_count,
    clear_cache,
    queue_rows,
    recent_values,
    retention,
    running_jobs,
    snapshot,
    throughput,
    worker_rows,
)
from django_sqlq.dashboard.rows import (
    ALIVE_SECONDS,
    LOST_WORKER_WINDOW,
    MAX_WORKERS_SHOWN,
    RECENT_ROWS,
    WAITING_ALERT_SECONDS,
    Alert,
    Bucket,
    KeptStatus,
    QueueRow,
    Retention,
    Snapshot,
    Throughput,
    WorkerRow,
)

__all__ = [
    "ALIVE_SECONDS",
    "LOST_WORKER_WINDOW",
    "MAX_WORKERS_SHOWN",
    "RECENT_ROWS",
    "RUNNING_ROWS",
    "WAITING_ALERT_SECONDS",
    "Alert",
    "Bucket",
    "Chart",
    "ChartBar",
    "KeptStatus",
    "QueueRow",
    "Retention",
    "Snapshot",
    "Throughput",
    "WorkerRow",
    "alerts",
    "asleep_counts",
    "bounded_count",
    "chart",
    "clear_cache",
    "format_age",
    "queue_rows",
    "recent_values",
    "retention",
    "running_jobs",
    "snapshot",
    "throughput",
    "worker_rows",
]
