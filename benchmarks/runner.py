"""Run django_sqlq, the bare-SQL floors and the peer queues through the same steps, on the
same machine and databases, and print three markdown tables: absolute figures, django_sqlq
divided by every other row of the same run, and the issue's targets (met / not met).

    python runner.py [--quick] [--n 10000] [--repeats 3] [--latency-jobs 50]
                     [--peers sqlq,dtdb,...] [--dbs sqlite,pg,my] [--drain-n djq2=2000,...]
                     [--skip enqueue,drain,latency] [--no-floors] [--rev GIT-REV]

--dbs my (MariaDB, not in the default): django_sqlq, django-tasks-db and the floors, whose
claim there is the locking read and UPDATE django_sqlq's MariaDB dialect uses.

Every step runs in a fresh process (peer_cli.py). Raw results go to $BENCH_TMP as
results-<time>.json, the tables also as results-<time>.md.

Started from the peer harness in shared/bench (runner.py); django_sqlq, the ratio and target
tables, --quick and --rev added.
"""

import argparse
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time

import common

# peer -> databases it supports, in table order ("my": MariaDB, only when --dbs names it)
MATRIX = [
    ("baseline-b1", ("sqlite", "pg", "my")),
    ("baseline-b100", ("sqlite", "pg", "my")),
    ("baseline-b100e", ("sqlite", "pg", "my")),
    ("sqlq", ("sqlite", "pg", "my")),
    ("sqlq-c8", ("sqlite", "pg", "my")),
    ("dtdb", ("sqlite", "pg", "my")),
    ("djq2", ("sqlite", "pg")),
    ("procrastinate", ("pg",)),
    ("huey", ("sqlite",)),
]
LABEL = {
    "baseline-b1": "floor: raw SQL, batch=1",
    "baseline-b100": "floor: raw SQL, batch=100, 1 UPDATE per batch done",
    "baseline-b100e": "floor: raw SQL, batch=100 claim, done per job",
    "sqlq": "**django_sqlq** (sqlq_worker --concurrency 1)",
    "sqlq-c8": "**django_sqlq** (sqlq_worker --concurrency 8)",
    "dtdb": "django-tasks-db (db_worker)",
    "djq2": "django-q2 ORM broker (qcluster)",
    "procrastinate": "procrastinate (Django contrib)",
    "huey": "huey SqliteHuey (huey_consumer)",
}
SHORT = {
    "baseline-b1": "floor b1",
    "baseline-b100": "floor b100",
    "baseline-b100e": "floor b100e",
    "sqlq": "django_sqlq c1",
    "sqlq-c8": "django_sqlq c8",
    "dtdb": "django-tasks-db",
    "djq2": "django-q2",
    "procrastinate": "procrastinate",
    "huey": "huey",
}
FLOORS = ("baseline-b1", "baseline-b100", "baseline-b100e")
OURS = ("sqlq", "sqlq-c8")
PEERS = ("dtdb", "djq2", "procrastinate", "huey")
GROUPS = {"floors": FLOORS, "sqlq": OURS, "peers": PEERS}
# Steps each row runs (default: all). The concurrency-8 row differs from the main one only
# in the worker, so it only drains.
STEPS = {"sqlq-c8": ("drain",)}
# Slow peers / very fast floors get a different N for the drain step so that one drain
# lasts roughly 5-60 s (the completion counter is polled every 20 ms).
DEFAULT_DRAIN_N = {"djq2": 2000, "baseline-b100": 50000}
QUICK = {
    "n": 2000,
    "repeats": 1,
    "latency_jobs": 10,
    # django_sqlq drains 10,000 even in a quick run: 2,000 would last a few polling ticks.
    "drain_n": {"djq2": 500, "sqlq": 10000, "sqlq-c8": 10000},
}


