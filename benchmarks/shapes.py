"""Production-shaped tables: `benchmarks/run shapes`.

    python shapes.py [--dbs sqlite,pg,my] [--quick] [--backlog 500000] [--future 500000]
                     [--idle-future 1000000] [--drain 20000] [--burst 100000]
    python shapes.py one --db pg --shape backlog --size 500000 --drain 20000

Each shape gets a fresh database (a new process), filled with set-based SQL (generate_series
on PostgreSQL, a recursive CTE on SQLite, the sequence engine on MariaDB), then ANALYZE
(PostgreSQL: VACUUM ANALYZE, or autovacuum would catch up on the new rows during the timed
drain) and a checkpoint (none on MariaDB):

- drain rows: one ``sqlq_worker --burst --max-jobs DRAIN -v 0`` serving 20 queues
  (``SQLQ["QUEUES"]`` = q00..q19) works through DRAIN jobs. The table holds DRAIN runnable
  jobs in q19 and nothing else ("empty"); or also 500,000 runnable jobs over the 19 other
  queues, each queue's rows together as q19's are ("backlog") or interleaved one row per
  queue in turn ("backlog-mixed": a claim's rows then sit on as many table pages, which costs
  in writes, not in the claim); or also 500,000 jobs scheduled a day ahead ("future"). The
  rate is jobs / (last completed_at - first started_at), by the database's clock, and each
  row is given as a ratio to the "empty" row of the same run.
- idle rows: what an idle worker does at each wake-up (read the next due time, then one
  claim over the 20 queues), timed in-process, on an empty table and with 1,000,000 jobs
  scheduled a day ahead.
- due row: an idle worker (``sqlq_worker -v 0``, default poll interval) and 40 jobs enqueued
  one at a time with ``delay=0.2``, 0.3 s apart, beside the 500,000 future jobs: the delay from
  each job's ``scheduled_at`` to its ``started_at`` (the pickup of a job that comes due).
- burst rows: BURST jobs inserted in one transaction (after the settle) and drained by one
  burst worker with no manual VACUUM; the rate of the first 10,000 completions against the
  last 10,000.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common

QUEUES = [f"q{i:02d}" for i in range(20)]
PEER = "sqlq_shapes"
IDLE_WAKEUPS = 500
DUE_JOBS = 40


def fill(db, count, *, queue, status, future, mixed=False):
    """Insert ``count`` jobs of ``status`` with one statement. ``queue`` is a queue name, or
    None to spread them over the 19 queues q00..q18: queue by queue (each queue's rows
    together, as q19's are), or ``mixed`` (one row per queue in turn)."""
    from django.db import connection

    from django_sqlq.models import Job

    if count <= 0:
        return
    if db == "pg":
        ts = "(now() + interval '1 day')" if future else "(now() - interval '1 day')"
        spread = "mod(g, 19)" if mixed else f"((g - 1) * 19 / {int(count)})"
        queue_sql = f"'q' || lpad({spread}::text, 2, '0')" if queue is None else f"'{queue}'"
        values = {"payload": "jsonb_build_object('i', g)", "errors": "'[]'::jsonb"}
        source, prefix = "generate_series(1, %s) AS g", ""
    elif db == "my":
        # MariaDB's sequence engine (seq_1_to_N) numbers the rows; its datetimes are UTC.
        ts = (
            "(UTC_TIMESTAMP(6) + INTERVAL 1 DAY)"
            if future
            else "(UTC_TIMESTAMP(6) - INTERVAL 1 DAY)"
        )
        spread = "MOD(g, 19)" if mixed else f"((g - 1) * 19 DIV {int(count)})"
        queue_sql = f"CONCAT('q', LPAD({spread}, 2, '0'))" if queue is None else f"'{queue}'"
        # uuid: no default in the column there (Django's char(32) hex).
        values = {"payload": "JSON_OBJECT('i', g)", "errors": "'[]'",
                  "uuid": "REPLACE(UUID(), '-', '')"}  # fmt: skip
        source, prefix = f"(SELECT seq AS g FROM seq_1_to_{int(count)}) AS c", ""
    else:
        ts = "datetime('now', '+1 day')" if future else "datetime('now', '-1 day')"
        spread = "g %% 19" if mixed else f"((g - 1) * 19 / {int(count)})"
        queue_sql = f"printf('q%%02d', {spread})" if queue is None else f"'{queue}'"
        values = {"payload": "json_object('i', g)", "errors": "'[]'"}
        source = "c"
        prefix = "WITH RECURSIVE c(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM c WHERE g < %s) "
    values.update({
        "queue": queue_sql, "type": "'noop'", "status": f"'{status}'", "priority": "0",
        "attempts": "0", "max_attempts": "5", "timeout": "NULL", "last_error": "''",
        "scheduled_at": ts, "created_at": ts, "updated_at": ts, "locked_by": "''",
    })  # fmt: skip
    table = Job._meta.db_table
    columns = [f.column for f in Job._meta.concrete_fields if f.column in values]
    sql = (
        f"{prefix}INSERT INTO {table} ({', '.join(columns)}) "
        f"SELECT {', '.join(values[c] for c in columns)} FROM {source}"
    )
    with connection.cursor() as cur:
        cur.execute(sql, [count] if db != "my" else None)


def settle(db):
    from django.db import connection

    with connection.cursor() as cur:
        if db == "pg":
            # VACUUM too: a table filled in one go is not what a site's table looks like,
            # and autovacuum would otherwise catch up on it during the timed drain.
            cur.execute("VACUUM ANALYZE")
            cur.execute("CHECKPOINT")
        elif db == "my":
            cur.execute("ANALYZE TABLE sqlq_job")
            cur.fetchall()
        else:
            cur.execute("ANALYZE")
            cur.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def run_worker(peer, db, *args):
    argv = peer.manage("sqlq_worker", "-v", "0", "--burst", *args)
    env = dict(peer.worker_env(1), BENCH_SQLQ_QUEUES=json.dumps(QUEUES))
    proc = common.spawn(argv, env, f"shapes-worker-{db}")
    rc = proc.wait(timeout=3600)
    proc._bench_log.close()
    if rc != 0:
        raise SystemExit(f"worker exited with {rc}")


def drain_rate(peer, db, status="completed"):
    if db == "pg":
        span = "EXTRACT(EPOCH FROM max(completed_at) - min(started_at))"
    elif db == "my":
        span = "TIMESTAMPDIFF(MICROSECOND, min(started_at), max(completed_at)) / 1000000.0"
    else:
        span = "(julianday(max(completed_at)) - julianday(min(started_at))) * 86400.0"
    count, seconds = peer.sql(
        f"SELECT count(*), {span} FROM sqlq_job WHERE status = %s", [status]
    )[0]
    return {"jobs": count, "seconds": float(seconds), "rate": count / float(seconds)}


def burst_rates(peer, db, window=10_000):
    column = "completed_at" if db in ("pg", "my") else "julianday(completed_at) * 86400.0"
    rows = peer.sql(
        f"SELECT {column} FROM sqlq_job WHERE status = 'completed' ORDER BY completed_at"
    )
    times = [r[0].timestamp() if hasattr(r[0], "timestamp") else float(r[0]) for r in rows]
    first = window / (times[window] - times[0])
    last = window / (times[-1] - times[-window - 1])
    return {"jobs": len(times), "first_rate": first, "last_rate": last,
            "seconds": times[-1] - times[0]}  # fmt: skip


def idle_wakeups():
    from django_sqlq import lifecycle
    from django_sqlq.db import ops_for

    timings = []
    for k in range(IDLE_WAKEUPS + 20):
        t0 = time.perf_counter()
        due = lifecycle.next_due_in("default")
        jobs = ops_for("default").claim(
            queues=QUEUES, worker_id="idle", limit=8, lease_seconds=60, turn=k
        )
        t1 = time.perf_counter()
        assert not jobs
        assert due is None or due > 0
        if k >= 20:
            timings.append((t1 - t0) * 1e6)
    return {"median_us": statistics.median(timings), "p95_us": common.percentile(timings, 95)}


def due_latency(peer, db, jobs):
    """An idle worker (default flags but -v 0) and ``jobs`` jobs enqueued one at a time with
    ``delay=0.2``, 0.3 s apart: the delay from each job's scheduled_at to its started_at."""
    from django_sqlq import enqueue
    from django_sqlq.models import Job, WorkerProcess

    argv = peer.manage("sqlq_worker", "-v", "0")
    env = dict(peer.worker_env(1), BENCH_SQLQ_QUEUES=json.dumps(QUEUES))
    proc = common.spawn(argv, env, f"shapes-due-worker-{db}")
    try:
        deadline = time.monotonic() + 60
        while not WorkerProcess.objects.filter(stopped_at=None).exists():
            if time.monotonic() > deadline or proc.poll() is not None:
                raise SystemExit("the worker did not start")
            time.sleep(0.05)
        time.sleep(0.5)  # past its start-up claims: idle
        ids = []
        for _ in range(jobs):
            ids.append(enqueue("noop", {}, queue="q19", delay=0.2).pk)
            time.sleep(0.3)
        while Job.objects.filter(pk__in=ids).exclude(status="completed").exists():
            if time.monotonic() > deadline + 60:
                raise SystemExit("jobs were not run")
            time.sleep(0.05)
    finally:
        common.stop([proc])
    delays = sorted(
        (job.started_at - job.scheduled_at).total_seconds() * 1000
        for job in Job.objects.filter(pk__in=ids).only("started_at", "scheduled_at")
    )
    return {"jobs": len(delays), "p50_ms": statistics.median(delays),
            "p95_ms": common.percentile(delays, 95), "max_ms": delays[-1]}  # fmt: skip


def one(db, shape, size, drain):
    from peers.sqlq import Peer

    class ShapesPeer(Peer):
        name = PEER

    os.environ["BENCH_SQLQ_QUEUES"] = json.dumps(QUEUES)  # before Django reads its settings
    peer = ShapesPeer(db)
    peer.setup()
    t = time.perf_counter()
    result = {"db": db, "shape": shape, "size": size}
    if shape in ("empty", "backlog", "backlog-mixed", "future"):
        if shape.startswith("backlog"):
            fill(db, size, queue=None, status="pending", future=False, mixed=shape != "backlog")
        elif shape == "future":
            fill(db, size, queue=None, status="scheduled", future=True)
        fill(db, drain, queue="q19", status="pending", future=False)
        settle(db)
        result["fill_s"] = time.perf_counter() - t
        run_worker(peer, db, "--max-jobs", str(drain))
        result.update(drain_rate(peer, db))
    elif shape in ("idle-empty", "idle-future"):
        fill(db, size, queue=None, status="scheduled", future=True)
        settle(db)
        result["fill_s"] = time.perf_counter() - t
        result.update(idle_wakeups())
    elif shape == "due":
        fill(db, size, queue=None, status="scheduled", future=True)
        settle(db)
        result["fill_s"] = time.perf_counter() - t
        result.update(due_latency(peer, db, DUE_JOBS))
    elif shape == "burst":
        settle(db)
        fill(db, size, queue="q19", status="pending", future=False)  # one transaction
        result["fill_s"] = time.perf_counter() - t
        run_worker(peer, db)
        result.update(burst_rates(peer, db))
    return result


def run_one(db, shape, size, drain):
    cmd = [sys.executable, os.path.abspath(__file__), "one", "--db", db, "--shape", shape,
           "--size", str(size), "--drain", str(drain)]  # fmt: skip
    log = common.log_path(f"shapes-{db}-{shape}")
    env = dict(os.environ, BENCH_PEER=PEER, BENCH_DB=db,
               DJANGO_SETTINGS_MODULE="benchsite.settings")  # fmt: skip
    with open(log, "wb") as f:
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=f, cwd=common.HERE, env=env,
                           timeout=3600)  # fmt: skip
    lines = r.stdout.decode().strip().splitlines()
    if r.returncode != 0 or not lines:
        return {"db": db, "shape": shape, "size": size, "error": f"rc={r.returncode}, see {log}"}
    return json.loads(lines[-1])


