"""A plain drain as a user runs it, and where its time goes on the database server.

    python benchmarks/drain_cost.py drain --tree A --tree B [--dbs pg,sqlite] [--n 20000]
        [--rounds 3] [--floor]
    python benchmarks/drain_cost.py cost --tree A [--tree B] [--n 20000]

A tree is a directory holding ``django_sqlq/`` (``git worktree add --detach /tmp/t <rev>``
or a ``git archive``); each run imports django_sqlq from it (``PYTHONPATH``) with the
benchmark's ``benchsite`` app and its ``noop`` handler, ``SQLQ = {"QUEUES": ["default"]}``.
Each run gets a fresh database of its own (``cost_<n>`` on PostgreSQL, a file under
``BENCH_TMP``), fills it with ``--n`` no-op jobs through ``enqueue()``, one call at a time in
one transaction (after ``--finished`` completed jobs of the last week, written in one
set-based INSERT: a table shaped like production), runs ``VACUUM ANALYZE`` and
``CHECKPOINT`` (PostgreSQL), then:

``drain``: one ``manage.py sqlq_worker --burst`` process at its defaults; the rate runs from
the first job's ``started_at`` to the last job's ``completed_at`` (the database's own
stamps). Trees alternate round by round; ``--floor`` adds the b100 floor
(``peer_cli.py baseline-b100 <db> drain``) to each round, for the ratio.

``cost`` (PostgreSQL): the same drain with the worker run in-process, every statement it
sends counted by kind (a wrapper on Django's cursor, every thread), and every statement on
its connections explained by ``auto_explain`` (loaded per session, plans sent to the client
as NOTICEs, so the server's log and configuration are untouched): shared buffers hit, read
and dirtied, WAL records, full-page images and bytes, per kind. Beside them, from the
database's statistics: tuples inserted, updated and HOT-updated, buffers touched per index
(``pg_statio_user_indexes``), each index's size, and the cluster's WAL position before and
after (``pg_current_wal_lsn()``: the whole server's WAL, so on a shared server others'
writes count too; the per-statement sum is this drain's alone).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TMP = Path(os.environ.get("BENCH_TMP", "/tmp/django_sqlq_bench")) / "drain_cost"
PG = {"host": "127.0.0.1", "port": "5432", "user": "root"}


# -- in the child: Django of one tree ---------------------------------------------------


def configure(db: str, name: str) -> None:
    from django.conf import settings

    if db == "pg":
        database = {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": name,
            "USER": PG["user"],
            "HOST": PG["host"],
            "PORT": PG["port"],
            "CONN_MAX_AGE": 60,
        }
    else:  # as benchmarks/benchsite/settings.py
        database = {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": name,
            "CONN_MAX_AGE": 60,
            "OPTIONS": {
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL",
                "transaction_mode": "IMMEDIATE",
                "timeout": 20,
            },
        }
    settings.configure(
        SECRET_KEY="bench-not-secret",
        USE_TZ=True,
        DEFAULT_AUTO_FIELD="django.db.models.BigAutoField",
        INSTALLED_APPS=["benchsite", "django_sqlq"],
        DATABASES={"default": database},
        SQLQ={"QUEUES": ["default"]},
    )
    import django

    django.setup()


#: ``--finished``: completed jobs of the last week, written before the drain's jobs (one
#: set-based INSERT, each row a uuid from the tree's own SQL when its table has one).
PG_FINISHED = """
INSERT INTO sqlq_job ({uuid_column}queue, type, payload, status, priority, attempts,
  max_attempts, last_error, errors, scheduled_at, created_at, updated_at, started_at,
  completed_at, locked_by)
SELECT {uuid_value}'default', 'noop', '{{}}', 'completed', 0, 1, 5, '', '[]',
  now() - (g * interval '7 days' / {n}), now() - (g * interval '7 days' / {n}), now(),
  now() - (g * interval '7 days' / {n}), now() - (g * interval '7 days' / {n}), 'w'