def step(peer, db, op, *args, timeout=900):
    cmd = [sys.executable, os.path.join(common.HERE, "peer_cli.py"), peer, db, op, *args]
    log = common.log_path(f"cli-{peer}-{db}-{op}")
    with open(log, "wb") as f:
        try:
            r = subprocess.run(
                cmd, stdout=subprocess.PIPE, stderr=f, timeout=timeout, cwd=common.HERE
            )
        except subprocess.TimeoutExpired:
            return {"error": f"timed out after {timeout} s, see {log}"}
    lines = r.stdout.decode().strip().splitlines()
    if r.returncode != 0 or not lines:
        return {"error": f"rc={r.returncode}, see {log}"}
    try:
        return json.loads(lines[-1])
    except ValueError:
        return {"error": f"bad output, see {log}"}


def med(runs, key):
    vals = [r[key] for r in runs if isinstance(r.get(key), (int, float))]
    return statistics.median(vals) if vals else None


def fmt(x, nd=0):
    if x is None:
        return "-"
    return f"{x:,.{nd}f}"


def fmt_ratio(r):
    if r is None:
        return "-"
    if r >= 100:
        return f"{r:,.0f}x"
    return f"{r:.3g}x"


def select(peers_arg, no_floors):
    if not peers_arg:
        return None
    chosen = set()
    for name in filter(None, peers_arg.split(",")):
        if name in GROUPS:
            chosen.update(GROUPS[name])
        elif name in LABEL:
            chosen.add(name)
        else:
            raise SystemExit(f"unknown peer {name!r}; know: {', '.join([*GROUPS, *LABEL])}")
    if not no_floors:
        chosen.update(FLOORS)  # the denominators of every ratio
    return chosen


def code_version(rev_sha):
    """Which django_sqlq was measured: a commit, or the working tree on top of one."""
    if rev_sha:
        return f"git {rev_sha[:12]} (exported with --rev)"
    git = ["git", "-C", common.ROOT]
    try:
        head = subprocess.run(
            [*git, "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            [*git, "status", "--porcelain", "--", "django_sqlq"], capture_output=True, text=True
        ).stdout.strip()
    except OSError:
        return "unknown"
    return f"working tree at {head}" + (" + uncommitted changes in django_sqlq/" if dirty else "")


def machine():
    def out(cmd):
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=20).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return "?"

    mem = out(["free", "-h"]).splitlines()
    pg = out(["psql", "-h", common.PG_HOST, "-p", common.PG_PORT, "-U", common.PG_USER,
              "-d", "postgres", "-Atc", "SHOW server_version"])  # fmt: skip
    import sqlite3

    try:
        mariadb = common.my_version()
    except Exception:  # not installed or not answering: only --dbs my needs it
        mariadb = "?"
    return {
        "date": time.strftime("%Y-%m-%d %H:%M %Z"),
        "nproc": out(["nproc"]),
        "mem": mem[1].split()[1] if len(mem) > 1 else "?",
        "postgresql": pg,
        "sqlite": sqlite3.sqlite_version,
        "mariadb": mariadb,
        "python": platform.python_version(),
        "django": out([sys.executable, "-c", "import django; print(django.__version__)"]),
    }


