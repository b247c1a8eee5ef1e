"""What one claim costs as the jobs table grows: `benchmarks/run claim-cost`.

    python claim_cost.py [--dbs sqlite,pg] [--claims 2000] [--limit 1] [--quick]
                         [--sqlite-analyze]
    python claim_cost.py one --db pg --finished 1000000 --pending 2050 --claims 2000

For each engine and each table (empty; 100,000 and 1,000,000 completed rows; 100,000
pending rows; both) a fresh process creates the database, fills it with raw INSERT ...
SELECT (generate_series on PostgreSQL, a recursive CTE on SQLite), runs ANALYZE (on
PostgreSQL; on SQLite too with --sqlite-analyze) and a checkpoint, then times
``QueueOps.claim(limit=1)`` (one ``UPDATE ... RETURNING``, autocommit, as the
worker issues it) followed by an untimed ``QueueOps.complete_statuses`` of the claimed job,
``--claims`` times after 20 warm-up cycles. It prints the median and p95 per claim in µs,
each table's median divided by the empty table's, and the claim's plan.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common

WARMUP = 20
# (label, finished rows, pending rows beyond the ones the timed claims take)
SCENARIOS = [
    ("empty", 0, 0),
    ("100,000 finished", 100_000, 0),
    ("1,000,000 finished", 1_000_000, 0),
    ("100,000 pending", 0, 100_000),
    ("1,000,000 finished + 100,000 pending", 1_000_000, 100_000),
]
QUICK_CLAIMS = 300


def fill(db, status, count, first):
    """Insert ``count`` jobs in ``status`` ('completed' or 'pending') with one statement."""
    from django.db import connection

    from django_sqlq.models import Job

    table = Job._meta.db_table
    done = status == "completed"
    if db == "pg":
        ts = "(now() - interval '1 day')"
        values = {
            "payload": "jsonb_build_object('i', g)",
            "errors": "'[]'::jsonb",
        }
        source = "generate_series(%s, %s) AS g"
        prefix, params = "", [first, first + count - 1]
    else:
        ts = "datetime('now', '-1 day')"
        values = {"payload": "json_object('i', g)", "errors": "'[]'"}
        source = "c"
        prefix = "WITH RECURSIVE c(g) AS (SELECT %s UNION ALL SELECT g + 1 FROM c WHERE g < %s) "
        params = [first, first + count - 1]
    values.update({
        "queue": "'default'",
        "type": "'noop'",
        "status": f"'{status}'",
        "priority": "0",
        "attempts": "1" if done else "0",
        "max_attempts": "5",
        "timeout": "NULL",
        "last_error": "''",
        "scheduled_at": ts,
        "created_at": ts,
        "updated_at": ts,
        "started_at": ts if done else "NULL",
        "completed_at": ts if done else "NULL",
        "locked_by": "'bench-old-worker'" if done else "''",
        "locked_at": ts if done else "NULL",
        "lease_expires_at": "NULL",
        "result": "NULL",
    })  # fmt: skip
    columns = [f.column for f in Job._meta.concrete_fields if f.column in values]
    sql = (
        f"{prefix}INSERT INTO {table} ({', '.join(columns)}) "
        f"SELECT {', '.join(values[c] for c in columns)} FROM {source}"
    )
    with connection.cursor() as cur:
        cur.execute(sql, params)


def one(db, finished, pending, claims, limit):
    from peers.sqlq import Peer

    class ClaimPeer(Peer):
        name = "sqlq_claim"

    peer = ClaimPeer(db)
    peer.setup()  # a new database, migrated
    from django.db import connection

    from django_sqlq.db import ops_for
    from django_sqlq.db.outcomes import Finished

    t = time.perf_counter()
    if finished:
        fill(db, "completed", finished, 1)
    fill(db, "pending", pending, finished + 1)
    with connection.cursor() as cur:
        if db == "pg":
            cur.execute("ANALYZE")
            cur.execute("CHECKPOINT")
        else:
            if os.environ.get("BENCH_SQLITE_ANALYZE") == "1":
                cur.execute("ANALYZE")
            cur.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    fill_s = time.perf_counter() - t

    worker_id = "bench-claim"
    claim_us, complete_us = [], []
    empty = 0
    for k in range(WARMUP + claims):
        t0 = time.perf_counter()
        jobs = ops_for("default").claim(
            queues=("default",), worker_id=worker_id, limit=limit, lease_seconds=60
        )
        t1 = time.perf_counter()
        if jobs:
            ops_for("default").complete_statuses(
                [Finished(j.id, j.attempts, None) for j in jobs],
                worker_id=worker_id,
            )
        else:
            empty += 1
        t2 = time.perf_counter()
        if k >= WARMUP:
            claim_us.append((t1 - t0) * 1e6)
            complete_us.append((t2 - t1) * 1e6)
    plan = explain_claim(ops_for("default"), ["default"], limit)
    return {
        "db": db,
        "finished": finished,
        "pending": pending,
        "claims": claims,
        "limit": limit,
        "empty_claims": empty,
        "fill_s": round(fill_s, 1),
        "claim_median_us": statistics.median(claim_us),
        "claim_p95_us": common.percentile(claim_us, 95),
        "claim_mean_us": statistics.fmean(claim_us),
        "complete_median_us": statistics.median(complete_us),
        "plan": plan,
    }


def explain_claim(ops, queues, limit):
    """The plan of the claim statement the worker runs (``QueueOps.claim_sql``)."""
    from django.db import connection

    sql, params = ops.claim_sql(queues, worker_id="explain", limit=limit, lease_seconds=60)
    explain = "EXPLAIN QUERY PLAN " if connection.vendor == "sqlite" else "EXPLAIN "
    with connection.cursor() as cursor:
        cursor.execute(explain + sql, params)
        return "\n".join(str(row[-1]) for row in cursor.fetchall())


def run_one(db, finished, pending, claims, limit):
    cmd = [
        sys.executable, os.path.abspath(__file__), "one", "--db", db,
        "--finished", str(finished), "--pending", str(pending),
        "--claims", str(claims), "--limit", str(limit),
    ]  # fmt: skip
    log = common.log_path(f"claim-cost-{db}-{finished}-{pending}")
    env = dict(os.environ, BENCH_PEER="sqlq_claim", BENCH_DB=db,
               DJANGO_SETTINGS_MODULE="benchsite.settings")  # fmt: skip
    with open(log, "wb") as f:
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=f, cwd=common.HERE, env=env,
                           timeout=1800)  # fmt: skip
    lines = r.stdout.decode().strip().splitlines()
    if r.returncode != 0 or not lines:
        return {"db": db, "finished": finished, "pending": pending,
                "error": f"rc={r.returncode}, see {log}"}  # fmt: skip
    return json.loads(lines[-1])


def short_plan(plan):
    """The plan's node names on one line (SQLite's lines; PostgreSQL's nodes, no costs)."""
    parts = []
    for line in plan.splitlines():
        text = re.sub(r"\s*\(cost=.*?\)", "", line).strip().removeprefix("->").strip()
        if text and not text.startswith(("Index Cond", "Filter")):
            parts.append(text)
    return " > ".join(parts).replace("|", "/")


