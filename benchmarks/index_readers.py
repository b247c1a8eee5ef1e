"""Every reader of the jobs table's indexes, EXPLAINed on a table shaped like production.

    python benchmarks/index_readers.py --tree . [--dbs pg,sqlite] [--finished 1000000]
        [--pending 100000] [--queues 20]

A fresh database (``index_readers`` on PostgreSQL, a file under ``BENCH_TMP``) gets
``--finished`` completed jobs over the last 7 days (1 % of them failed, all in ``--queues``
queues, one in ten with a unique key), ``--pending`` runnable ones, 10,000 scheduled a day
ahead and 1,000 processing, filled with one set-based INSERT each, then ``ANALYZE``. Each
reader (the claim, the reaper, promotion, the pruner, the dashboard, the metrics, unique
keys, the tasks backend, chains) runs once inside a transaction that is rolled back, its
statements are recorded with their parameters, and each is EXPLAINed as sent (the plan's
first lines are printed, with the index it reads and whether it sorts or scans the table).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from drain_cost import configure, fresh_db  # noqa: E402

PG_FILL = """
INSERT INTO sqlq_job (uuid, queue, type, payload, status, priority, attempts, max_attempts,
  last_error, errors, scheduled_at, created_at, updated_at, started_at, completed_at,
  locked_by, unique_key)
SELECT gen_random_uuid(), 'q' || lpad((g %% %(queues)s)::text, 2, '0'), 'noop', '{}',
  CASE WHEN g %% 100 = 0 THEN 'failed' ELSE 'completed' END, 0, 1, 5, '', '[]',
  now() - (g * interval '7 days' / %(n)s), now() - (g * interval '7 days' / %(n)s),
  now(), now() - (g * interval '7 days' / %(n)s), now() - (g * interval '7 days' / %(n)s),
  'w', CASE WHEN g %% 10 = 0 THEN 'k' || g ELSE NULL END
FROM generate_series(1, %(n)s) g
"""
PG_WAITING = """
INSERT INTO sqlq_job (uuid, queue, type, payload, status, priority, attempts, max_attempts,
  last_error, errors, scheduled_at, created_at, updated_at, locked_by, lease_expires_at)
SELECT gen_random_uuid(), 'q' || lpad((g %% %(queues)s)::text, 2, '0'), 'noop', '{}',
  %(status)s, 0, 0, 5, '', '[]', now() + %(ahead)s * interval '1 second', now(), now(),
  CASE WHEN %(status)s = 'processing' THEN 'w' ELSE '' END,
  CASE WHEN %(status)s = 'processing' THEN now() + interval '60 seconds' END