FROM generate_series({n}, 1, -1) g
"""


def child_fill(n: int, finished: int = 0) -> None:
    from django.core.management import call_command
    from django.db import connection, transaction

    from django_sqlq import enqueue
    from django_sqlq.db import ops_for

    call_command("migrate", verbosity=0, interactive=False)
    if finished:
        ops = ops_for("default")
        uuid_sql = getattr(ops, "uuid_sql", None)
        sql = PG_FINISHED.format(
            n=finished,
            uuid_column="uuid, " if uuid_sql else "",
            uuid_value=f"{uuid_sql()}, " if uuid_sql else "",
        )
        with connection.cursor() as cursor:
            cursor.execute(sql.replace("%", "%%"), {})
    started = time.perf_counter()
    with transaction.atomic():
        for i in range(n):
            enqueue("noop", {"i": i})
    enqueue_rate = n / (time.perf_counter() - started)
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("VACUUM ANALYZE sqlq_job")
            cursor.execute("CHECKPOINT")
    print(json.dumps({"enqueue_rate": enqueue_rate}))


def kind_of(sql: str) -> str:
    """A statement's kind: the claim, the completion, or its first words."""
    text = " ".join(sql.split())
    if text.startswith("UPDATE sqlq_job SET status = 'processing'"):
        return "claim"
    if text.startswith("UPDATE sqlq_job SET status = CASE WHEN sqlq_job.cancel_requested_at"):
        return "completion"
    if text.startswith("UPDATE sqlq_job SET status = 'completed'") or (
        text.startswith("UPDATE sqlq_job SET status")
        and "completed_at" in text[:200]
        and "FROM" in text
    ):
        return "completion"
    words = text.split(" ")
    return " ".join(words[:6])[:70]


def child_counted() -> None:
    """Run the worker in this process; print statements by kind and auto_explain's sums."""
    import io

    from django.core.management import call_command
    from django.db.backends import utils
    from django.db.backends.signals import connection_created

    counts: dict[str, int] = defaultdict(int)
    seconds: dict[str, float] = defaultdict(float)
    plans: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    lock = threading.Lock()
    execute, executemany = utils.CursorWrapper.execute, utils.CursorWrapper.executemany

    def counted_execute(self: Any, sql: str, params: Any = None) -> Any:
        kind = kind_of(sql)
        started = time.perf_counter()
        try:
            return execute(self, sql, params)
        finally:
            with lock:
                counts[kind] += 1
                seconds[kind] += time.perf_counter() - started

    def counted_executemany(self: Any, sql: str, param_list: Any) -> Any:
        with lock:
            counts["(many) " + kind_of(sql)] += 1
        return executemany(self, sql, param_list)

    utils.CursorWrapper.execute = counted_execute  # type: ignore[method-assign]
    utils.CursorWrapper.executemany = counted_executemany  # type: ignore[method-assign]

    keys = (
        "Shared Hit Blocks",
        "Shared Read Blocks",
        "Shared Dirtied Blocks",
        "Shared Written Blocks",
        "WAL Records",
        "WAL FPI",
        "WAL Bytes",
    )

    def on_notice(diag: Any) -> None:
        message = diag.message_primary or ""
        if "plan:" not in message:
            return
        plan = json.loads(message.split("plan:", 1)[1])
        node = plan["Plan"]
        kind = kind_of(plan.get("Query Text", ""))
        with lock:
            plans[kind]["statements"] += 1
            for key in keys:
                plans[kind][key] += float(node.get(key, 0))

    def explain(sender: Any, connection: Any, **kwargs: Any) -> None:  # noqa: ARG001
        if connection.vendor != "postgresql":
            return
        raw = connection.connection
        for statement in (
            "LOAD 'auto_explain'",
            "SET auto_explain.log_min_duration = 0",
            "SET auto_explain.log_analyze = on",
            "SET auto_explain.log_buffers = on",
            "SET auto_explain.log_wal = on",
            "SET auto_explain.log_timing = off",
            "SET auto_explain.log_format = json",
            "SET auto_explain.log_level = notice",
            "SET client_min_messages = notice",
        ):
            raw.execute(statement)
        raw.add_notice_handler(on_notice)

    connection_created.connect(explain)
    call_command("sqlq_worker", "--burst", stdout=io.StringIO(), stderr=io.StringIO())
    print(
        json.dumps(
            {
                "counts": dict(counts),
                "seconds": dict(seconds),
                "plans": {k: dict(v) for k, v in plans.items()},
            }
        )
    )


def child_worker() -> None:
    from django.core.management import execute_from_command_line

    execute_from_command_line(["manage.py", "sqlq_worker", "--burst"])


# -- in the parent ----------------------------------------------------------------------


def run_child(tree: str, db: str, name: str, *args: str, capture: bool = True) -> str:
    env = dict(os.environ, PYTHONPATH=f"{tree}:{HERE}")
    proc = subprocess.run(
        [sys.executable, __file__, "_child", db, name, *args],
        env=env,
        check=True,
        text=True,
        stdout=subprocess.PIPE if capture else subprocess.DEVNULL,
    )
    return proc.stdout if capture else ""


