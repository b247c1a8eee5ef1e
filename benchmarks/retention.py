"""What retention costs, and what it keeps: two experiments per engine.

    python benchmarks/retention.py pass [--dbs sqlite,pg] [--finished 1000000] [--window 15]
    python benchmarks/retention.py size [--dbs sqlite,pg] [--through 1000000] [--every 100000]
                                        [--pace JOBS_PER_SECOND]

Each runs against a new database (a SQLite file in WAL mode in a temporary directory;
PostgreSQL database ``bench_retention``, dropped and recreated), with the test suite's
settings (``tests.settings``: its no-op handler ``tests.noop``) and one real ``sqlq_worker``
process (``--concurrency 2``).

``pass``: the cost of one pruning pass over ``--finished`` completed rows that finished 40 days
ago, while a worker drains no-op jobs. The worker's own pruner is off (KEEP_FINISHED None); the
pass (``django_sqlq.retention.prune``, what the workers' pruner and ``sqlq_prune`` run) runs in
this process. Prints the drain rate over ``--window`` seconds before the pass, during it and
after it, the pass's duration and rows deleted a second.

``size``: ``--through`` no-op jobs through the worker, with its pruner on (KEEP_FINISHED 5 s,
PRUNE_INTERVAL 1 s); every ``--every`` jobs, the jobs table's size and its indexes' (PostgreSQL:
``pg_relation_size``, ``pg_indexes_size``, dead tuples; SQLite: the database's pages in use and
free, and the file's size with its WAL). Prints each sample and the last against the first.
Jobs are enqueued as fast as the worker drains them, or at ``--pace`` jobs a second.

Run with the virtualenv that runs the tests. The figures in docs/benchmarks.md came from here.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PG_DB = "bench_retention"
PG = {
    "host": os.environ.get("BENCH_PG_HOST", "127.0.0.1"),
    "port": os.environ.get("BENCH_PG_PORT", "5432"),
    "user": os.environ.get("BENCH_PG_USER", "root"),
}
DAY = 86400


def environment(db: str, tmp: str, **extra: str) -> dict[str, str]:
    env = {
        **os.environ,
        "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "SQLQ_TEST_ENGINE": "postgresql" if db == "pg" else "sqlite",
        "SQLQ_TEST_RUN_DIR": tmp,
        "SQLQ_TEST_PG_DB": PG_DB,
        **extra,
    }
    env.pop("SQLQ_TEST_USE_TEST_DB", None)
    return env


def recreate_pg() -> None:
    import psycopg

    with psycopg.connect(dbname="postgres", autocommit=True, **PG) as admin:  # type: ignore[arg-type]
        admin.execute(f'DROP DATABASE IF EXISTS "{PG_DB}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{PG_DB}"')


def drop_pg() -> None:
    import psycopg

    with psycopg.connect(dbname="postgres", autocommit=True, **PG) as admin:  # type: ignore[arg-type]
        admin.execute(f'DROP DATABASE IF EXISTS "{PG_DB}" WITH (FORCE)')


def setup_django() -> None:
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def start_worker(env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "django", "sqlq_worker", "--concurrency", "2", "-v", "0"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def stop_worker(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def pending() -> int:
    from django_sqlq.models import Job

    return Job.objects.pending().count()


def seed_finished(n: int) -> None:
    """``n`` completed rows that finished 40 days ago, written by the database itself."""
    from django.db import connection

    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                "INSERT INTO sqlq_job (uuid, queue, type, payload, status, priority, attempts, "
                "max_attempts, last_error, errors, completed_at, locked_by) "
                "SELECT gen_random_uuid(), 'default', 'bench.seed', '{}', 'completed', 0, 1, 5, "
                "'', '[]', now() - interval '40 days' + g * interval '1 ms', '' "
                "FROM generate_series(1, %s) AS g",
                [n],
            )
            cursor.execute("VACUUM ANALYZE sqlq_job")
        else:
            cursor.execute(
                "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < %s) "
                "INSERT INTO sqlq_job (uuid, queue, type, payload, status, priority, attempts, "
                "max_attempts, last_error, errors, completed_at, locked_by, scheduled_at, "
                "created_at, updated_at) "
                "SELECT lower(hex(randomblob(16))), 'default', 'bench.seed', '{}', 'completed', "
                "0, 1, 5, '', '[]', strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now', '-40 days'), '', "
                "strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now', '-40 days'), "
                "strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now', '-40 days'), "
                "strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now', '-40 days') FROM c",
                [n],
            )
            cursor.execute("ANALYZE")


def completed_between(since: Any, until: Any) -> int:
    from django_sqlq.models import Job

    return Job.objects.filter(completed_at__gte=since, completed_at__lt=until).count()


def feed(stop: threading.Event) -> None:
    """Keep 20,000 to 30,000 jobs waiting, so that the worker never runs dry."""
    from django.db import connections

    from django_sqlq import bulk_enqueue

    try:
        while not stop.is_set():
            if pending() < 20_000:
                bulk_enqueue("tests.noop", [{} for _ in range(10_000)])
            else:
                stop.wait(0.05)
    finally:
        connections.close_all()


def window(seconds: float) -> tuple[Any, Any]:
    from django.utils import timezone

    since = timezone.now()
    time.sleep(seconds)
    return since, timezone.now()


def rate(span: tuple[Any, Any]) -> float:
    return completed_between(*span) / (span[1] - span[0]).total_seconds()


def run_pass(finished: int, seconds: float) -> dict[str, Any]:
    from django.utils import timezone

    from django_sqlq import retention

    seed_finished(finished)
    env = json.loads(os.environ["BENCH_ENV"])
    stop = threading.Event()
    feeder = threading.Thread(target=feed, args=(stop,))
    feeder.start()
    worker = start_worker(env)
    try:
        time.sleep(3)  # the worker starts, connects and reaches its pace
        before = window(seconds)
        started = timezone.now()
        result = retention.prune("default", keep={"completed": DAY}, holder="bench")
        during = (started, timezone.now())
        after = window(seconds)
    finally:
        stop.set()
        feeder.join()
        stop_worker(worker)
    assert result.total == finished, result
    pass_s = (during[1] - during[0]).total_seconds()
    return {
        "finished": finished,
        "pass_s": pass_s,
        "deleted_per_s": finished / pass_s,
        "drain_before": rate(before),
        "drain_during": rate(during),
        "drain_after": rate(after),
        "free_pages": result.free_pages,
    }


def sizes() -> dict[str, Any]:
    from django.db import connection

    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                "SELECT pg_relation_size('sqlq_job'), pg_indexes_size('sqlq_job'), "
                "n_live_tup, n_dead_tup FROM pg_stat_user_tables WHERE relname = 'sqlq_job'"
            )
            table, indexes, live, dead = cursor.fetchone()
            cursor.execute(
                "SELECT indexrelid::regclass::text, pg_relation_size(indexrelid) "
                "FROM pg_index WHERE indrelid = 'sqlq_job'::regclass"
            )
            per_index = dict(cursor.fetchall())
            return {"table": table, "indexes": indexes, "live": live, "dead": dead,
                    "per_index": per_index}  # fmt: skip
        cursor.execute("PRAGMA page_size")
        page = cursor.fetchone()[0]
        cursor.execute("PRAGMA page_count")
        pages = cursor.fetchone()[0]
        cursor.execute("PRAGMA freelist_count")
        free = cursor.fetchone()[0]
        name = connection.settings_dict["NAME"]
        on_disk = sum(
            os.path.getsize(path) for path in (name, f"{name}-wal") if os.path.exists(path)
        )
        return {"used": (pages - free) * page, "free": free * page, "file": on_disk}


def run_size(through: int, every: int, pace: float) -> dict[str, Any]:
    from django_sqlq import bulk_enqueue
    from django_sqlq.models import Job

    env = json.loads(os.environ["BENCH_ENV"])
    worker = start_worker(env)
    samples: list[dict[str, Any]] = []
    enqueued = 0
    started = time.monotonic()
    try:
        next_sample = every
        while True:
            waiting = Job.objects.filter(status__in=("pending", "processing")).count()
            done = enqueued - waiting
            if done >= next_sample:
                samples.append({"through": done, "s": time.monotonic() - started, **sizes()})
                print(json.dumps(samples[-1]), file=sys.stderr, flush=True)
                next_sample += every
            if done >= through:
                break
            paced = pace <= 0 or enqueued < pace * (time.monotonic() - started)
            if waiting < 5_000 and enqueued < through and paced:
                batch = min(10_000 if pace <= 0 else max(1, int(pace / 5)), through - enqueued)
                bulk_enqueue("tests.noop", [{} for _ in range(batch)])
                enqueued += batch
            time.sleep(0.2)
    finally:
        stop_worker(worker)
    return {"through": through, "samples": samples}


def one(kind: str, args: argparse.Namespace) -> Any:
    setup_django()
    if kind == "pass":
        return run_pass(args.finished, args.window)
    return run_size(args.through, args.every, args.pace)


def report_pass(db: str, r: dict[str, Any]) -> None:
    before = r["drain_before"]
    print(
        f"{db:7} {r['finished']:>9} rows: pass {r['pass_s']:.1f} s "
        f"({r['deleted_per_s']:.0f} rows/s); drain jobs/s before {before:.0f}, "
        f"during {r['drain_during']:.0f} ({r['drain_during'] / before:.2f}x), "
        f"after {r['drain_after']:.0f} ({r['drain_after'] / before:.2f}x)"
    )


def report_size(db: str, r: dict[str, Any]) -> None:
    samples = r["samples"]
    keys = ("table", "indexes") if db == "pg" else ("used", "file")
    for s in samples:
        extra = f" dead {s['dead']}" if db == "pg" else f" free {s['free'] / 1e6:.2f} MB"
        sizes = " ".join(f"{k} {s[k] / 1e6:.2f} MB" for k in keys)
        print(f"{db:7} {s['through']:>9} through ({s['s']:.0f} s): {sizes}{extra}")
        if db == "pg":
            per_index = ", ".join(f"{k} {v / 1e3:.0f} kB" for k, v in s["per_index"].items())
            print(f"        {per_index}")
    first, last = samples[0], samples[-1]
    ratios = ", ".join(f"{k} {last[k] / max(first[k], 1):.2f}x" for k in keys)
    print(f"{db:7} last/first: {ratios}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("kind", choices=("pass", "size"))
    parser.add_argument("--dbs", default="sqlite,pg")
    parser.add_argument("--finished", type=int, default=1_000_000)
    parser.add_argument("--window", type=float, default=15.0)
    parser.add_argument("--through", type=int, default=1_000_000)
    parser.add_argument("--every", type=int, default=100_000)
    parser.add_argument("--pace", type=float, default=0.0)
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:  # a child process: one engine, its settings from the environment
        print(repr(one(args.kind, args)))
        return
    import ast

    print(f"retention benchmark: {args.kind}")
    for db in args.dbs.split(","):
        with tempfile.TemporaryDirectory() as tmp:
            if db == "pg":
                recreate_pg()
            pruning = (
                {"SQLQ_TEST_KEEP_FINISHED": "null"}
                if args.kind == "pass"
                else {"SQLQ_TEST_KEEP_FINISHED": "5", "SQLQ_TEST_PRUNE_INTERVAL": "1"}
            )
            env = environment(db, tmp, **pruning)
            # This process: the settings the worker has, but it never prunes on its own.
            env["BENCH_ENV"] = json.dumps(env)
            child = [sys.executable, __file__, args.kind, "--one", db]
            child += ["--finished", str(args.finished), "--window", str(args.window)]
            child += ["--through", str(args.through), "--every", str(args.every)]
            child += ["--pace", str(args.pace)]
            out = subprocess.run(
                child, env=env, stdout=subprocess.PIPE, text=True, check=True
            ).stdout
            result = ast.literal_eval(out.strip().splitlines()[-1])
            if db == "pg":
                drop_pg()
        (report_pass if args.kind == "pass" else report_size)(db, result)


if __name__ == "__main__":
    main()