FROM generate_series(1, %(n)s) g
"""
SQLITE_SERIES = "WITH RECURSIVE g(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM g WHERE x < {n}) "
SQLITE_FILL = (
    "INSERT INTO sqlq_job (uuid, queue, type, payload, status, priority, attempts, "
    "max_attempts, last_error, errors, scheduled_at, created_at, updated_at, started_at, "
    "completed_at, locked_by, unique_key) "
    + SQLITE_SERIES
    + "SELECT lower(hex(randomblob(16))), printf('q%02d', x % {queues}), 'noop', '{{}}', "
    "CASE WHEN x % 100 = 0 THEN 'failed' ELSE 'completed' END, 0, 1, 5, '', '[]', "
    "datetime('now', printf('-%d seconds', x * 604800 / {n})), "
    "datetime('now', printf('-%d seconds', x * 604800 / {n})), datetime('now'), "
    "datetime('now', printf('-%d seconds', x * 604800 / {n})), "
    "datetime('now', printf('-%d seconds', x * 604800 / {n})), 'w', "
    "CASE WHEN x % 10 = 0 THEN 'k' || x ELSE NULL END FROM g"
)
SQLITE_WAITING = (
    "INSERT INTO sqlq_job (uuid, queue, type, payload, status, priority, attempts, "
    "max_attempts, last_error, errors, scheduled_at, created_at, updated_at, locked_by, "
    "lease_expires_at) "
    + SQLITE_SERIES
    + "SELECT lower(hex(randomblob(16))), printf('q%02d', x % {queues}), 'noop', '{{}}', "
    "'{status}', 0, 0, 5, '', '[]', datetime('now', '{ahead:+d} seconds'), datetime('now'), "
    "datetime('now'), CASE WHEN '{status}' = 'processing' THEN 'w' ELSE '' END, "
    "CASE WHEN '{status}' = 'processing' THEN datetime('now', '+60 seconds') END FROM g"
)


def fill(args: argparse.Namespace) -> None:
    from django.core.management import call_command
    from django.db import connection

    call_command("migrate", verbosity=0, interactive=False)
    shapes = [("pending", args.pending, -1), ("scheduled", 10000, 86400), ("processing", 1000, 0)]
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(PG_FILL, {"n": args.finished, "queues": args.queues})
            for status, n, ahead in shapes:
                params = {"n": n, "queues": args.queues, "status": status, "ahead": ahead}
                cursor.execute(PG_WAITING, params)
            cursor.execute("VACUUM ANALYZE sqlq_job")
        else:
            cursor.execute(SQLITE_FILL.format(n=args.finished, queues=args.queues))
            for status, n, ahead in shapes:
                sql = SQLITE_WAITING.format(n=n, queues=args.queues, status=status, ahead=ahead)
                cursor.execute(sql)
            cursor.execute("ANALYZE")


def readers() -> list[tuple[str, Any]]:
    """(name, a callable that runs the reader once)."""
    from django.db import DEFAULT_DB_ALIAS
    from django.utils import timezone

    from django_sqlq import dashboard
    from django_sqlq.db import ops_for
    from django_sqlq.models import Chain, Job

    alias = DEFAULT_DB_ALIAS
    ops = ops_for(alias)
    some = Job.objects.order_by("id").values_list("uuid", flat=True).first()

    def claim() -> Any:
        return ops.claim(queues=["q07"], worker_id="w2", limit=100, lease_seconds=60)

    def claim_all() -> Any:
        return ops.claim(queues=None, worker_id="w2", limit=100, lease_seconds=60)

    return [
        ("claim, one queue", claim),
        ("claim, every queue (pending_queues + LATERAL/UNION)", claim_all),
        ("reaper", ops.reap),
        ("promote due scheduled jobs", ops.promote),
        ("next_due_in", ops.next_due_in),
        ("cancel_requests", lambda: ops.cancel_requests(worker_id="w")),
        ("running_counts (queue limits)", lambda: ops.running_counts(["q01", "q02"])),
        (
            "prune completed (keep 1 day)",
            lambda: ops.prune(status="completed", keep_seconds=86400),
        ),
        ("prunable failed", lambda: ops.prunable(status="failed", keep_seconds=86400)),
        ("dashboard throughput (last hour, per minute)", lambda: dashboard.throughput(alias)),
        (
            "dashboard snapshot (queues, workers, expired, newest failure)",
            lambda: dashboard.snapshot(alias),
        ),
        ("dashboard running jobs", lambda: dashboard.running_jobs(alias)),
        ("failed jobs admin list", lambda: list(Job.objects.failed().order_by("-id")[:100])),
        ("unique key holder", lambda: list(Job.objects.raw(*ops.holder_sql("k500")))),
        (
            "unique_for insert (recently finished)",
            lambda: ops.insert_unique(
                payload="{}", fields=_fields(), delay_seconds=None, unique_for=3600
            ),
        ),
        ("tasks backend get_result (by uuid)", lambda: Job.objects.get(uuid=some)),
        ("chain steps", lambda: list(Chain(1).jobs())),
        ("metrics scrape (queue rows)", lambda: dashboard.queue_rows(alias, timezone.now())),
    ]


def _fields() -> dict[str, Any]:
    return {
        "queue": "q01", "type": "noop", "priority": 0, "max_attempts": 5, "timeout": None,
        "unique_key": "k500",
    }  # fmt: skip


def explain(sql: str, params: Any) -> list[str]:
    from django.db import connection

    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("EXPLAIN " + sql, params)
            return [row[0] for row in cursor.fetchall()]
        cursor.execute("EXPLAIN QUERY PLAN " + sql, params)
        return [row[-1] for row in cursor.fetchall()]


def run_readers() -> None:
    from django.db import connection, transaction

    for name, reader in readers():
        recorded: list[tuple[str, Any]] = []

        def record(
            execute: Any, sql: str, params: Any, many: bool, context: Any, recorded: Any = recorded
        ) -> Any:
            recorded.append((sql, params))
            return execute(sql, params, many, context)

        try:
            with transaction.atomic():
                with connection.execute_wrapper(record):
                    reader()
                plans = [
                    (sql, explain(sql, params))
                    for sql, params in recorded
                    if sql.lstrip().split()[0].upper()
                    in ("SELECT", "UPDATE", "DELETE", "WITH", "INSERT")
                ]
                transaction.set_rollback(True)
        except Exception as exc:  # report and go on
            print(f"\n### {name}: {type(exc).__name__}: {exc}")
            continue
        print(f"\n### {name}")
        for sql, plan in plans:
            print(f"    {' '.join(sql.split())[:150]}")
            for line in plan[:12]:
                print(f"      {line}")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "_child":
        db, name, what = sys.argv[2:5]
        configure(db, name)
        if what == "fill":
            ns = argparse.Namespace(
                finished=int(sys.argv[5]), pending=int(sys.argv[6]), queues=int(sys.argv[7])
            )
            fill(ns)
        else:
            run_readers()
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", required=True)
    parser.add_argument("--dbs", default="pg,sqlite")
    parser.add_argument("--finished", type=int, default=1_000_000)
    parser.add_argument("--pending", type=int, default=100_000)
    parser.add_argument("--queues", type=int, default=20)
    args = parser.parse_args()
    tree = str(Path(args.tree).resolve())
    env = dict(os.environ, PYTHONPATH=f"{tree}:{HERE}")
    for db in args.dbs.split(","):
        name = fresh_db(db, 99)
        print(
            f"\n## {db}: {args.finished:,} finished, {args.pending:,} pending, "
            f"{args.queues} queues ({tree})",
            flush=True,
        )
        base = [sys.executable, __file__, "_child", db, name]
        subprocess.run(
            [*base, "fill", str(args.finished), str(args.pending), str(args.queues)],
            env=env,
            check=True,
        )
        subprocess.run([*base, "readers"], env=env, check=True)


if __name__ == "__main__":
    main()