def main():  # noqa: C901 (the whole run, step by step, read top to bottom)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: --repeats 1 --n 2000 --latency-jobs 10, django-q2 "
                    "drains 500 (about 4 minutes for everything)")  # fmt: skip
    ap.add_argument("--n", type=int, default=None, help="jobs per enqueue/drain (10000)")
    ap.add_argument("--repeats", type=int, default=None, help="runs of each step (3)")
    ap.add_argument("--latency-jobs", type=int, default=None, help="pickup probes (50)")
    ap.add_argument("--peers", default="",
                    help="rows to run: sqlq, floors, peers (groups) or names: "
                    + ", ".join(LABEL) + " (default: all). The floors always run "
                    "(they are the ratios' denominators) unless --no-floors")  # fmt: skip
    ap.add_argument("--no-floors", action="store_true")
    ap.add_argument("--dbs", default="sqlite,pg",
                    help="engines: sqlite, pg, my (MariaDB; not in the default)")  # fmt: skip
    ap.add_argument("--drain-n", default="", help="peer=N,... overrides for the drain step")
    ap.add_argument("--skip", default="", help="steps to skip: enqueue,drain,latency")
    ap.add_argument("--rev", default=None,
                    help="measure django_sqlq as of this git revision (exported to BENCH_TMP) "
                    "instead of the checkout's working tree")  # fmt: skip
    a = ap.parse_args()
    n = a.n or (QUICK["n"] if a.quick else 10000)
    repeats = a.repeats or (QUICK["repeats"] if a.quick else 3)
    latency_jobs = a.latency_jobs or (QUICK["latency_jobs"] if a.quick else 50)
    peers = select(a.peers, a.no_floors)
    dbs = set(a.dbs.split(","))
    skip = set(a.skip.split(",")) if a.skip else set()
    drain_n = dict(DEFAULT_DRAIN_N)
    if a.quick:
        drain_n.update(QUICK["drain_n"])
    for item in filter(None, a.drain_n.split(",")):
        k, v = item.split("=")
        drain_n[k] = int(v)

    os.makedirs(common.TMP, exist_ok=True)
    rev_sha = common.export_revision(a.rev) if a.rev else None
    stamp = time.strftime("%Y%m%d-%H%M%S")
    results = {
        "started": stamp,
        "command": "benchmarks/run " + shlex.join(sys.argv[1:]),
        "code": code_version(rev_sha),
        "machine": machine(),
        "n": n,
        "repeats": repeats,
        "latency_jobs": latency_jobs,
        "rows": [],
    }
    json_path = os.path.join(common.TMP, f"results-{stamp}.json")
    t_all = time.time()
    for peer, peer_dbs in MATRIX:
        if peers is not None and peer not in peers:
            continue
        steps = set(STEPS.get(peer, ("enqueue", "drain", "latency"))) - skip
        for db in peer_dbs:
            if db not in dbs:
                continue
            row = {"peer": peer, "db": db, "enqueue": [], "drain1": [], "drain2": []}
            t0 = time.time()
            print(f"# {peer} on {db}", file=sys.stderr, flush=True)
            s = step(peer, db, "setup")
            if "error" in s:
                row["error"] = "setup: " + s["error"]
                results["rows"].append(row)
                continue
            dn = drain_n.get(peer, n)
            row["drain_n"] = dn
            for r in range(repeats):
                if "enqueue" in steps:
                    row["enqueue"].append(step(peer, db, "enqueue", "--n", str(n)))
                    if peer == "sqlq":
                        res = step(peer, db, "enqueue-paired", "--n", str(n))
                        row.setdefault("paired", []).append(res)
                if "drain" in steps:
                    for w in (1, 2):
                        res = step(peer, db, "drain", "--n", str(dn), "--workers", str(w))
                        row[f"drain{w}"].append(res)
                print(f"  run {r + 1}: enqueue={row['enqueue'][-1:]} "
                      f"drain1={row['drain1'][-1:]} drain2={row['drain2'][-1:]}",
                      file=sys.stderr, flush=True)  # fmt: skip
            if "latency" in steps:
                row["latency"] = step(peer, db, "latency", "--jobs", str(latency_jobs))
                print(f"  latency={row['latency']}", file=sys.stderr, flush=True)
            row["seconds"] = round(time.time() - t0, 1)
            results["rows"].append(row)
            with open(json_path, "w") as f:
                json.dump(results, f, indent=1)
    results["seconds"] = round(time.time() - t_all, 1)
    md = report(results)
    with open(json_path, "w") as f:
        json.dump(results, f, indent=1)
    with open(os.path.join(common.TMP, f"results-{stamp}.md"), "w") as f:
        f.write(md)
    print(md)
    print(f"raw: {json_path} ({results['seconds']:.0f} s)", file=sys.stderr)


# -- the tables ----------------------------------------------------------------------------


