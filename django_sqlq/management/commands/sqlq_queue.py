"""``manage.py sqlq_queue pause|resume|status [NAME ...]``: the operator's queue controls.

- ``pause NAME...``: workers on every host stop claiming from these queues within a second;
  running jobs finish; enqueueing still works.
- ``resume NAME...``: workers claim from them again.
- ``status [NAME...]``: every known queue (or those named): paused or not, pending, scheduled
  and running jobs, and its limits (``SQLQ["QUEUE_LIMITS"]``).
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError, connections

from django_sqlq import queues as queue_control
from django_sqlq.conf import get_settings
from django_sqlq.exceptions import ConfigurationError, InvalidJobError


class Command(BaseCommand):
    help = "Pause or resume queues, or show each queue's state and limits."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("action", choices=["pause", "resume", "status"])
        parser.add_argument("names", nargs="*", metavar="NAME", help="Queue names.")
        parser.add_argument(
            "--database",
            default=None,
            metavar="ALIAS",
            help="Database alias that holds the jobs table (default: SQLQ['DATABASE']).",
        )

    def handle(
        self, *, action: str, names: list[str], database: str | None, **options: Any
    ) -> None:
        try:
            get_settings()
        except ConfigurationError as exc:
            raise CommandError(str(exc)) from exc
        if database is not None and database not in connections.settings:
            raise CommandError(
                f"Unknown database alias {database!r}; known: {', '.join(connections.settings)}.",
                returncode=2,
            )
        names = list(dict.fromkeys(names))
        try:
            if action == "status":
                self._status(names, database)
                return
            if not names:
                raise CommandError(f"Name the queue(s) to {action}.", returncode=2)
            change = queue_control.pause_queue if action == "pause" else queue_control.resume_queue
            for name in names:
                changed = change(name, database=database)
                done = "paused" if action == "pause" else "resumed"
                self.stdout.write(
                    f"Queue {name} {done}." if changed else f"Queue {name} was already {done}."
                )
        except InvalidJobError as exc:
            raise CommandError(str(exc), returncode=2) from exc
        except DatabaseError as exc:
            raise CommandError(
                f"Could not reach the queue database ({exc}); has `migrate` been run?"
            ) from exc

    def _status(self, names: list[str], database: str | None) -> None:
        states = queue_control.queue_states(database=database)
        if names:
            known = {state.name: state for state in states}
            states = [known.get(name) or queue_control.QueueState(name=name) for name in names]
        header = ("QUEUE", "STATE", "PENDING", "SCHEDULED", "RUNNING", "LIMITS")
        rows = [
            (
                state.name,
                "paused" if state.paused else "running",
                str(state.pending),
                str(state.scheduled),
                str(state.running),
                state.limit_display or "-",
            )
            for state in states
        ]
        widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
        for row in [header, *rows]:
            self.stdout.write(
                "  ".join(
                    cell.ljust(width) for cell, width in zip(row, widths, strict=True)
                ).rstrip()
            )
