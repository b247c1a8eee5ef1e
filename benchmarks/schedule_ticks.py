"""What a recurring job's tick costs the worker: one process, an injected clock.

    python benchmarks/schedule_ticks.py [--dbs sqlite,pg] [--schedules 50] [--seconds 40]

For each engine, a new database (a SQLite file in WAL mode; PostgreSQL database
``bench_schedule_ticks``, dropped and recreated) is migrated, with ``--schedules`` schedules
that all tick every second (``* * * * * *``). Two schedulers (two workers' scheduler
services, driven in this thread) step an injected clock one second at a time for
``--seconds`` seconds:

- ``winning pass``: the first scheduler's pass, which enqueues every schedule's tick (a
  tick row and a job each, one transaction per tick; the trim of old rows);
- ``losing pass``: the second scheduler's pass for the same second, which finds every tick
  taken (one query for the newest ticks, then nothing);
- ``idle pass``: a pass with nothing due.

It prints milliseconds per pass and per tick, and the tick table's row count at the end
(the trim keeps KEEP_TICKS per schedule). Run with the virtualenv that runs the tests.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PG_DB = "bench_schedule_ticks"
PG = {
    "host": os.environ.get("BENCH_PG_HOST", "127.0.0.1"),
    "port": os.environ.get("BENCH_PG_PORT", "5432"),
    "user": os.environ.get("BENCH_PG_USER", "root"),
}


def configure(db: str, tmp: str, count: int) -> None:
    import django
    from django.conf import settings

    if db == "pg":
        import psycopg

        with psycopg.connect(dbname="postgres", autocommit=True, **PG) as admin:  # type: ignore[arg-type]
            admin.execute(f'DROP DATABASE IF EXISTS "{PG_DB}" WITH (FORCE)')
            admin.execute(f'CREATE DATABASE "{PG_DB}"')
        database = {"ENGINE": "django.db.backends.postgresql", "NAME": PG_DB, **PG}
    else:
        database = {"ENGINE": "django.db.backends.sqlite3", "NAME": os.path.join(tmp, "q.db")}
    schedule = {f"s{i}": {"type": "bench.noop", "cron": "* * * * * *"} for i in range(count)}
    settings.configure(
        DATABASES={"default": database},
        INSTALLED_APPS=["django.contrib.contenttypes", "django_sqlq"],
        USE_TZ=True,
        DEFAULT_AUTO_FIELD="django.db.models.BigAutoField",
        SQLQ={"QUEUES": ["default"], "SCHEDULE": schedule},
    )
    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def one(db: str, count: int, seconds: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        configure(db, tmp, count)
        from django_sqlq import registry
        from django_sqlq.models import ScheduleTick
        from django_sqlq.worker import Worker

        registry.register(lambda _payload: None, "bench.noop")
        now = [datetime(2026, 1, 10, tzinfo=UTC)]
        first, second = Worker(clock=lambda: now[0]), Worker(clock=lambda: now[0])
        for worker in (first, second):
            worker.scheduler.prepare()
            worker.scheduler.enqueue_due()  # watching from here
        timings: dict[str, list[float]] = {"winning": [], "losing": [], "idle": []}
        for _ in range(seconds):
            now[0] += timedelta(seconds=1)
            for name, worker in (("winning", first), ("losing", second), ("idle", first)):
                started = time.perf_counter()
                won = worker.scheduler.enqueue_due()
                timings[name].append(time.perf_counter() - started)
                assert len(won) == (count if name == "winning" else 0)
        rows = ScheduleTick.objects.count()
        if db == "pg":
            from django.db import connections

            connections.close_all()
            import psycopg

            with psycopg.connect(dbname="postgres", autocommit=True, **PG) as admin:  # type: ignore[arg-type]
                admin.execute(f'DROP DATABASE IF EXISTS "{PG_DB}" WITH (FORCE)')
    result = {name: statistics.median(values) * 1000 for name, values in timings.items()}
    result["rows"] = rows
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dbs", default="sqlite,pg")
    parser.add_argument("--schedules", type=int, default=50)
    parser.add_argument("--seconds", type=int, default=40)
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:  # a child process: one engine (Django is set up once per process)
        print(repr(one(args.one, args.schedules, args.seconds)))
        return
    import ast
    import subprocess

    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    print(f"{args.schedules} schedules ticking every second, {args.seconds} s of injected "
          "time, median pass")  # fmt: skip
    print(f"{'engine':8} {'winning pass ms':>16} {'ms/tick':>8} {'losing pass ms':>15} "
          f"{'idle pass ms':>13} {'tick rows':>10}")  # fmt: skip
    for db in args.dbs.split(","):
        out = subprocess.run(
            [sys.executable, __file__, "--one", db, "--schedules", str(args.schedules),
             "--seconds", str(args.seconds)],
            env=env, capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        r: dict[str, float] = ast.literal_eval(out.strip().splitlines()[-1])
        print(f"{db:8} {r['winning']:16.1f} {r['winning'] / args.schedules:8.2f} "
              f"{r['losing']:15.1f} {r['idle']:13.1f} {int(r['rows']):10d}")  # fmt: skip


if __name__ == "__main__":
    main()