def figures(row):
    """The medians of one row, by metric name (None where not measured)."""
    e, d1, d2 = row.get("enqueue", []), row.get("drain1", []), row.get("drain2", [])
    lat = row.get("latency") or {}
    return {
        "enqueue": med(e, "enqueue_rate"),
        "bulk": med(e, "bulk_rate"),
        "drain1": med(d1, "drain_rate"),
        "drain2": med(d2, "drain_rate"),
        "drain1_db": med(d1, "drain_rate_db"),
        "p50": lat.get("p50_ms"),
        "p95": lat.get("p95_ms"),
        "rss": med(d1, "main_rss_mb"),
        "rss2": med(d2, "tree_rss_mb"),
        "cpu": med(d1, "cpu_ms_per_job"),
        "paired_ratio": med(row.get("paired", []), "paired_ratio"),
        "paired_rate": med(row.get("paired", []), "paired_rate"),
        "paired_floor_rate": med(row.get("paired", []), "paired_floor_rate"),
    }


def report(results):
    m = results.get("machine", {})
    head = [
        f"Run {results['started']} ({results.get('seconds', 0) / 60:.0f} min): "
        f"`{results.get('command', '')}`",
        "",
        f"Machine: {m.get('nproc', '?')} cores, {m.get('mem', '?')} RAM, PostgreSQL "
        f"{m.get('postgresql', '?')}, SQLite {m.get('sqlite', '?')}, "
        + (f"MariaDB {m['mariadb']}, " if m.get("mariadb", "?") != "?" else "")
        + "Python "
        f"{m.get('python', '?')}, Django {m.get('django', '?')}. django_sqlq: "
        f"{results.get('code', '?')}.",
        "",
    ]
    return "\n".join([*head, table(results), ratios(results), targets(results)])


def table(results):
    header = ("| row | db | enqueue 1/txn (jobs/s) | enqueue bulk (jobs/s) "
              "| drain 1 proc (jobs/s) | drain 2 procs (jobs/s) "
              "| pickup p50 / p95 (ms) | peak RSS 1 proc: main / tree (MB) "
              "| CPU ms/job (1 proc) | drain N |")  # fmt: skip
    lines = ["### Absolute figures", "", header, "|" + "---|" * 10]
    for row in results["rows"]:
        if "error" in row:
            lines.append(f"| {LABEL[row['peer']]} | {row['db']} | {row['error']} |" + " |" * 8)
            continue
        e, d1, d2 = row["enqueue"], row["drain1"], row["drain2"]
        lat = row.get("latency") or {}
        errs = [x.get("error") for x in [*e, *d1, *d2, lat] if x.get("error")]
        incomplete = [x for x in d1 + d2 if x and x.get("complete") is False]
        note = " ⚠" if errs or incomplete else ""
        f = figures(row)
        lat_s = f"{f['p50']:.1f} / {f['p95']:.1f}" if f["p50"] is not None else "-"
        if d1:
            rss = (f"{fmt(f['rss'])} / {fmt(med(d1, 'tree_rss_mb'))}"
                   f" ({d1[0].get('nprocs', '?')}p)")  # fmt: skip
        else:
            rss = "-"
        lines.append(
            f"| {LABEL[row['peer']]}{note} | {row['db']} "
            f"| {fmt(f['enqueue'])} | {fmt(f['bulk'])} "
            f"| {fmt(f['drain1'])} | {fmt(f['drain2'])} "
            f"| {lat_s} | {rss} | {fmt(f['cpu'], 2)} "
            f"| {row.get('drain_n', results['n']):,} |"
        )
    lines.append("")
    lines.append(
        f"Medians of {results['repeats']} runs (pickup latency: one run of "
        f"{results.get('latency_jobs', '?')} jobs); enqueue N = {results['n']:,}."
    )
    errors = [
        (row["peer"], row["db"], x["error"])
        for row in results["rows"]
        for x in [
            *row.get("enqueue", []),
            *row.get("drain1", []),
            *row.get("drain2", []),
            row.get("latency") or {},
        ]
        if x.get("error")
    ]
    if errors or any("⚠" in line for line in lines):
        lines += ["", "⚠: a step failed or a drain did not finish:"]
    for peer, db, err in errors:
        lines.append(f"- {peer} on {db}: {err}")
    return "\n".join(lines) + "\n"


