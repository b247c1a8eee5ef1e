"""What the schedule tests share: a fixed clock, a scheduler that runs in this process on
it, and a row of ``sqlq_schedule`` saved as the admin saves one (validated first)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django_sqlq import registry
from django_sqlq.models import DatabaseSchedule
from django_sqlq.worker import Worker

# The schedule in code beside the stored ones (tests/schedules/test_db_schedules*.py).
CODE = {"nightly-report": {"type": "tests.noop", "cron": "0 3 * * *"}}


def at(text: str) -> datetime:
    """An ISO time without a zone, in UTC."""
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


class Clock:
    """A clock the test moves by hand (``clock.now = ...``)."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def scheduler_at(clock: Clock) -> Worker:
    """A worker whose scheduler runs here, on ``clock``, with the handlers registered as
    ``Worker.run()`` registers them."""
    registry.autodiscover()
    worker = Worker(clock=clock)
    worker.scheduler.prepare()
    return worker


def stored(**fields: Any) -> DatabaseSchedule:
    """Save a stored schedule (hourly ``tests.noop`` named ``db-hourly`` unless ``fields``
    say otherwise), validated as the admin validates it."""
    row = DatabaseSchedule(**{"name": "db-hourly", "type": "tests.noop", "cron": "0 * * * *",
                              **fields})  # fmt: skip
    row.full_clean()
    row.save()
    return row
