"""``manage.py sqlq_queue pause|resume|status [NAME ...]``: the operator's queue controls.

- ``pause NAME...``: workers on every host stop claiming from these queues within a second;
  running jobs finish; enqueueing still works.
- ``resume NAME...``: workers claim from them again.
- ``status [NAME...]``: every known queue (or those named): paused or not, pending, scheduled
  and running jobs, and its limits (``SQLQ["QUEUE_LIMITS"]``).

A name no setting, worker, job or earlier pause knows is refused (a typo would otherwise
pause a queue nobody uses, and stay listed): ``--new`` names a queue no worker serves yet.
"""

from __future__ import annotations

import difflib
from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.db import DatabaseError

from django_sqlq import queues as queue_control
from django_sqlq.exceptions import InvalidJobError
from django_sqlq.management.base import SQLQCommand, queue_database

ACTIONS_HELP = (
    "pause: workers on every host stop claiming from the named queues within a second "
    "(running jobs finish, enqueue() still works); resume: they claim from them again; "
    "status: each known queue (or those named) with its state, pending, scheduled and "
    "running jobs, and its limits."
)


class Command(SQLQCommand):
    help = "Pause or resume queues, or show each queue's state and limits."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("action", choices=["pause", "resume", "status"], help=ACTIONS_HELP)
        parser.add_argument("names", nargs="*", metavar="NAME", help="Queue names.")
        parser.add_argument(
            "--new",
            action="store_true",
            help="pause/resume: accept a queue name nothing knows yet (no setting, worker, "
            "job or earlier pause): a queue about to be used. Without it such a name is "
            "refused, as a likely typo.",
        )
        parser.add_argument(
            "--database",
            default=None,
            metavar="ALIAS",
            help="Database alias that holds the jobs table (default: SQLQ['DATABASE']).",
        )

    def handle(
        self,
        *,
        action: str,
        names: list[str],
        database: str | None,
        new: bool = False,
        **options: Any,
    ) -> None:
        alias = queue_database(database)
        names = list(dict.fromkeys(names))
        try:
            if action != "status" and not names:
                raise CommandError(f"Name the queue(s) to {action}.", returncode=2)
            if names and not (new and action != "status"):
                self._refuse_unknown(names, alias, action)
            if action == "status":
                self._status(names, alias)
                return
            change = queue_control.pause_queue if action == "pause" else queue_control.resume_queue
            for name in names:
                changed = change(name, database=alias)
                done = "paused" if action == "pause" else "resumed"
                self.stdout.write(
                    f"Queue {name} {done}." if changed else f"Queue {name} was already {done}."
                )
        except InvalidJobError as exc:
            raise CommandError(str(exc), returncode=2) from exc
        except DatabaseError as exc:
            raise CommandError(
                f"The queue database refused it ({exc}); if django_sqlq's tables are "
                "missing, run `migrate`."
            ) from exc

    def _refuse_unknown(self, names: list[str], alias: str, action: str) -> None:
        """A CommandError for the names no setting, worker, job or earlier pause knows,
        with the close known names; a name that is not a queue name at all first."""
        from django_sqlq import validation

        for name in names:
            validation.check_name("queue name", name, max_length=100)
        known = queue_control.known_queues(database=alias)
        unknown = [name for name in names if name not in known]
        if not unknown:
            return
        lines = []
        for name in unknown:
            close = difflib.get_close_matches(name, known, n=1)
            lines.append(
                f"Unknown queue {name!r}" + (f": did you mean {close[0]!r}?" if close else ".")
            )
        hint = (
            f" To {action} a queue no worker serves yet, add --new." if action != "status" else ""
        )
        raise CommandError(
            " ".join(lines)
            + f" Known queues: {', '.join(known) or 'none'} (SQLQ['QUEUES'], the tasks "
            "backends' QUEUES, QUEUE_LIMITS, queues with jobs waiting or running, workers' "
            f"--queue, queues paused before).{hint}"
        )

    def _status(self, names: list[str], database: str) -> None:
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
