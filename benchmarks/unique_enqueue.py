"""What ``unique_key`` costs enqueue: one process, one run, both shapes interleaved.

    python benchmarks/unique_enqueue.py [--dbs sqlite,pg] [--n 5000] [--rounds 5]

For each engine, a new database (a SQLite file in WAL mode; PostgreSQL database
``bench_unique_enqueue``, dropped and recreated) is migrated, then ``enqueue()`` runs in
autocommit, in ``--rounds`` alternating rounds of ``--n`` calls each:

- ``plain``: no key (the INSERT every enqueue makes);
- ``unique, new key``: a fresh ``unique_key`` each call (INSERT ... ON CONFLICT DO NOTHING,
  which writes the row);
- ``unique, duplicate``: the key of a job that is pending (the INSERT writes nothing, then a
  SELECT reads the job that holds the key).

It prints enqueues per second for each (the median of the rounds) and each one's ratio to
``plain``. Run with the virtualenv that runs the tests; no worker runs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PG_DB = "bench_unique_enqueue"
PG = {
    "host": os.environ.get("BENCH_PG_HOST", "127.0.0.1"),
    "port": os.environ.get("BENCH_PG_PORT", "5432"),
    "user": os.environ.get("BENCH_PG_USER", "root"),
}


def configure(db: str, tmp: str) -> None:
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
    settings.configure(
        DATABASES={"default": database},
        INSTALLED_APPS=["django.contrib.contenttypes", "django_sqlq"],
        USE_TZ=True,
        DEFAULT_AUTO_FIELD="django.db.models.BigAutoField",
        SQLQ={"QUEUES": ["default"]},
    )
    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def rate(call: Callable[[int], object], n: int, offset: int) -> float:
    started = time.perf_counter()
    for i in range(offset, offset + n):
        call(i)
    return n / (time.perf_counter() - started)


def one(db: str, n: int, rounds: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        configure(db, tmp)
        from django_sqlq import enqueue

        held = enqueue("bench.noop", {}, unique_key="held")
        assert held.created
        shapes: dict[str, Callable[[int], object]] = {
            "plain": lambda i: enqueue("bench.noop", {"i": i}),
            "unique, new key": lambda i: enqueue("bench.noop", {"i": i}, unique_key=f"k{i}"),
            "unique, duplicate": lambda i: enqueue("bench.noop", {"i": i}, unique_key="held"),
        }
        for call in shapes.values():  # warm up: statement caches, the first page writes
            for i in range(200):
                call(10_000_000 + i)
        rates: dict[str, list[float]] = {name: [] for name in shapes}
        for r in range(rounds):
            for name, call in shapes.items():
                rates[name].append(rate(call, n, offset=r * n))
        if db == "pg":
            from django.db import connections

            connections.close_all()
            import psycopg

            with psycopg.connect(dbname="postgres", autocommit=True, **PG) as admin:  # type: ignore[arg-type]
                admin.execute(f'DROP DATABASE IF EXISTS "{PG_DB}" WITH (FORCE)')
    return {name: statistics.median(values) for name, values in rates.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dbs", default="sqlite,pg")
    parser.add_argument("--n", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:  # a child process: one engine (Django is set up once per process)
        print(repr(one(args.one, args.n, args.rounds)))
        return
    import ast
    import subprocess

    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    print(f"enqueue() with and without unique_key: {args.n} calls x {args.rounds} rounds, "
          "autocommit, median round")  # fmt: skip
    print(f"{'engine':8} {'shape':20} {'enqueues/s':>11} {'vs plain':>9}")
    for db in args.dbs.split(","):
        out = subprocess.run(
            [sys.executable, __file__, "--one", db, "--n", str(args.n), "--rounds",
             str(args.rounds)],
            env=env, capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        results: dict[str, float] = ast.literal_eval(out.strip().splitlines()[-1])
        plain = results["plain"]
        for name, value in results.items():
            print(f"{db:8} {name:20} {value:11.0f} {value / plain:9.2f}")


if __name__ == "__main__":
    main()
