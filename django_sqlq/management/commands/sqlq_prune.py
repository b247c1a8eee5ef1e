"""``manage.py sqlq_prune``: delete finished jobs older than ``SQLQ["KEEP_FINISHED"]`` now,
for operators who prefer cron to the workers' own pruner (the same pass, the same lease: it
never runs at the same time as a worker's).

It also takes django-tasks-db's ``prune_db_task_results`` options (``--backend``,
``--queue-name``, ``--min-age-days``, ``--failed-min-age-days``, ``--dry-run``) and a
``--task-status`` in the tasks framework's status names, under the same ``dest`` names, so a
switched project's cron line only changes the command's name.
"""

from __future__ import annotations

import argparse
import os
import socket
from collections.abc import Callable
from typing import Any, TypeVar

from django.core.management.base import CommandError, CommandParser
from django.db import DatabaseError, connections

from django_sqlq import retention
from django_sqlq import statuses as job_statuses
from django_sqlq.conf import get_settings
from django_sqlq.exceptions import ConfigurationError, InvalidJobError
from django_sqlq.management.base import SQLQCommand, queue_database
from django_sqlq.management.option_types import duration, queue_name
from django_sqlq.validation import MAX_DELAY_SECONDS, check_name, number_text

#: The tasks framework's names of finished results (``--task-status``), as ours. A job
#: cancelled from the admin reads as FAILED, so FAILED covers both.
TASK_STATUSES: dict[str, tuple[str, ...]] = {
    "SUCCESSFUL": (job_statuses.COMPLETED,),
    "FAILED": (job_statuses.FAILED, job_statuses.CANCELLED),
}
_UNFINISHED_TASK_STATUSES = ("READY", "RUNNING")


def days(value: str) -> int:
    """``--min-age-days``, ``--failed-min-age-days``: whole days, 0 or more."""
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number of days") from None
    if not 0 <= number <= MAX_DELAY_SECONDS // 86400:
        raise argparse.ArgumentTypeError(f"must be 0 or more days, got {number}")
    return number


T = TypeVar("T")


