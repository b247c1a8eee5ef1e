"""``manage.py sqlq_worker``: parse and validate options, set up logging, run a Worker."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connections

from django_sqlq.conf import get_settings
from django_sqlq.exceptions import ConfigurationError
from django_sqlq.worker import Worker, WorkerError

VERBOSITY_LEVELS = {0: logging.ERROR, 1: logging.INFO, 2: logging.DEBUG, 3: logging.DEBUG}


def positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {number}")
    return number


def positive_float(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number") from None
    if not number > 0 or number == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {value}")
    return number


def queue_name(value: str) -> str:
    if not value or len(value) > 100:
        raise argparse.ArgumentTypeError("a queue name is 1 to 100 characters")
    return value


class Command(BaseCommand):
    help = "Run a django_sqlq worker: claim jobs from the queue database and run them."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--queue",
            dest="queues",
            action="append",
            type=queue_name,
            metavar="NAME",
            help="A queue to serve; repeat for several (default: SQLQ['QUEUES']).",
        )
        parser.add_argument(
            "--concurrency",
            type=positive_int,
            default=1,
            help="Jobs run at once, each in its own thread (default: 1).",
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
            "--worker-id",
            default=None,
            metavar="ID",
            help="Name of this worker in leases, logs and the admin (default: host:pid:random).",
        )

    def handle(
        self,
        *,
        queues: list[str] | None,
        concurrency: int,
        burst: bool,
        max_jobs: int | None,
        poll_interval: float | None,
        database: str | None,
        worker_id: str | None,
        verbosity: int,
        **options: Any,
    ) -> None:
        try:
            conf = get_settings()
        except ConfigurationError as exc:
            raise CommandError(str(exc)) from exc
        if database is not None and database not in connections.settings:
            raise CommandError(
                f"Unknown database alias {database!r}; known: {', '.join(connections.settings)}."
            )
        if queues:
            unknown = [q for q in queues if q not in conf.QUEUES]
            if unknown:
                raise CommandError(
                    f"Unknown queue(s): {', '.join(unknown)}. Known queues: "
                    f"{', '.join(conf.QUEUES)} (SQLQ['QUEUES'])."
                )
        self._configure_logging(verbosity)
        worker = Worker(
            queues=queues or None,
            concurrency=concurrency,
            poll_interval=poll_interval,
            database=database,
            worker_id=worker_id,
            max_jobs=max_jobs,
        )
        try:
            worker.run(burst=burst)
        except WorkerError as exc:
            raise CommandError(str(exc)) from exc
        if worker.forced:
            sys.exit(1)

    def _configure_logging(self, verbosity: int) -> None:
        logger = logging.getLogger("django_sqlq")
        logger.setLevel(VERBOSITY_LEVELS.get(verbosity, logging.INFO))
        if not logger.handlers and not logging.getLogger().handlers:
            handler = logging.StreamHandler(self.stdout)
            handler.setFormatter(
                logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s")
            )
            logger.addHandler(handler)
