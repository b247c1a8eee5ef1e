"""``manage.py sqlq_jobs list|show|retry|cancel|delete|enqueue``: jobs from the shell.

What the admin's job pages and actions do, for operators at a terminal and for scripts
(``--json``): list jobs with filters, show one, retry, cancel or delete some, enqueue one.
Every change goes through :mod:`django_sqlq.lifecycle` (``retry_now``,
``cancel_or_request``, ``delete``) and :func:`django_sqlq.enqueue`, as the admin's actions
do; the reads are ORM queries. There is no Django user here: the command acts with the
database rights of the settings it runs with, so who may run ``manage.py`` is who may
change jobs (the admin's retry/cancel/delete permissions do not apply).

Exit status: 0 when every job named was found and changed; 1 when one was not found or
could not be changed (a retry of a completed job, a delete of a running one), after doing
the rest; 2 for bad input (an option, a status, a payload that is not JSON, an unknown job
type or queue).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.core.serializers.json import DjangoJSONEncoder
from django.db import DatabaseError
from django.utils import timezone

from django_sqlq.exceptions import InvalidJobError, PayloadError, SQLQError
from django_sqlq.jsoncodec import parse_json
from django_sqlq.management import jobs_options
from django_sqlq.management.base import SQLQCommand, queue_database
from django_sqlq.management.jobs_options import CHANGES, DEFAULT_LIMIT
from django_sqlq.management.option_types import (
    duration,
    job_id,
    limit_value,
    positive_int,
    priority_value,
    queue_name,
    status_list,
)
from django_sqlq.models import Job

#: The fields ``list`` shows (and ``list --json`` gives for each job).
LIST_FIELDS = (
    "id",
    "type",
    "queue",
    "status",
    "priority",
    "attempts",
    "max_attempts",
    "created_at",
    "scheduled_at",
    "completed_at",
)
#: ``show`` adds these.
SHOW_FIELDS = (
    *LIST_FIELDS,
    "uuid",
    "updated_at",
    "started_at",
    "locked_by",
    "lease_expires_at",
    "timeout",
    "unique_key",
    "chain_id",
    "chain_index",
    "cancel_requested_at",
    "progress",
    "progress_message",
    "payload",
    "result",
    "last_error",
)


def job_fields(job: Job, fields: Sequence[str]) -> dict[str, Any]:
    """The job as a dict of JSON values (times in ISO 8601, the uuid as a string)."""
    data: dict[str, Any] = {name: getattr(job, name) for name in fields}
    loaded: dict[str, Any] = json.loads(json.dumps(data, cls=DjangoJSONEncoder))
    return loaded


def bad_input(message: str) -> CommandError:
    return CommandError(message, returncode=2)


class Command(SQLQCommand):
    help = (
        "List, show, retry, cancel, delete or enqueue jobs. Runs with the database rights "
        "of these settings: there is no Django user, and the admin's permissions do not apply."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        jobs_options.add_arguments(parser)

    def handle(self, *, action: str, **options: Any) -> None:
        alias = queue_database(options.get("database"))
        self.as_json = bool(options.get("json"))
        try:
            if action == "list":
                self._list(alias, **options)
            elif action == "show":
                self._show(alias, _ids(options)[0])
            elif action == "enqueue":
                self._enqueue(alias, **options)
            else:
                self._change(alias, action, _ids(options))
        except DatabaseError as exc:
            raise CommandError(f"The queue database {alias!r} failed: {exc}") from exc

    # -- list, show -------------------------------------------------------------------------

    def _list(
        self,
        alias: str,
        *,
        statuses: list[list[str]] | None = None,
        queues: list[str] | None = None,
        types: list[str] | None = None,
        older_than: float | None = None,
        newer_than: float | None = None,
        limit: int = DEFAULT_LIMIT,
        **options: Any,
    ) -> None:
        jobs = Job.objects.using(alias).all()
        if statuses:
            chosen = [name for names in statuses for name in _listed(names, status_list)]
            jobs = jobs.filter(status__in=chosen)
        if queues:
            jobs = jobs.filter(queue__in=[_checked(queue_name, q) for q in queues])
        if types:
            jobs = jobs.filter(type__in=types)
        now = timezone.now()
        if older_than is not None:
            jobs = jobs.filter(created_at__lte=now - timedelta(seconds=_age(older_than)))
        if newer_than is not None:
            jobs = jobs.filter(created_at__gt=now - timedelta(seconds=_age(newer_than)))
        limit = _checked(limit_value, limit)
        found = list(jobs.only(*LIST_FIELDS).order_by("-id")[:limit])
        if self.as_json:
            self._print_json([job_fields(job, LIST_FIELDS) for job in found])
            return
        header = ("ID", "STATUS", "QUEUE", "TYPE", "ATTEMPTS", "CREATED")
        rows = [
            (
                str(job.pk),
                job.status,
                job.queue,
                job.type,
                f"{job.attempts}/{job.max_attempts}",
                timezone.localtime(job.created_at).isoformat(sep=" ", timespec="seconds"),
            )
            for job in found
        ]
        widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
        for row in [header, *rows]:
            cells = (cell.ljust(width) for cell, width in zip(row, widths, strict=True))
            self.stdout.write("  ".join(cells).rstrip())
        if len(found) == limit:
            self.stderr.write(f"(the newest {limit}; --limit N shows more)")

    def _show(self, alias: str, pk: int) -> None:
        job = Job.objects.using(alias).filter(pk=pk).first()
        if job is None:
            raise CommandError(f"No job has id {pk}.")
        data = job_fields(job, SHOW_FIELDS)
        if self.as_json:
            self._print_json(data)
            return
        for name in SHOW_FIELDS:
            value = data[name]
            if name in ("payload", "result"):
                text = json.dumps(value, indent=2, ensure_ascii=False)
                self.stdout.write(f"{name}:")
                self.stdout.write("  " + text.replace("\n", "\n  "))
            elif name == "last_error":
                if value:
                    self.stdout.write("last_error:")
                    self.stdout.write("  " + str(value).rstrip().replace("\n", "\n  "))
            elif value not in (None, ""):
                self.stdout.write(f"{name}: {value}")

    # -- retry, cancel, delete --------------------------------------------------------------

    def _change(self, alias: str, action: str, ids: list[int]) -> None:
        done, function, rule = CHANGES[action]
        ids = list(dict.fromkeys(ids))
        before = dict(Job.objects.using(alias).filter(pk__in=ids).values_list("pk", "status"))
        results: list[dict[str, Any]] = []
        for pk in ids:
            if pk not in before:
                results.append({"id": pk, "result": "missing", "status": None})
                continue
            # One job per call: each answer is that job's (the jobs named by hand are few).
            outcome = function([pk], alias=alias)
            status = Job.objects.using(alias).filter(pk=pk).values_list("status", flat=True)
            now_status = status.first()
            if outcome.changed:
                result = "cancel requested" if outcome.requested else done
                results.append({"id": pk, "result": result, "status": now_status})
            elif now_status is None:  # deleted meanwhile (a prune, another operator)
                results.append({"id": pk, "result": "missing", "status": None})
            else:
                reason = (
                    "a live job holds its unique_key"
                    if outcome.held
                    else f"it is {now_status or before[pk]}: {rule}"
                )
                results.append(
                    {"id": pk, "result": "skipped", "status": now_status, "reason": reason}
                )
        failed = [item for item in results if item["result"] in ("missing", "skipped")]
        if self.as_json:
            self._print_json(results)
        else:
            self._print_changes(results, done)
        if failed:
            raise CommandError(
                f"{len(failed)} of {len(results)} job(s) not {done}.",
                returncode=1,
            )

    def _print_changes(self, results: list[dict[str, Any]], done: str) -> None:
        for item in results:
            if item["result"] == "missing":
                self.stderr.write(f"Job {item['id']}: no job has this id.")
            elif item["result"] == "skipped":
                self.stderr.write(f"Job {item['id']}: not {done}; {item['reason']}.")
            elif item["result"] == "cancel requested":
                self.stdout.write(f"Job {item['id']}: running; its worker is asked to cancel it.")
            else:
                self.stdout.write(f"Job {item['id']}: {done} (now {item['status']}).")

    # -- enqueue ----------------------------------------------------------------------------

    def _enqueue(
        self,
        alias: str,
        *,
        job_type: str,
        payload: str | None = None,
        queue: str = "default",
        priority: int = 0,
        delay: float | None = None,
        max_attempts: int | None = None,
        **options: Any,
    ) -> None:
        from django_sqlq.api import enqueue

        if payload == "-":
            payload = sys.stdin.read()
        try:
            data = {} if payload is None else parse_json(payload)
        except PayloadError as exc:
            raise bad_input(str(exc)) from exc
        if alias != _default_alias():
            raise bad_input(
                f"sqlq_jobs enqueue writes to SQLQ['DATABASE'] ({_default_alias()!r}), as "
                f"enqueue() does; --database {alias!r} is not it."
            )
        try:
            job = enqueue(
                job_type,
                data,
                queue=queue,
                priority=_checked(priority_value, priority),
                delay=None if delay is None else _age(delay),
                max_attempts=_checked(positive_int, max_attempts),
            )
        except (InvalidJobError, SQLQError) as exc:
            raise bad_input(str(exc)) from exc
        if self.as_json:
            self._print_json(job_fields(job, LIST_FIELDS))
        else:
            self.stdout.write(
                f"Job {job.pk} enqueued: type {job.type}, queue {job.queue}, {job.status}."
            )

    def _print_json(self, value: Any) -> None:
        self.stdout.write(json.dumps(value, ensure_ascii=False, cls=DjangoJSONEncoder))


def _default_alias() -> str:
    from django_sqlq.conf import get_settings

    return get_settings().DATABASE


def _ids(options: dict[str, Any]) -> list[int]:
    """The ids given (parsed already from the command line; call_command may pass ints or
    strings)."""
    values = options.get("job_ids") or []
    if isinstance(values, (int, str)):
        values = [values]
    return [_checked(job_id, value) for value in values]


def _checked(parse: Callable[[str], Any], value: Any) -> Any:
    """``value`` through an option's converter (call_command keywords skip argparse's; a
    value parsed already parses to itself): a CommandError with exit status 2 if it
    refuses it."""
    if value is None:
        return None
    try:
        return parse(str(value))
    except argparse.ArgumentTypeError as exc:
        raise bad_input(str(exc)) from exc


def _listed(value: Any, parse: Callable[[str], list[str]]) -> list[str]:
    if isinstance(value, list):
        value = ",".join(map(str, value))
    try:
        return parse(str(value))
    except argparse.ArgumentTypeError as exc:
        raise bad_input(str(exc)) from exc


def _age(value: Any) -> float:
    try:
        return float(duration(str(value)))
    except argparse.ArgumentTypeError as exc:
        raise bad_input(str(exc)) from exc
