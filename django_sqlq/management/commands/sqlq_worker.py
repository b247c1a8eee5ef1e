"""``manage.py sqlq_worker``: parse and validate options, set up logging, run a Worker.

It also takes django-tasks-db's ``db_worker`` options (``--queue-name``, ``--exclude-queues``,
``--batch``, ``--interval``, ``--max-tasks``, ``--backend``, ``--no-startup-delay``,
``--no-reload``), under db_worker's ``dest`` names too, so moving from db_worker only renames
the command, in ``call_command("sqlq_worker", batch=True, queue_name="*", ...)`` as well.
"""

from __future__ import annotations

import logging
import sys
import traceback
from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.db import DatabaseError, connections
from django.utils import autoreload

from django_sqlq import validation
from django_sqlq.conf import get_settings
from django_sqlq.exceptions import ConfigurationError
from django_sqlq.management import worker_options
from django_sqlq.management.base import SQLQCommand
from django_sqlq.management.option_types import (
    interval_seconds,
    positive_float,
    positive_int,
    queue_list,
    queue_name_list,
    tasks_backend,
    worker_name,
)
from django_sqlq.management.worker_options import parsed, parsed_one, usage_error
from django_sqlq.queues import worker_queues
from django_sqlq.worker import Worker, WorkerError, unreachable
from django_sqlq.worker import signals as stopsignals

# -v: (level of the django_sqlq loggers, level of the per-job lines). At the default (1),
# the worker logs its start, a summary line every few seconds while it works, warnings and
# errors; a line per job (which would cost as much as the job itself when jobs are fast)
# from -v 2, and each job's start and everything else from -v 3.
VERBOSITY_LEVELS = {
    0: (logging.ERROR, logging.ERROR),
    1: (logging.INFO, logging.WARNING),
    2: (logging.INFO, logging.INFO),
    3: (logging.DEBUG, logging.DEBUG),
}


class _OutputHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """The handler sqlq_worker adds, on its own output, to a logger nothing else prints."""


def _print_on(logger: logging.Logger, stream: Any) -> None:
    """Print ``logger``'s records on ``stream`` (the command's stdout) when neither it nor the
    root logger has a handler of the project's. A handler an earlier call_command() added in
    this process is replaced: it wrote on that call's stdout, not this one's."""
    for old in [h for h in logger.handlers if isinstance(h, _OutputHandler)]:
        logger.removeHandler(old)
    if not logger.handlers and not logging.getLogger().handlers:
        handler = _OutputHandler(stream)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
        logger.addHandler(handler)