def _checked(option: str, value: Any, parse: Callable[[str], T]) -> T | None:
    """``value`` (None, or what argparse or a call_command() keyword gave) through the
    option's converter; a CommandError naming the option if it refuses it."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise CommandError(f"--{option}: {value!r} is not a valid value.")
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # min_age_days=14.0 is 14 days
    try:
        return parse(str(value))
    except argparse.ArgumentTypeError as exc:
        raise CommandError(f"--{option}: {exc}") from None


def _split(values: list[str] | str | None) -> list[str]:
    if values is None:
        return []
    if isinstance(values, str):
        values = [values]
    return [part.strip() for value in values for part in value.split(",") if part.strip()]


class Command(SQLQCommand):
    help = (
        "Delete finished jobs (completed, failed, cancelled) older than SQLQ['KEEP_FINISHED'], "
        "or than --older-than. Scheduled, pending and processing jobs are never deleted."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help="Delete nothing: print how many jobs would be deleted, per status and queue.",
        )
        parser.add_argument(
            "--status",
            action="append",
            dest="statuses",
            metavar="STATUS",
            help="Only jobs in this finished status: completed, failed or cancelled "
            "(repeat, or separate with commas). Default: all three.",
        )
        parser.add_argument(
            "--queue",
            action="append",
            dest="queues",
            type=queue_name,
            metavar="NAME",
            help="Only jobs of this queue (repeat for more). Default: every queue.",
        )
        parser.add_argument(
            "--older-than",
            type=duration,
            metavar="DURATION",
            help="Delete the selected statuses' jobs finished longer ago than this (3600, 30m, "
            "12h, 7d), instead of KEEP_FINISHED, even for a status it keeps for ever.",
        )
        parser.add_argument(
            "--database",
            help="The queue database's alias (default: SQLQ['DATABASE']).",
        )
        group = parser.add_argument_group("django-tasks-db's prune_db_task_results options")
        group.add_argument(
            "--backend",
            metavar="ALIAS",
            help="A TASKS alias; it must be a django_sqlq backend. Checked only: the jobs "
            "table is shared by every backend (narrow with --queue-name).",
        )
        group.add_argument(
            "--queue-name",
            metavar="NAMES",
            help="Queues, separated by commas; '*' for all (the same as --queue).",
        )
        group.add_argument(
            "--min-age-days",
            type=days,
            metavar="DAYS",
            help="The same as --older-than DAYSd.",
        )
        group.add_argument(
            "--failed-min-age-days",
            type=days,
            metavar="DAYS",
            help="Failed (and cancelled) jobs' minimum age in days (default: --min-age-days).",
        )
        group.add_argument(
            "--task-status",
            action="append",
            metavar="STATUS",
            help="SUCCESSFUL or FAILED (the tasks framework's names; FAILED covers cancelled "
            "jobs too). The same as --status.",
        )

    def handle(
        self,
        *,
        verbosity: int = 1,
        dry_run: bool = False,
        statuses: list[str] | None = None,
        queues: list[str] | None = None,
        older_than: float | None = None,
        database: str | None = None,
        backend: Any = None,
        queue_name: str | None = None,
        min_age_days: int | None = None,
        failed_min_age_days: int | None = None,
        task_status: list[str] | str | None = None,
        **options: Any,
    ) -> None:
        try:
            conf = get_settings()
        except ConfigurationError as exc:
            raise CommandError(str(exc)) from exc
        alias = database or conf.DATABASE
        if alias not in connections.settings:
            raise CommandError(f"--database {alias!r} is not in settings.DATABASES.")
        if backend is not None:
            self._check_backend(backend)
        # call_command() keywords skip argparse's converters: the same checks, once more.
        older_than = _checked("older-than", older_than, duration)
        min_age_days = _checked("min-age-days", min_age_days, days)
        failed_min_age_days = _checked("failed-min-age-days", failed_min_age_days, days)
        chosen = self._statuses(statuses, task_status)
        selected_queues = self._queues(queues, queue_name)
        keep = self._keep(conf.KEEP_FINISHED, chosen, older_than, min_age_days)
        if failed_min_age_days is not None:
            for status in (job_statuses.FAILED, job_statuses.CANCELLED):
                if status in chosen:
                    keep[status] = failed_min_age_days * 86400
        queue_database(alias)  # every migration applied, or a message naming migrate
        self._describe(keep, verbosity)
        try:
            if dry_run:
                self._dry_run(alias, keep, selected_queues)
            else:
                self._prune(alias, keep, selected_queues, verbosity)
        except DatabaseError as exc:
            raise CommandError(f"The queue database {alias!r} failed: {exc}") from exc

    # -- options ----------------------------------------------------------------------------

    def _check_backend(self, backend: Any) -> None:
        from django_sqlq import compat

        if not isinstance(backend, str):
            backend = getattr(backend, "alias", backend)
        if not compat.AVAILABLE:
            raise CommandError(
                "--backend needs Django's tasks framework (Django 6+ or django-tasks)."
            )
        from django_sqlq.backend import sqlq_backends

        found = sqlq_backends()
        if backend not in found:
            raise CommandError(
                f"--backend {backend!r} is not a django_sqlq tasks backend; "
                f"those in TASKS: {', '.join(found) or 'none'}."
            )

    def _statuses(
        self, names: list[str] | None, task_names: list[str] | str | None
    ) -> tuple[str, ...]:
        ours, theirs = _split(names), _split(task_names)
        if ours and theirs:
            raise CommandError("Give --status or --task-status, not both.")
        chosen: list[str] = []
        for name in ours:
            if name.lower() not in job_statuses.FINISHED:
                raise CommandError(self._not_finished(name, ", ".join(job_statuses.FINISHED)))
            chosen.append(name.lower())
        for name in theirs:
            mapped = TASK_STATUSES.get(name.upper())
            if mapped is None:
                raise CommandError(self._not_finished(name, "SUCCESSFUL, FAILED"))
            chosen.extend(mapped)
        return tuple(dict.fromkeys(chosen)) or job_statuses.FINISHED

    @staticmethod
    def _not_finished(name: str, allowed: str) -> str:
        live = name.lower() in job_statuses.LIVE or name.upper() in _UNFINISHED_TASK_STATUSES
        why = " Jobs that have not finished are never pruned." if live else ""
        return f"Cannot prune jobs in status {name!r}: choose among {allowed}.{why}"

    def _queues(self, queues: list[str] | None, names: str | None) -> list[str] | None:
        if queues and names is not None:
            raise CommandError("Give --queue or --queue-name, not both.")
        if names is None:
            return list(queues) if queues else None
        split = _split(names)
        if not split:
            raise CommandError("--queue-name needs queue names separated by commas, or '*'.")
        if "*" in split:
            return None
        for name in split:
            try:
                check_name("queue name", name, max_length=100)
            except InvalidJobError as exc:
                raise CommandError(f"--queue-name: {exc}") from None
        return split

    def _keep(
        self,
        configured: Any,
        chosen: tuple[str, ...],
        older_than: float | None,
        min_age_days: int | None,
    ) -> dict[str, float | None]:
        if older_than is not None and min_age_days is not None:
            raise CommandError("Give --older-than or --min-age-days, not both.")
        if min_age_days is not None:
            older_than = min_age_days * 86400.0
        return {
            status: (older_than if older_than is not None else configured[status])
            for status in chosen
        }

    # -- output -----------------------------------------------------------------------------

    def _describe(self, keep: dict[str, float | None], verbosity: int) -> None:
        if verbosity < 2:
            return
        for status, seconds in keep.items():
            kept = "for ever" if seconds is None else f"{number_text(seconds)} s"
            self.stdout.write(f"Keeping {status} jobs {kept}.")

    def _dry_run(
        self, alias: str, keep: dict[str, float | None], queues: list[str] | None
    ) -> None:
        counts = retention.prunable(alias, keep=keep, queues=queues)
        total = 0
        for status, per_queue in counts.items():
            for queue, count in sorted(per_queue.items()):
                self.stdout.write(f"{status:<10} {queue:<30} {count}")
                total += count
        for status, seconds in keep.items():
            if seconds is None:
                self.stdout.write(f"{status:<10} (kept for ever: KEEP_FINISHED is None)")
        self.stdout.write(f"Would delete {total} finished job(s).")

    def _prune(
        self,
        alias: str,
        keep: dict[str, float | None],
        queues: list[str] | None,
        verbosity: int,
    ) -> None:
        holder = f"sqlq_prune@{socket.gethostname()}:{os.getpid()}"
        try:
            result = retention.prune(alias, keep=keep, queues=queues, holder=holder)
        except retention.PrunerBusy as busy:
            raise CommandError(f"Not pruning: {busy}. Try again later.") from busy
        if verbosity >= 1:
            details = ", ".join(f"{status} {n}" for status, n in result.deleted.items())
            self.stdout.write(
                f"Deleted {result.total} finished job(s)" + (f" ({details})." if details else ".")
            )