def _rows_by_db(results):
    out = {}
    for row in results["rows"]:
        if "error" not in row:
            out.setdefault(row["db"], {})[row["peer"]] = figures(row)
    return out


def _div(a, b):
    return a / b if a is not None and b else None


def ratios(results):
    lines = [
        "### django_sqlq divided by each row of the same run",
        "",
        "Throughput columns: above 1x means django_sqlq is faster. Pickup and memory: below "
        "1x means django_sqlq is quicker / smaller. c1 = `--concurrency 1`, c8 = "
        "`--concurrency 8`.",
        "",
    ]
    cols = [
        ("enqueue 1/txn", "sqlq", "enqueue"),
        ("enqueue bulk", "sqlq", "bulk"),
        ("drain 1 proc (c1)", "sqlq", "drain1"),
        ("drain 2 procs (c1)", "sqlq", "drain2"),
        ("drain 1 proc (c8)", "sqlq-c8", "drain1"),
        ("drain 2 procs (c8)", "sqlq-c8", "drain2"),
        ("pickup p50", "sqlq", "p50"),
        ("pickup p95", "sqlq", "p95"),
        ("peak RSS 1 proc", "sqlq", "rss"),
    ]
    lines.append("| django_sqlq / | db | " + " | ".join(c[0] for c in cols) + " |")
    lines.append("|" + "---|" * (len(cols) + 2))
    any_row = False
    for db, rows in _rows_by_db(results).items():
        if not any(o in rows for o in OURS):
            continue
        for peer, _dbs in MATRIX:
            if peer in OURS or peer not in rows:
                continue
            cells = [
                fmt_ratio(_div(rows.get(ours, {}).get(k), rows[peer].get(k)))
                for _label, ours, k in cols
            ]
            lines.append(f"| {SHORT[peer]} | {db} | " + " | ".join(cells) + " |")
            any_row = True
    if not any_row:
        lines.append("| (no django_sqlq row, or nothing to divide by) |" + " |" * (len(cols) + 1))
    return "\n".join(lines) + "\n"


def _verdict(ok):
    return "-" if ok is None else ("**met**" if ok else "**not met**")


