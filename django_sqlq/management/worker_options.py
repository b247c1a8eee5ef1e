"""sqlq_worker's options: the arguments it declares, the same checks for values that
``call_command()`` passes past argparse, and the queues that ``--queue``, db_worker's
``--queue-name``/``--exclude-queues`` and ``--backend`` come to."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, TypeVar

from django.core.management.base import CommandError, CommandParser

from django_sqlq.management.option_types import (
    interval_seconds,
    positive_float,
    positive_int,
    queue_list,
    queue_name_list,
    queue_option,
    tasks_backend,
    worker_count,
    worker_name,
)

T = TypeVar("T")


def parsed(option: str, value: Any, parse: Callable[[str], T]) -> T | None:
    """``value`` through the option's argparse type; None stays None."""
    return None if value is None else parsed_one(option, value, parse)


def parsed_one(option: str, value: Any, parse: Callable[[str], T]) -> T:
    """``value`` through the option's argparse type (a list: joined by commas first)."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float, list, tuple)):
        raise usage_error(f"--{option.replace('_', '-')}: {value!r} is not a valid value.")
    text = ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)
    try:
        return parse(text)
    except argparse.ArgumentTypeError as exc:
        raise usage_error(f"--{option.replace('_', '-')}: {exc}") from None


def usage_error(message: str) -> CommandError:
    """A bad option value: exit status 2, as argparse gives for a malformed option."""
    return CommandError(message, returncode=2)


def add_arguments(parser: CommandParser) -> None:
    """sqlq_worker's options, db_worker's spellings included."""
    parser.add_argument(
        "--queue",
        dest="queues",
        action="append",
        type=queue_option,
        metavar="NAME[:N]",
        help="A queue to serve; repeat for several (default: SQLQ['QUEUES']). "
        "NAME:N: at most N of this worker's threads on that queue at once.",
    )
    parser.add_argument(
        "--concurrency",
        type=worker_count,
        default=1,
        help="Jobs run at once, each in its own thread (default: 1).",
    )
    parser.add_argument(
        "--processes",
        type=worker_count,
        default=1,
        metavar="N",
        help="Run N worker processes under one supervisor that restarts any that dies "
        "(for CPU-bound jobs; default: 1, no supervisor).",
    )
    parser.add_argument(
        "--burst",
        action="store_true",
        help="Run until no runnable job is left, then exit 0.",
    )
    parser.add_argument(
        "--max-jobs",
        type=positive_int,
        default=None,
        metavar="N",
        help="Exit after N jobs.",
    )
    parser.add_argument(
        "--poll-interval",
        type=positive_float,
        default=None,
        metavar="SECONDS",
        help="Seconds between checks for new jobs when idle (default: SQLQ['POLL_INTERVAL']).",
    )
    parser.add_argument(
        "--database",
        default=None,
        metavar="ALIAS",
        help="Database alias that holds the jobs table (default: SQLQ['DATABASE']).",
    )
    parser.add_argument(
        "--reload",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="Restart the worker when a Python file it imported changes, gracefully (as "
        "at SIGTERM), with Django's autoreloader. For development, not production.",
    )
    parser.add_argument(
        "--worker-id",
        default=None,
        type=worker_name,
        metavar="ID",
        help="Name of this worker in leases, logs and the admin (default: host:pid:random).",
    )
    db_worker = parser.add_argument_group(
        "django-tasks-db db_worker options",
        "Accepted so that a deployment moving from db_worker only renames the command.",
    )
    db_worker.add_argument(
        "--queue-name",
        dest="queue_names",
        type=queue_name_list,
        default=None,
        metavar="NAMES",
        help="Queues to serve, separated by commas, or '*' for every queue.",
    )
    db_worker.add_argument(
        "--exclude-queues",
        type=queue_list,
        default=None,
        metavar="NAMES",
        help="With --queue-name '*': queues not to serve, separated by commas.",
    )
    db_worker.add_argument("--batch", action="store_true", help="The same as --burst.")
    db_worker.add_argument(
        "--interval",
        type=interval_seconds,
        default=None,
        metavar="SECONDS",
        help="The same as --poll-interval (0 allowed: poll without pause).",
    )
    db_worker.add_argument(
        "--max-tasks",
        type=positive_int,
        default=None,
        metavar="N",
        help="The same as --max-jobs.",
    )
    db_worker.add_argument(
        "--backend",
        dest="backend_name",
        type=tasks_backend,
        default=None,
        metavar="ALIAS",
        help="Serve the queues of this settings.TASKS backend (a django_sqlq SQLQBackend): "
        "its QUEUES, or every queue when its QUEUES is empty.",
    )
    db_worker.add_argument(
        "--no-startup-delay",
        dest="startup_delay",
        action="store_false",
        help="Accepted and ignored: sqlq_worker has no startup delay (claims never collide).",
    )


def queue_options(queues: Any, limits: dict[str, int]) -> list[str]:
    """--queue values (``NAME`` or ``NAME:N``; parsed already from the command line,
    strings from call_command) -> the names; the N of each ``NAME:N`` into ``limits``."""
    names: list[str] = []
    for value in [queues] if isinstance(queues, str) else queues:
        if isinstance(value, tuple):
            name, most = value
        else:
            name, most = parsed_one("queue", value, queue_option)
        if name in names and limits.get(name) != most:
            raise usage_error(
                f"--queue: {name!r} is given twice with different limits "
                f"({limits.get(name) or 'none'} and {most or 'none'})."
            )
        if name not in names:
            names.append(name)
        if most is not None:
            limits[name] = most
    return names


def backend_queues(
    alias: str,
    queues: list[str] | None,
    all_queues: bool,
    exclude_queues: list[str] | None,
) -> tuple[list[str] | None, bool]:
    """--backend: that backend's queues, narrowed by --queue/--queue-name and
    --exclude-queues. Returns (queues, all_queues): a backend whose QUEUES is empty
    allows any queue name, so it serves every queue (or those asked for)."""
    # Django's tasks framework is optional: the backend module needs it.
    from django_sqlq.backend import SQLQBackend
    from django_sqlq.compat import task_backends

    backend = task_backends[alias]
    assert isinstance(backend, SQLQBackend)  # checked by tasks_backend()
    served = backend.served_queues()
    if served is None:
        return (None, True) if queues is None or all_queues else (queues, False)
    if queues is None or all_queues:
        return [name for name in served if name not in (exclude_queues or ())], False
    outside = [name for name in queues if name not in served]
    if outside:
        raise usage_error(
            f"Queue(s) {', '.join(outside)} are not queues of TASKS[{alias!r}] "
            f"({', '.join(served)})."
        )
    return queues, False