def pg_connect(name: str = "postgres") -> Any:
    import psycopg

    return psycopg.connect(dbname=name, autocommit=True, **PG)


def fresh_db(db: str, slot: int) -> str:
    if db == "pg":
        name = f"cost_{slot}"
        with pg_connect() as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            conn.execute(f"CREATE DATABASE {name}")
        return name
    TMP.mkdir(parents=True, exist_ok=True)
    path = TMP / f"cost_{slot}.sqlite3"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    return str(path)


def drain_rate(db: str, name: str, n: int) -> float:
    sql = (
        "SELECT COUNT(*), MIN(started_at), MAX(completed_at) FROM sqlq_job "
        "WHERE status = 'completed'"
    )
    if db == "pg":
        with pg_connect(name) as conn:
            done, first, last = conn.execute(sql).fetchone()
            seconds = (last - first).total_seconds()
    else:
        import sqlite3
        from datetime import datetime

        with sqlite3.connect(name) as conn:
            done, first, last = conn.execute(sql).fetchone()
        seconds = (datetime.fromisoformat(last) - datetime.fromisoformat(first)).total_seconds()
    assert done == n, f"{done} of {n} jobs completed"
    return n / seconds


def floor_rate(db: str, n: int) -> float:
    for op in ("setup", "drain"):
        out = subprocess.run(
            [sys.executable, str(HERE / "peer_cli.py"), "baseline-b100", db, op, "--n", str(n)],
            check=True,
            text=True,
            stdout=subprocess.PIPE,
            cwd=HERE,
        ).stdout
    result = json.loads(out.strip().splitlines()[-1])
    return float(result.get("drain_rate_db") or result["drain_rate"])


def cmd_drain(args: argparse.Namespace) -> None:
    rates: dict[tuple[str, str], list[float]] = defaultdict(list)
    for round_ in range(args.rounds):
        for db in args.dbs.split(","):
            trees = args.tree if round_ % 2 == 0 else list(reversed(args.tree))
            for tree in trees:
                name = fresh_db(db, args.tree.index(tree))
                out = run_child(tree, db, name, "fill", str(args.n), str(args.finished))
                enqueued = json.loads(out.strip().splitlines()[-1])["enqueue_rate"]
                run_child(tree, db, name, "worker", capture=False)
                rate = drain_rate(db, name, args.n)
                rates[(db, tree)].append(rate)
                rates[(db, f"{tree} (enqueue() in one transaction)")].append(enqueued)
                print(
                    f"round {round_ + 1} {db} {tree}: drain {rate:,.0f} jobs/s "
                    f"(enqueue {enqueued:,.0f}/s)",
                    flush=True,
                )
            if args.floor:
                rate = floor_rate(db, args.n)
                rates[(db, "floor b100")].append(rate)
                print(f"round {round_ + 1} {db} floor b100: {rate:,.0f} jobs/s", flush=True)
    print("\n| db | tree | jobs/s, each round | median |\n|---|---|---|---|")
    for (db, tree), values in rates.items():
        cells = ", ".join(f"{value:,.0f}" for value in values)
        print(f"| {db} | {tree} | {cells} | {statistics.median(values):,.0f} |")


def pg_snapshot(name: str) -> dict[str, Any]:
    with pg_connect(name) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        lsn = conn.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()[0]
        table = conn.execute(
            "SELECT n_tup_ins, n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables "
            "WHERE relname = 'sqlq_job'"
        ).fetchone()
        heap = conn.execute(
            "SELECT heap_blks_hit + heap_blks_read FROM pg_statio_user_tables "
            "WHERE relname = 'sqlq_job'"
        ).fetchone()[0]
        indexes = {
            row[0]: {"buffers": row[1], "size": row[2]}
            for row in conn.execute(
                "SELECT indexrelname, idx_blks_hit + idx_blks_read, "
                "pg_relation_size(indexrelid) FROM pg_statio_user_indexes "
                "WHERE relname = 'sqlq_job' ORDER BY indexrelname"
            )
        }
        commits = conn.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()[0]
    return {
        "lsn": int(lsn),
        "ins": table[0],
        "upd": table[1],
        "hot": table[2],
        "heap": heap,
        "indexes": indexes,
        "commits": commits,
    }