def targets(results):
    """The issue's targets that this run measures (claim cost: `benchmarks/run claim-cost`)."""
    rows = _rows_by_db(results)
    lines = [
        "### Targets (django_sqlq row: `--concurrency 1`)",
        "",
        "| target | db | measured | needed | verdict |",
        "|---|---|---|---|---|",
    ]
    for db in ("sqlite", "pg"):
        r = rows.get(db, {})
        ours = r.get("sqlq")
        if ours is None:
            continue
        floor = r.get("baseline-b100", {})
        need = 0.25 if db == "sqlite" else 0.30
        x = _div(ours["drain1"], floor.get("drain1"))
        lines.append(
            f"| drain, 1 process / floor b100 (batch=100, 1 UPDATE per batch done) | {db} "
            f"| {fmt_pct(x)} ({fmt(ours['drain1'])} vs {fmt(floor.get('drain1'))} jobs/s) "
            f"| ≥ {need:.0%} | {_verdict(None if x is None else x >= need)} |"
        )
        xe = _div(ours["drain1"], r.get("baseline-b100e", {}).get("drain1"))
        if xe is not None:
            lines.append(
                f"| (for reference) drain, 1 process / floor b100e (done per job) | {db} "
                f"| {fmt_pct(xe)} | - | - |"
            )
        peer_x = [(p, _div(ours["drain1"], r[p]["drain1"])) for p in PEERS if p in r]
        peer_x = [(p, v) for p, v in peer_x if v is not None]
        if peer_x:
            worst = min(peer_x, key=lambda pv: pv[1])
            lines.append(
                f"| drain, 1 process / every peer (lowest: {SHORT[worst[0]]}) | {db} "
                f"| {fmt_ratio(worst[1])} | ≥ 10x | {_verdict(worst[1] >= 10)} |"
            )
        else:
            lines.append(
                f"| drain, 1 process / every peer | {db} | no peer in this run | ≥ 10x | - |"
            )
        if ours["paired_ratio"] is not None:
            x = ours["paired_ratio"]
            lines.append(
                f"| enqueue 1/txn / bare INSERT floor, interleaved in one process | {db} "
                f"| {fmt_pct(x)} ({fmt(ours['paired_rate'])} vs "
                f"{fmt(ours['paired_floor_rate'])} jobs/s) "
                f"| ≥ 50% (within 2x) | {_verdict(x >= 0.5)} |"
            )
        fl = [r[p]["enqueue"] for p in FLOORS if p in r and r[p]["enqueue"]]
        floor_enq = statistics.median(fl) if fl else None
        x = _div(ours["enqueue"], floor_enq)
        paired = ours["paired_ratio"] is not None
        verdict = "-" if paired else _verdict(None if x is None else x >= 0.5)
        lines.append(
            f"| {'(for reference, separate runs) ' if paired else ''}enqueue 1/txn / "
            f"floor rows' median | {db} "
            f"| {fmt_pct(x)} ({fmt(ours['enqueue'])} vs {fmt(floor_enq)} jobs/s) "
            f"| ≥ 50% (within 2x) | {verdict} |"
        )
        if db == "sqlite":
            b = ours["bulk"]
            lines.append(
                f"| bulk_enqueue | {db} | {fmt(b)} jobs/s | ≥ 100,000 jobs/s "
                f"| {_verdict(None if b is None else b >= 100_000)} |"
            )
        p50, p95 = ours["p50"], ours["p95"]
        lines.append(
            f"| pickup latency, idle worker, p50 / p95 | {db} "
            f"| {fmt(p50, 1)} / {fmt(p95, 1)} ms | < 10 / < 50 ms "
            f"| {_verdict(None if p50 is None else p50 < 10 and p95 < 50)} |"
        )
        if db == "pg":
            x = _div(ours["drain2"], ours["drain1"])
            lines.append(
                f"| drain, 2 processes / 1 process | {db} | {fmt_ratio(x)} "
                f"({fmt(ours['drain2'])} vs {fmt(ours['drain1'])} jobs/s) | ≥ 1.5x "
                f"| {_verdict(None if x is None else x >= 1.5)} |"
            )
    lines += _mariadb_lines(rows.get("my", {}))
    lines.append(
        "| claim time, 1,000,000 finished rows / empty table | both | "
        "see `benchmarks/run claim-cost` | ≤ 1.2x | - |"
    )
    return "\n".join(lines) + "\n"


def _mariadb_lines(r):
    """MariaDB (a preview): no target of the issue's yet; the drain's ratios, for the record."""
    ours = r.get("sqlq")
    if ours is None:
        return []
    floor = r.get("baseline-b100", {}).get("drain1")
    x = _div(ours["drain1"], floor)
    lines = [
        f"| (no target yet) drain, 1 process / floor b100 (locking read + UPDATE claim) | my "
        f"| {fmt_pct(x)} ({fmt(ours['drain1'])} vs {fmt(floor)} jobs/s) | - | - |"
    ]
    for p in PEERS:
        x = _div(ours["drain1"], r.get(p, {}).get("drain1"))
        if x is not None:
            lines.append(
                f"| (no target yet) drain, 1 process / {SHORT[p]} | my | {fmt_ratio(x)} "
                f"({fmt(ours['drain1'])} vs {fmt(r[p]['drain1'])} jobs/s) | - | - |"
            )
    return lines


def fmt_pct(x):
    return "-" if x is None else f"{x:.1%}"


if __name__ == "__main__":
    main()