def report(results, claims, limit, started, seconds, sqlite_analyze, rev=None):
    lines = [
        f"### Claim cost as the table grows ({started}, {seconds / 60:.0f} min)",
        "",
        f"`QueueOps.claim(limit={limit})` in autocommit, {claims:,} timed claims per table "
        f"(each followed by an untimed complete), after {WARMUP} warm-up cycles. ANALYZE ran "
        f"on PostgreSQL{' and SQLite' if sqlite_analyze else ' only (not on SQLite)'}. "
        f"django_sqlq: {f'git {rev}' if rev else 'the working tree'}.",
        "",
        "| db | table holds | claim median (µs) | claim p95 (µs) | median / empty table "
        "| complete median (µs) | fill + ANALYZE (s) | plan |",
        "|---|---|---|---|---|---|---|---|",
    ]
    verdicts = []
    for db in ("sqlite", "pg"):
        rows = [r for r in results if r["db"] == db]
        if not rows:
            continue
        base = next((r for r in rows if r.get("label") == "empty" and "error" not in r), None)
        for r in rows:
            if "error" in r:
                lines.append(f"| {db} | {r['label']} | {r['error']} | | | | | |")
                continue
            ratio = r["claim_median_us"] / base["claim_median_us"] if base else None
            lines.append(
                f"| {db} | {r['label']} | {r['claim_median_us']:,.0f} "
                f"| {r['claim_p95_us']:,.0f} | {'-' if ratio is None else f'{ratio:.2f}x'} "
                f"| {r['complete_median_us']:,.0f} | {r['fill_s']:.1f} | {short_plan(r['plan'])} |"
            )
            if r["label"] == "1,000,000 finished" and ratio is not None:
                verdicts.append((db, ratio))
    lines.append("")
    for db, ratio in verdicts:
        ok = "**met**" if ratio <= 1.2 else "**not met**"
        lines.append(
            f"- Target (claim with 1,000,000 finished rows within 1.2x of an empty table), "
            f"{db}: {ratio:.2f}x, {ok}."
        )
    shown = set()
    for r in results:
        if "plan" in r and (r["db"], r["plan"]) not in shown:
            shown.add((r["db"], r["plan"]))
            same = [
                x["label"] for x in results if x["db"] == r["db"] and x.get("plan") == r["plan"]
            ]
            lines += ["", f"Claim plan on {r['db']} ({'; '.join(same)}):", "",
                      "```", r["plan"], "```"]  # fmt: skip
    return "\n".join(lines) + "\n"


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "one":
        ap = argparse.ArgumentParser()
        ap.add_argument("one")
        ap.add_argument("--db", choices=["sqlite", "pg"], required=True)
        ap.add_argument("--finished", type=int, default=0)
        ap.add_argument("--pending", type=int, default=0)
        ap.add_argument("--claims", type=int, default=2000)
        ap.add_argument("--limit", type=int, default=1)
        a = ap.parse_args()
        print(json.dumps(one(a.db, a.finished, a.pending, a.claims, a.limit)))
        return
    ap = argparse.ArgumentParser(
        prog="benchmarks/run claim-cost", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument("--dbs", default="sqlite,pg")
    ap.add_argument("--claims", type=int, default=None, help="timed claims per table (2000)")
    ap.add_argument("--limit", type=int, default=1, help="jobs per claim (1)")
    ap.add_argument("--quick", action="store_true", help=f"{QUICK_CLAIMS} claims per table")
    ap.add_argument(
        "--sqlite-analyze",
        action="store_true",
        help="run ANALYZE on SQLite too (as PRAGMA optimize would); PostgreSQL always is",
    )
    ap.add_argument("--rev", default=None, help="measure django_sqlq as of this git revision")
    a = ap.parse_args()
    rev = common.export_revision(a.rev)[:12] if a.rev else None
    os.environ["BENCH_SQLITE_ANALYZE"] = "1" if a.sqlite_analyze else "0"
    claims = a.claims or (QUICK_CLAIMS if a.quick else 2000)
    os.makedirs(common.TMP, exist_ok=True)
    started = time.strftime("%Y%m%d-%H%M%S")
    t = time.time()
    results = []
    for db in a.dbs.split(","):
        for label, finished, extra_pending in SCENARIOS:
            # Enough pending jobs for every timed claim, so that each one finds a job.
            pending = extra_pending + (WARMUP + claims) * a.limit + 10
            print(f"# claim cost: {db}, {label}", file=sys.stderr, flush=True)
            r = run_one(db, finished, pending, claims, a.limit)
            r["label"] = label
            print(f"  {({k: v for k, v in r.items() if k != 'plan'})}", file=sys.stderr,
                  flush=True)  # fmt: skip
            results.append(r)
    md = report(results, claims, a.limit, started, time.time() - t, a.sqlite_analyze, rev)
    base = os.path.join(common.TMP, f"claim-cost-{started}")
    with open(base + ".json", "w") as f:
        json.dump(results, f, indent=1)
    with open(base + ".md", "w") as f:
        f.write(md)
    print(md)
    print(f"raw: {base}.json", file=sys.stderr)


if __name__ == "__main__":
    main()