def report(results, args, started, seconds):
    lines = [
        f"### Production shapes ({started}, {seconds / 60:.0f} min)",
        "",
        f"Drains: one `sqlq_worker --burst --max-jobs {args.drain:,} -v 0` serving 20 queues. "
        f"Idle: next-due read + one claim over 20 queues, median of {IDLE_WAKEUPS}. "
        f"Burst: {args.burst:,} jobs inserted in one transaction, no manual VACUUM.",
        "",
        "| db | shape | table holds | result | ratio (target) |",
        "|---|---|---|---|---|",
    ]
    for db in args.dbs.split(","):
        rows = {r["shape"]: r for r in results if r["db"] == db}
        base = rows.get("empty", {})
        idle_base = rows.get("idle-empty", {})
        for shape, r in rows.items():
            if "error" in r:
                lines.append(f"| {db} | {shape} | | {r['error']} | |")
                continue
            if shape in ("empty", "backlog", "backlog-mixed", "future"):
                held = {
                    "empty": f"{args.drain:,} runnable in q19 only",
                    "backlog": f"+ {r['size']:,} runnable over the 19 other queues",
                    "backlog-mixed": f"+ {r['size']:,} runnable over the 19 other queues, "
                    "their rows interleaved",
                    "future": f"+ {r['size']:,} scheduled a day ahead",
                }[shape]
                ratio = r["rate"] / base["rate"] if base.get("rate") else None
                target = "" if shape == "empty" else " (>= 0.8x)"
                lines.append(
                    f"| {db} | drain, {shape} | {held} | {r['rate']:,.0f} jobs/s "
                    f"| {'-' if ratio is None else f'{ratio:.2f}x'}{target} |"
                )
            elif shape.startswith("idle"):
                held = "empty" if shape == "idle-empty" else f"{r['size']:,} scheduled"
                ratio = (
                    r["median_us"] / idle_base["median_us"] if idle_base.get("median_us") else None
                )
                lines.append(
                    f"| {db} | idle wake-up | {held} | median {r['median_us']:,.0f} µs, "
                    f"p95 {r['p95_us']:,.0f} µs | {'-' if ratio is None else f'{ratio:.2f}x'}"
                    f" (<= 1.2x, <= 5 ms) |"
                )
            elif shape == "due":
                lines.append(
                    f"| {db} | pickup of a job coming due while idle | {r['size']:,} scheduled "
                    f"| p50 {r['p50_ms']:.1f} ms, p95 {r['p95_ms']:.1f} ms, max "
                    f"{r['max_ms']:.1f} ms from scheduled_at | (p50 < 10 ms, p95 < 50 ms) |"
                )
            elif shape == "burst":
                ratio = r["last_rate"] / r["first_rate"]
                lines.append(
                    f"| {db} | burst | {r['size']:,} inserted in one transaction "
                    f"| first 10k {r['first_rate']:,.0f} jobs/s, last 10k "
                    f"{r['last_rate']:,.0f} jobs/s ({r['seconds']:.1f} s in all) "
                    f"| {ratio:.2f}x (>= 0.8x) |"
                )
    return "\n".join(lines) + "\n"


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "one":
        ap = argparse.ArgumentParser()
        ap.add_argument("one")
        ap.add_argument("--db", choices=["sqlite", "pg", "my"], required=True)
        ap.add_argument("--shape", required=True)
        ap.add_argument("--size", type=int, default=0)
        ap.add_argument("--drain", type=int, default=100_000)
        a = ap.parse_args()
        print(json.dumps(one(a.db, a.shape, a.size, a.drain)))
        return
    ap = argparse.ArgumentParser(
        prog="benchmarks/run shapes", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument("--dbs", default="sqlite,pg")
    ap.add_argument("--quick", action="store_true", help="a tenth of every size")
    ap.add_argument("--backlog", type=int, default=500_000)
    ap.add_argument("--future", type=int, default=500_000)
    ap.add_argument("--idle-future", type=int, default=1_000_000)
    ap.add_argument("--drain", type=int, default=100_000)
    ap.add_argument("--burst", type=int, default=100_000)
    ap.add_argument(
        "--shapes",
        default="empty,backlog,backlog-mixed,future,idle-empty,idle-future,due,burst",
    )
    a = ap.parse_args()
    if a.quick:
        a.backlog, a.future, a.idle_future = a.backlog // 10, a.future // 10, a.idle_future // 10
        a.drain, a.burst = max(a.drain // 4, 2_000), max(a.burst // 4, 22_000)
    sizes = {"empty": 0, "backlog": a.backlog, "backlog-mixed": a.backlog, "future": a.future,
             "idle-empty": 0, "due": a.future,
             "idle-future": a.idle_future, "burst": a.burst}  # fmt: skip
    os.makedirs(common.TMP, exist_ok=True)
    started = time.strftime("%Y%m%d-%H%M%S")
    t = time.time()
    results = []
    for db in a.dbs.split(","):
        for shape in a.shapes.split(","):
            print(f"# shapes: {db}, {shape}", file=sys.stderr, flush=True)
            r = run_one(db, shape, sizes[shape], a.drain)
            print(f"  {r}", file=sys.stderr, flush=True)
            results.append(r)
    md = report(results, a, started, time.time() - t)
    base = os.path.join(common.TMP, f"shapes-{started}")
    with open(base + ".json", "w") as f:
        json.dump(results, f, indent=1)
    with open(base + ".md", "w") as f:
        f.write(md)
    print(md)
    print(f"raw: {base}.json", file=sys.stderr)


if __name__ == "__main__":
    main()