class Command(SQLQCommand):
    help = "Run a django_sqlq worker: claim jobs from the queue database and run them."

    # From the command line: what handles a stop signal while the command starts.
    _early: stopsignals.EarlyStop | None = None

    def run_from_argv(self, argv: list[str]) -> None:
        # The first thing the command does from the command line: a SIGTERM/SIGINT while it
        # starts (option checks, system checks, the migrations check) is a graceful stop,
        # exit 0, as when the worker is idle, not the end of the process by the signal.
        try:
            with stopsignals.early_stop() as self._early:
                super().run_from_argv(argv)
        except stopsignals.StartupInterrupted as stop:
            self.stdout.write(
                f"sqlq_worker received {stopsignals.name(stop.signum)} while starting: "
                "stopped gracefully before claiming any job"
            )

    def execute(self, *args: Any, **options: Any) -> str | None:
        self._database = options.get("database") or None
        return super().execute(*args, **options)

    def check(self, *args: Any, **kwargs: Any) -> None:
        # Django's system checks may open a connection (SQLite's JSON support is checked on
        # one): a database that cannot be reached is one line here too, not a traceback.
        from django_sqlq import reloader

        if reloader.in_child():
            # --reload's worker: the checks import the apps' jobs.py (the schedule check),
            # so a syntax error saved there is said here, and the child waits for the next
            # change instead of ending the command, as runserver does.
            try:
                autoreload.check_errors(super().check)(*args, **kwargs)
            except Exception:
                self.stderr.write(
                    "sqlq_worker --reload: the worker could not start; fix the code and "
                    f"save, it starts again:\n{traceback.format_exc()}"
                )
                sys.exit(reloader.wait_for_change())
            return
        try:
            super().check(*args, **kwargs)
        except DatabaseError as exc:
            alias = getattr(self, "_database", None) or get_settings().DATABASE
            raise CommandError(unreachable(alias, exc)) from exc

    def add_arguments(self, parser: CommandParser) -> None:
        worker_options.add_arguments(parser)

    def handle(  # noqa: C901 (one check per option, db_worker's spellings included)
        self,
        *,
        queues: list[Any] | None,
        concurrency: int,
        processes: int,
        burst: bool,
        max_jobs: int | None,
        poll_interval: float | None,
        database: str | None,
        worker_id: str | None,
        queue_names: list[str] | None,
        exclude_queues: list[str] | None,
        batch: bool,
        interval: float | None,
        max_tasks: int | None,
        backend_name: str | None,
        startup_delay: bool,  # noqa: ARG002 (db_worker's option, ignored)
        reload: bool,
        verbosity: int,
        **options: Any,
    ) -> None:
        try:
            get_settings()  # a broken SQLQ setting stops the command here, as a usage error
        except ConfigurationError as exc:
            raise CommandError(str(exc)) from exc
        # call_command(..., name=value) skips argparse's type=: validate those values here
        # (from the command line they are already parsed; parsing them again changes nothing).
        concurrency = parsed_one("concurrency", concurrency, positive_int)
        processes = parsed_one("processes", processes, positive_int)
        max_jobs = parsed("max_jobs", max_jobs, positive_int)
        max_tasks = parsed("max_tasks", max_tasks, positive_int)
        poll_interval = parsed("poll_interval", poll_interval, positive_float)
        interval = parsed("interval", interval, interval_seconds)
        queue_names = parsed("queue_name", queue_names, queue_name_list)
        exclude_queues = parsed("exclude_queues", exclude_queues, queue_list)
        queue_limits: dict[str, int] = {}
        if queues is not None:
            queues = worker_options.queue_options(queues, queue_limits)
        backend_name = parsed("backend", backend_name, tasks_backend)
        if worker_id:  # "" (as None): the generated host:pid:random
            worker_id = parsed_one("worker_id", worker_id, worker_name)
            if processes > 1 and len(f"{worker_id}-{processes - 1}") > validation.MAX_WORKER_ID:
                raise usage_error(
                    f"--worker-id: with --processes {processes} the processes are named "
                    f"{worker_id[:20]}...-0 to -{processes - 1}, which must be at most "
                    f"{validation.MAX_WORKER_ID} characters; give a shorter id."
                )
        if database is not None and database not in connections.settings:
            raise usage_error(
                f"Unknown database alias {database!r}; known: {', '.join(connections.settings)}."
            )
        for ours, theirs, both in (
            ("--queue", "--queue-name", queues and queue_names is not None),
            ("--poll-interval", "--interval", poll_interval is not None and interval is not None),
            ("--max-jobs", "--max-tasks", max_jobs is not None and max_tasks is not None),
        ):
            if both:
                raise usage_error(f"Give {ours} or {theirs} (db_worker's name for it), not both.")
        poll_interval = interval if interval is not None else poll_interval
        max_jobs = max_tasks if max_tasks is not None else max_jobs
        burst = burst or batch
        if reload:
            self._check_reload(burst=burst, processes=processes)
        all_queues = False
        if queue_names == ["*"]:
            all_queues, queues = True, None
        elif queue_names is not None:
            queues = queue_names
        if exclude_queues and not all_queues:
            raise usage_error("--exclude-queues can only be used with --queue-name '*'.")
        if backend_name is not None:
            queues, all_queues = worker_options.backend_queues(
                backend_name, queues, all_queues, exclude_queues
            )
            if not all_queues:
                exclude_queues = None
                if not queues:
                    raise usage_error(f"No queue of TASKS[{backend_name!r}] is left to serve.")
        if queues:
            known = worker_queues()
            unknown = [q for q in queues if known is not None and q not in known]
            if unknown:
                raise usage_error(
                    f"Unknown queue(s): {', '.join(unknown)}. Known queues: "
                    f"{', '.join(known or ())} (SQLQ['QUEUES'] and the QUEUES of "
                    "django_sqlq's tasks backends)."
                )
        self._configure_logging(verbosity)
        if reload:
            from django_sqlq import reloader

            if not reloader.in_child():
                sys.exit(reloader.run_parent(self.stdout))
        self._configure_task_logging(verbosity)
        self._serve_tasks()
        worker_kwargs: dict[str, Any] = {
            "queues": queues or None,
            "all_queues": all_queues,
            "exclude_queues": exclude_queues or (),
            "concurrency": concurrency,
            "poll_interval": poll_interval,
            "database": database,
            "worker_id": worker_id,
            "max_jobs": max_jobs,
            "on_ready": self._announce_ready,
        }
        if queue_limits:
            worker_kwargs["queue_limits"] = queue_limits
        if processes > 1:
            from django_sqlq.supervisor import Supervisor

            # Checked once here, before any child starts: a database that is missing or
            # unmigrated is one clear line, not N children crash-looping.
            try:
                Worker(**worker_kwargs)._check_ready()
                self._check_schedules()  # so is a bad recurring job
            except (WorkerError, ConfigurationError) as exc:
                raise CommandError(str(exc)) from exc
            finally:
                connections.close_all()

            sys.exit(
                Supervisor(processes=processes, worker_kwargs=worker_kwargs, burst=burst).run()
            )
        try:
            worker = Worker(**worker_kwargs)
        except ConfigurationError as exc:
            raise CommandError(str(exc)) from exc
        if self._early is not None:
            self._early.forward_to(worker.stop)  # until worker.run() installs its own
        try:
            if reload:
                from django_sqlq import reloader

                code = reloader.run_child(worker)
                sys.exit(1 if worker.forced else code)
            worker.run(burst=burst)
        except (WorkerError, ConfigurationError) as exc:  # a bad schedule: named at start
            raise CommandError(str(exc)) from exc
        if worker.forced:
            sys.exit(1)

    def _check_reload(self, *, burst: bool, processes: int) -> None:
        """--reload: one long-running worker, started from a command line."""
        for given, option in ((burst, "--burst"), (processes > 1, "--processes")):
            if given:
                raise usage_error(f"--reload cannot be combined with {option}.")
        if not getattr(self, "_called_from_command_line", False):
            raise usage_error(
                "--reload restarts the command line it was given: run `manage.py sqlq_worker "
                "--reload` in a shell, not call_command()."
            )

    def _check_schedules(self) -> None:
        from django_sqlq import registry, schedules

        registry.autodiscover()
        schedules.check_targets(schedules.load())

    def _serve_tasks(self) -> None:
        """With Django's tasks framework installed, run @task jobs too (the tasks backend
        also registers this when a backend is created; here it need not wait for that)."""
        from django_sqlq import compat, registry

        if compat.AVAILABLE:
            from django_sqlq.backend import resolve_task

            registry.add_resolver(resolve_task)

    def _announce_ready(self, worker: Worker) -> None:
        # Printed at every verbosity, and the only ready line (the Worker logs none when
        # given on_ready): scripts and process managers wait for this line.
        self.stdout.write(f"sqlq_worker {worker.worker_id} ready")
        self.stdout.flush()

    def _configure_task_logging(self, verbosity: int) -> None:
        """At -v 2/-v 3, the tasks framework's own lifecycle lines (``Task id=... path=...
        state=RUNNING/SUCCESSFUL/FAILED``), as db_worker prints them, so log-based monitoring
        survives the switch. Below that, the project's LOGGING decides."""
        from django_sqlq import compat

        if verbosity < 2 or not compat.AVAILABLE:
            return
        logger = logging.getLogger(compat.LOGGER_NAME)
        logger.setLevel(logging.INFO if verbosity == 2 else logging.DEBUG)
        _print_on(logger, self.stdout)

    def _configure_logging(self, verbosity: int) -> None:
        logger = logging.getLogger("django_sqlq")
        level, job_level = VERBOSITY_LEVELS[min(max(verbosity, 0), 3)]
        logger.setLevel(level)
        logging.getLogger("django_sqlq.worker.jobs").setLevel(job_level)
        _print_on(logger, self.stdout)