def cmd_cost(args: argparse.Namespace) -> None:
    n = args.n
    for slot, tree in enumerate(args.tree):
        name = fresh_db("pg", slot)
        run_child(tree, "pg", name, "fill", str(n), str(args.finished))
        time.sleep(1)
        before = pg_snapshot(name)
        result = json.loads(run_child(tree, "pg", name, "counted").strip().splitlines()[-1])
        time.sleep(1)
        after = pg_snapshot(name)
        print(
            f"\n## {tree}: {n:,} jobs beside {args.finished:,} finished ones, drained by one "
            "in-process worker\n"
        )
        print("statements by kind (client side), and auto_explain's sums per job:\n")
        print(
            "| kind | statements | per job | µs / job (wall, client side) "
            "| buffers hit+read / job | dirtied / job "
            "| WAL records / job | FPI / job | WAL bytes / job |"
        )
        print("|---|---|---|---|---|---|---|---|---|")
        plans = result["plans"]
        total: dict[str, float] = defaultdict(float)
        for kind, count in sorted(result["counts"].items(), key=lambda kv: -kv[1]):
            plan = plans.get(kind, {})
            hit = plan.get("Shared Hit Blocks", 0) + plan.get("Shared Read Blocks", 0)
            cells = [
                hit,
                plan.get("Shared Dirtied Blocks", 0),
                plan.get("WAL Records", 0),
                plan.get("WAL FPI", 0),
                plan.get("WAL Bytes", 0),
            ]
            for key, value in zip(
                ("buffers", "dirtied", "records", "fpi", "bytes"), cells, strict=True
            ):
                total[key] += value
            total["statements"] += count
            spent = result.get("seconds", {}).get(kind, 0.0)
            total["seconds"] += spent
            print(
                f"| {kind} | {count} | {count / n:.4f} | {spent / n * 1e6:.1f} | "
                + " | ".join(f"{value / n:.2f}" for value in cells)
                + " |"
            )
        print(
            f"| all | {total['statements']:.0f} | {total['statements'] / n:.4f} | "
            f"{total['seconds'] / n * 1e6:.1f} | "
            + " | ".join(
                f"{total[key] / n:.2f}"
                for key in ("buffers", "dirtied", "records", "fpi", "bytes")
            )
            + " |"
        )
        for kind in ("claim", "completion"):
            plan = plans.get(kind)
            if plan:
                per = plan["statements"]
                print(
                    f"\n{kind}: {per:.0f} statements, per statement: buffers "
                    f"{(plan['Shared Hit Blocks'] + plan['Shared Read Blocks']) / per:.1f}, "
                    f"dirtied {plan['Shared Dirtied Blocks'] / per:.1f}, WAL "
                    f"{plan['WAL Bytes'] / per:,.0f} bytes; per job: buffers "
                    f"{(plan['Shared Hit Blocks'] + plan['Shared Read Blocks']) / n:.2f}"
                )
        print(
            f"\ntuples: inserted {after['ins'] - before['ins']}, updated "
            f"{after['upd'] - before['upd']}, HOT {after['hot'] - before['hot']}; "
            f"heap buffers/job {(after['heap'] - before['heap']) / n:.2f}; commits/job "
            f"{(after['commits'] - before['commits']) / n:.4f}; cluster WAL/job "
            f"{(after['lsn'] - before['lsn']) / n:,.0f} bytes\n"
        )
        print("| index | buffers / job | size after fill (kB) | after drain (kB) |")
        print("|---|---|---|---|")
        for index, stats in after["indexes"].items():
            old = before["indexes"].get(index, {"buffers": 0, "size": 0})
            print(
                f"| {index} | {(stats['buffers'] - old['buffers']) / n:.2f} | "
                f"{old['size'] // 1024} | {stats['size'] // 1024} |"
            )


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "_child":
        db, name, what, *rest = sys.argv[2:]
        configure(db, name)
        if what == "fill":
            child_fill(int(rest[0]), int(rest[1]) if len(rest) > 1 else 0)
        elif what == "counted":
            child_counted()
        else:
            child_worker()
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["drain", "cost"])
    parser.add_argument("--tree", action="append", required=True)
    parser.add_argument("--dbs", default="pg,sqlite")
    parser.add_argument("--n", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--floor", action="store_true")
    parser.add_argument(
        "--finished", type=int, default=0, help="completed jobs in the table first (PostgreSQL)"
    )
    args = parser.parse_args()
    args.tree = [str(Path(tree).resolve()) for tree in args.tree]
    {"drain": cmd_drain, "cost": cmd_cost}[args.command](args)


if __name__ == "__main__":
    main()
