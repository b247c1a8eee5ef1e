"""sqlq_jobs' subcommands (list, show, retry, cancel, delete, enqueue) and their options, and
what each change does."""

from __future__ import annotations

from collections.abc import Callable

from django.core.management.base import CommandParser

from django_sqlq import lifecycle, statuses
from django_sqlq.management.option_types import (
    MAX_LIMIT,
    duration,
    job_id,
    limit_value,
    positive_int,
    priority_value,
    queue_name,
    status_list,
)

DEFAULT_LIMIT = 50

#: What each change does, the lifecycle function that does it, and which jobs it applies to.
CHANGES: dict[str, tuple[str, Callable[..., lifecycle.Outcome], str]] = {
    "retry": ("retried", lifecycle.retry_now, "only failed or cancelled jobs can be retried"),
    "cancel": (
        "cancelled",
        lifecycle.cancel_or_request,
        "only blocked, scheduled, pending or running jobs can be cancelled",
    ),
    "delete": (
        "deleted",
        lifecycle.delete,
        "a running job cannot be deleted while its worker holds it",
    ),
}


def add_arguments(parser: CommandParser) -> None:
    """sqlq_jobs' subcommands and their options."""
    actions = parser.add_subparsers(
        dest="action", metavar="{list,show,retry,cancel,delete,enqueue}", required=True
    )

    listing = actions.add_parser(
        "list", help="Jobs, newest first, with filters.", description="Jobs, newest first."
    )
    listing.add_argument(
        "--status",
        dest="statuses",
        action="append",
        type=status_list,
        metavar="STATUS",
        help=f"Only jobs in this status ({', '.join(statuses.ALL)}); repeat, or separate "
        "with commas.",
    )
    listing.add_argument(
        "--queue",
        dest="queues",
        action="append",
        type=queue_name,
        metavar="NAME",
        help="Only jobs of this queue; repeat for several.",
    )
    listing.add_argument(
        "--type",
        dest="types",
        action="append",
        metavar="TYPE",
        help="Only jobs of this type (exact); repeat for several.",
    )
    listing.add_argument(
        "--older-than",
        type=duration,
        metavar="AGE",
        help="Only jobs enqueued at least this long ago: seconds, or 30m, 12h, 7d, 1d12h.",
    )
    listing.add_argument(
        "--newer-than",
        type=duration,
        metavar="AGE",
        help="Only jobs enqueued less than this long ago (the same forms).",
    )
    listing.add_argument(
        "--limit",
        type=limit_value,
        default=DEFAULT_LIMIT,
        metavar="N",
        help=f"At most N jobs (default {DEFAULT_LIMIT}, at most {MAX_LIMIT}).",
    )

    show = actions.add_parser("show", help="One job: its fields, payload, result and last error.")
    show.add_argument("job_ids", nargs=1, type=job_id, metavar="ID", help="The job's id.")

    for name, (done, _function, rule) in CHANGES.items():
        what = {
            "retry": "Retry failed or cancelled jobs now: pending again, attempts reset "
            "(as the admin's Retry now).",
            "cancel": "Cancel jobs: a waiting job at once, a running one by asking its "
            "worker to stop it (as the admin's Cancel).",
            "delete": "Delete jobs that are not running (as the admin's Delete).",
        }[name]
        change = actions.add_parser(name, help=what, description=f"{what} {rule.capitalize()}.")
        change.add_argument(
            "job_ids", nargs="+", type=job_id, metavar="ID", help=f"Ids of the jobs {done}."
        )

    add = actions.add_parser(
        "enqueue",
        help="Enqueue one job, as enqueue() does (the same checks).",
        description="Enqueue one job, as django_sqlq.enqueue() does, checked the same way.",
    )
    add.add_argument(
        "job_type", metavar="TYPE", help="A registered job type, or a handler's dotted path."
    )
    add.add_argument(
        "payload",
        nargs="?",
        default=None,
        metavar="PAYLOAD",
        help="The payload as JSON ('{\"order\": 42}'); '-' reads it from stdin. Default: {}.",
    )
    add.add_argument("--queue", default="default", type=queue_name, metavar="NAME")
    add.add_argument("--priority", default=0, type=priority_value, metavar="N")
    add.add_argument(
        "--delay",
        default=None,
        type=duration,
        metavar="AGE",
        help="Run it this long from now: seconds, or 30m, 12h, 7d.",
    )
    add.add_argument("--max-attempts", default=None, type=positive_int, metavar="N")

    for sub in actions.choices.values():
        sub.add_argument(
            "--json",
            action="store_true",
            dest="json",
            help="Print JSON for scripts instead of text.",
        )
        sub.add_argument(
            "--database",
            default=None,
            metavar="ALIAS",
            help="Database alias that holds the jobs table (default: SQLQ['DATABASE']).",
        )
