"""QueueOps: the queue's operations on one connection, as every engine has them.

One class per concern, each in its own module: the claim (``claim``, and the queues' rows
it locks in ``queue_rows``), new jobs (``insert``), the ends of attempts (``outcomes``),
workflows (``blockers``), running jobs (``running``), the maintenance duties (``upkeep``),
wake-ups (``notify``) and durable steps' records (``steps``). Each statement is written once,
there; where an engine writes part of it differently, the statement calls a hook of
:class:`~django_sqlq.db.dialect.Dialect` (or one declared beside it), and the engine's module
(``sqlite``, ``postgresql``) subclasses :class:`QueueOps` to fill the hooks in.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db.models.functions import Now

from django_sqlq.db.blockers import BlockerOps
from django_sqlq.db.claim import ClaimOps
from django_sqlq.db.insert import InsertOps
from django_sqlq.db.notify import NotifyOps
from django_sqlq.db.outcomes import OutcomeOps
from django_sqlq.db.running import RunningOps
from django_sqlq.db.steps import StepOps
from django_sqlq.db.upkeep import UpkeepOps


class QueueOps(
    ClaimOps, InsertOps, OutcomeOps, BlockerOps, RunningOps, UpkeepOps, NotifyOps, StepOps
):
    """The queue's statements, on one connection. Subclasses fill in the engine's dialect."""


class DatabaseNow(Now):
    """``Now()`` in the time the jobs table's columns hold. On SQLite with ``USE_TZ = False``
    that is local time (see ``sqlite.SQLiteOps.now_sql``), where Django's ``Now()`` is UTC."""

    def as_sqlite(self, compiler: Any, connection: Any, **extra_context: Any) -> Any:
        if not settings.USE_TZ:
            return self.as_sql(
                compiler,
                connection,
                template="STRFTIME('%%%%Y-%%%%m-%%%%d %%%%H:%%%%M:%%%%f', 'NOW', 'localtime')",
                **extra_context,
            )
        return super().as_sqlite(compiler, connection, **extra_context)
