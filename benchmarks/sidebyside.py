"""Two revisions of django_sqlq side by side: the regression guard of issue 22.

    benchmarks/run sidebyside --rev A --rev B [--jobs 20000] [--rounds 3] [--dbs sqlite,pg,my]
                              [--failing] [--a-kind K] [--b-kind K] [--b-sleepers N]

A and B are git revisions (a commit, a branch, ``HEAD~1``...) or ``WORKTREE``, this
checkout's django_sqlq/ as it is, uncommitted changes included (default: HEAD~1 and HEAD).
Each is exported into a directory of its own and put first on PYTHONPATH, so every step runs
that revision's code and migrations (the worker's ``django_sqlq.__file__`` is checked). Round
by round and engine by engine the revisions take turns, A then B, and each run is:

- a fresh database (PostgreSQL or MariaDB ``bench_sbs_sqlq``, SQLite a new file), ``migrate``;
- JOBS no-op jobs, one ``enqueue()`` each, all in one transaction (``--failing``: jobs whose
  handler raises, ``max_attempts=1``, so every attempt ends as a failure written for good);
- one ``manage.py sqlq_worker --burst`` at its defaults, no other option, until it exits;
- the rate: jobs / (last ``completed_at`` - first ``started_at``), by the database's clock
  (of the ``failed`` jobs with ``--failing``).

``--b-kind steps3``: B's jobs are no-ops in three durable steps (``context.step()``);
with ``--rev WORKTREE --rev WORKTREE``, B / A is what three steps cost a no-op job (issue 25).
``--a-kind writes3 --b-kind steps3w``: A's jobs write three rows, each in a transaction of
its own; B's write the same three rows, each in a durable step: what steps cost a job that
does work in the queue's database.
``--b-sleepers N``: B's database also holds N jobs asleep in a durable sleep (scheduled
three days ahead, their steps recorded) while it drains: what they cost the claim.

Each round also drains the bare-SQL floor of ``benchmarks/run`` (floor b100: 100-row
``UPDATE ... RETURNING`` claims, one UPDATE per batch done; peers/baseline.py), and every rate
is also given divided by the floor of its round. On MariaDB (``--dbs my``, both revisions
with django_sqlq/db/mysql.py) the floor's claim is the shape django_sqlq's MariaDB dialect
uses: one transaction of a 100-row ``SELECT ... FOR UPDATE SKIP LOCKED`` on the claim index
and an ``UPDATE ... WHERE id IN (...)``, then one completion UPDATE per batch. Prints, per
engine, each revision's rates, their medians, B / A, and each revision's median ratio to the
floor. Raw JSON:
$BENCH_TMP/sidebyside-<time>.json; the trees, databases and SQLite files go on exit.

    python sidebyside.py one --db sqlite|pg|my --tree DIR --jobs N [--failing] [--kind K]
        [--sleepers N]  # one JSON line
"""

import argparse
import contextlib
import json
import os
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import time

# Before `common` is imported, here and in every child: the databases of this mode are its own.
os.environ.setdefault("BENCH_PG_PREFIX", "bench_sbs_")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common
from runner import DEFAULT_DRAIN_N, fmt, fmt_pct, fmt_ratio, machine, step

FLOOR = "baseline-b100"
ENGINE = common.ENGINE


# -- one run, in a process of its own with PYTHONPATH=<the revision's tree> -----------------


def one(db, tree, jobs, failing=False, kind="noop", sleepers=0):
    from peers.sqlq import Peer
    from shapes import drain_rate

    peer = Peer(db)
    peer.setup()  # a fresh database, migrated by this revision's migrations
    import django_sqlq

    if not django_sqlq.__file__.startswith(tree + os.sep):
        raise SystemExit(f"django_sqlq comes from {django_sqlq.__file__}, not {tree}")
    probe = common.spawn(
        peer.manage("shell", "-c", "import django_sqlq; print(django_sqlq.__file__)"),
        peer.worker_env(1),
        f"sbs-probe-{db}",
    )
    probe.wait(120)
    common.stop([probe])
    with open(probe._bench_log.name) as f:
        worker_file = next((line.strip() for line in f if "django_sqlq" in line), "?")
    if not worker_file.startswith(tree + os.sep):
        raise SystemExit(f"the worker would import django_sqlq from {worker_file}, not {tree}")

    from django.db import connection, transaction

    from django_sqlq import enqueue

    if sleepers:
        _put_to_sleep(sleepers)
    if kind in ("writes3", "steps3w"):
        with connection.cursor() as cursor:
            cursor.execute("CREATE TABLE bench_write (job bigint NOT NULL, step varchar(20))")
    if failing:
        kind = "fail"
    t = time.perf_counter()
    with transaction.atomic():
        for i in range(jobs):
            if kind == "fail":
                enqueue("fail", {"i": i}, max_attempts=1)
            else:
                enqueue(kind, {"i": i})
    enqueue_s = time.perf_counter() - t
    connection.close()

    # BENCH_WORKER_ARGS (e.g. "--concurrency 1"): options beyond the defaults, to find out
    # where a difference comes from; the figures an issue reports are at the defaults.
    extra = os.environ.get("BENCH_WORKER_ARGS", "").split()
    worker = common.spawn(
        peer.manage("sqlq_worker", "--burst", *extra), peer.worker_env(1), f"sbs-{db}"
    )
    t = time.perf_counter()
    try:
        rc = worker.wait(1800)
    finally:
        common.stop([worker])
    worker_s = time.perf_counter() - t
    if rc != 0:
        raise SystemExit(f"the worker exited with {rc}; see {worker._bench_log.name}")
    out = drain_rate(peer, db, status="failed" if failing else "completed")
    if out["jobs"] != jobs:
        raise SystemExit(f"{out['jobs']} of {jobs} jobs finished")
    return {
        **out,
        "worker_wall_s": worker_s,
        "enqueue_rate": jobs / enqueue_s,
        "django_sqlq": worker_file,
    }


def _put_to_sleep(n):
    """``n`` jobs asleep for three days, as ``context.sleep()`` leaves them: scheduled, with
    their sleeping step recorded (the claim must not read them)."""
    from datetime import timedelta

    from django.utils import timezone

    from django_sqlq import bulk_enqueue
    from django_sqlq.models import JobStep, StepKind, StepState

    wake = timezone.now() + timedelta(days=3)
    jobs = bulk_enqueue("steps3", [{"asleep": i} for i in range(n)], run_at=wake)
    JobStep.objects.bulk_create(
        [
            JobStep(
                job_id=job.id,
                name="nap",
                kind=StepKind.SLEEP,
                state=StepState.SLEEPING,
                wake_at=wake,
            )
            for job in jobs
        ],
        batch_size=1000,
    )


def run_one(db, tree, jobs, failing=False, kind="noop", sleepers=0):
    cmd = [sys.executable, os.path.abspath(__file__), "one", "--db", db, "--tree", tree,
           "--jobs", str(jobs), *(["--failing"] if failing else []),
           "--kind", kind, "--sleepers", str(sleepers)]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=tree, BENCH_PEER="sqlq", BENCH_DB=db,
               DJANGO_SETTINGS_MODULE="benchsite.settings")  # fmt: skip
    log = common.log_path(f"sbs-one-{db}")
    with open(log, "wb") as f:
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=f, cwd=common.HERE, env=env,
                           timeout=3600)  # fmt: skip
    lines = r.stdout.decode().strip().splitlines()
    if r.returncode != 0 or not lines:
        return {"error": f"rc={r.returncode}, see {log}"}
    return json.loads(lines[-1])


# -- the whole comparison --------------------------------------------------------------------


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def ratio(a, b):
    return a / b if a is not None and b else None


def report(results):
    a, b = results["revs"]
    name = {a["key"]: f"A `{a['label']}`", b["key"]: f"B `{b['label']}`"}
    rounds = results["rounds"]
    head = " | ".join(f"round {r + 1}" for r in range(rounds))
    what = "failing (max_attempts=1)" if results.get("failing") else "no-op (or as labelled)"
    lines = [
        f"`{results['command']}`: {results['jobs']:,} {what} jobs, "
        "one `enqueue()` each in one "
        "transaction, drained by one `sqlq_worker --burst` at its defaults; jobs/s from the "
        "first `started_at` to the last `completed_at`. Floor: b100 (raw SQL, 100-row "
        f"`UPDATE ... RETURNING` claims), {results['floor_n']:,} jobs, in each round"
        + (
            "; on MariaDB 100-row `SELECT ... FOR UPDATE SKIP LOCKED` + `UPDATE ... WHERE id "
            "IN (...)` claims in one transaction, as django_sqlq's dialect there."
            if "my" in results["engines"]
            else "."
        ),
        "",
        f"| engine | code | {head} | median | ÷ floor (median of the rounds) |",
        "|---|---|" + "---|" * rounds + "---|---|",
    ]
    for db, runs in results["engines"].items():
        rates = {key: [r.get("rate") for r in runs[key]] for key in (a["key"], b["key"], "floor")}
        medians = {key: median(v) for key, v in rates.items()}
        for key in (a["key"], b["key"]):
            per_floor = [ratio(x, f) for x, f in zip(rates[key], rates["floor"], strict=True)]
            cells = " | ".join(fmt(x) for x in rates[key])
            lines.append(
                f"| {ENGINE[db]} | {name[key]} | {cells} | {fmt(medians[key])} "
                f"| {fmt_pct(median(per_floor))} |"
            )
        paired = [ratio(y, x) for x, y in zip(rates[a["key"]], rates[b["key"]], strict=True)]
        lines.append(
            f"| {ENGINE[db]} | **B / A** | "
            + " | ".join(fmt_ratio(x) for x in paired)
            + f" | **{fmt_ratio(ratio(medians[b['key']], medians[a['key']]))}** | |"
        )
        lines.append(
            f"| {ENGINE[db]} | floor b100 | "
            + " | ".join(fmt(x) for x in rates["floor"])
            + f" | {fmt(medians['floor'])} | |"
        )
    errors = [
        f"- {db}, {key}, round {i + 1}: {r['error']}"
        for db, runs in results["engines"].items()
        for key, rs in runs.items()
        for i, r in enumerate(rs)
        if "error" in r
    ]
    if errors:
        lines += ["", "Failed runs:", *errors]
    return "\n".join(lines) + "\n"


def measure(results, trees, dbs, json_path):
    """Round by round, engine by engine: A, B, then the floor; the JSON rewritten each time."""
    for db in dbs:
        setup = step(FLOOR, db, "setup")
        if "error" in setup:
            raise SystemExit(f"floor setup on {db}: {setup['error']}")
    for r in range(results["rounds"]):
        for db in dbs:
            runs = results["engines"][db]
            for t in trees:
                res = run_one(
                    db,
                    t["tree"],
                    results["jobs"],
                    results.get("failing", False),
                    kind=t.get("kind", "noop"),
                    sleepers=t.get("sleepers", 0),
                )
                runs[t["key"]].append(res)
                print(f"# round {r + 1}, {db}, {t['key']} {t['label']}: "
                      f"{fmt(res.get('rate'))} jobs/s {res.get('error', '')}",
                      file=sys.stderr, flush=True)  # fmt: skip
            res = step(FLOOR, db, "drain", "--n", str(results["floor_n"]), "--workers", "1")
            res["rate"] = res.get("drain_rate")
            runs["floor"].append(res)
            print(f"# round {r + 1}, {db}, floor: {fmt(res['rate'])} jobs/s",
                  file=sys.stderr, flush=True)  # fmt: skip
            with open(json_path, "w") as f:
                json.dump(results, f, indent=1)


def clean(scratch, dbs):
    """Drop this mode's databases and remove everything in its scratch directory but the logs."""
    for row in ("sqlq", "baseline"):
        if "pg" in dbs:
            with contextlib.suppress(Exception):
                common.drop_pg_db(common.pg_dbname(row))
        if "my" in dbs:
            with contextlib.suppress(Exception):
                common.drop_my_db(common.my_dbname(row))
    for entry in os.listdir(scratch):
        path = os.path.join(scratch, entry)
        if entry == "logs":
            continue
        if os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.unlink(path)


def main():
    ap = argparse.ArgumentParser(
        prog="benchmarks/run sidebyside", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument("--rev", action="append", default=[],
                    help="a git revision or WORKTREE; give it twice, A then B "
                    "(default: HEAD~1 and HEAD)")  # fmt: skip
    ap.add_argument("--jobs", type=int, default=20000, help="jobs per run (20000)")
    ap.add_argument("--rounds", type=int, default=3, help="runs of each revision (3)")
    ap.add_argument("--dbs", default="sqlite,pg",
                    help="engines: sqlite, pg, my (MariaDB: revisions that have its dialect, "
                    "django_sqlq/db/mysql.py)")  # fmt: skip
    ap.add_argument("--failing", action="store_true",
                    help="jobs whose handler raises (max_attempts=1)")  # fmt: skip
    kinds = ["noop", "steps3", "writes3", "steps3w"]
    ap.add_argument("--a-kind", default="noop", choices=kinds,
                    help="A's jobs; writes3 = three rows, each in a transaction")  # fmt: skip
    ap.add_argument("--b-kind", default="noop", choices=kinds,
                    help="B's jobs: steps3 = a no-op in three durable steps (with --rev "
                    "WORKTREE --rev WORKTREE: what three steps cost); steps3w = writes3's "
                    "rows, each in a step")  # fmt: skip
    ap.add_argument(
        "--b-sleepers",
        type=int,
        default=0,
        help="jobs asleep in B's database during its drain (durable sleeps)",
    )
    a = ap.parse_args()
    revs = a.rev or ["HEAD~1", "HEAD"]
    if len(revs) != 2:
        ap.error("give --rev twice (A, then B), or not at all for HEAD~1 against HEAD")
    dbs = [db for db in ("sqlite", "pg", "my") if db in a.dbs.split(",")]
    unknown = set(a.dbs.split(",")) - {"sqlite", "pg", "my", ""}
    if unknown or not dbs:
        ap.error(f"--dbs: sqlite, pg or my, not {a.dbs!r}")

    stamp = time.strftime("%Y%m%d-%H%M%S")
    os.makedirs(common.TMP, exist_ok=True)
    json_path = os.path.join(common.TMP, f"sidebyside-{stamp}.json")
    # Every scratch file of this run (trees, SQLite files, logs) lives in a directory of its
    # own: the children are told so through BENCH_TMP.
    scratch = os.path.join(common.TMP, f"sidebyside-{stamp}")
    os.makedirs(scratch)
    os.environ["BENCH_TMP"] = common.TMP = scratch
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        trees = []
        for i, rev in enumerate(revs):
            sha, tree = common.export_tree(rev, scratch)
            label = rev if rev == "WORKTREE" or sha.startswith(rev) else f"{rev} = {sha[:12]}"
            kind = (a.a_kind, a.b_kind)[i]
            if kind != "noop":
                label += f", {kind} jobs"
            if i == 1 and a.b_sleepers:
                label += f", {a.b_sleepers:,} jobs asleep"
            dialect = os.path.join(tree, "django_sqlq", "db", "mysql.py")
            if "my" in dbs and not os.path.exists(dialect):
                raise SystemExit(f"{label} has no MariaDB dialect (django_sqlq/db/mysql.py): "
                                 "it cannot run with --dbs my")  # fmt: skip
            trees.append({"key": "AB"[i], "rev": rev, "sha": sha, "label": label, "tree": tree,
                          "kind": kind,
                          "sleepers": a.b_sleepers if i == 1 else 0})  # fmt: skip
        results = {
            "started": stamp,
            "command": "benchmarks/run sidebyside " + shlex.join(sys.argv[1:]),
            "machine": machine(),
            "jobs": a.jobs,
            "failing": a.failing,
            "rounds": a.rounds,
            "floor_n": DEFAULT_DRAIN_N[FLOOR],
            "revs": trees,
            "engines": {db: {"A": [], "B": [], "floor": []} for db in dbs},
        }
        measure(results, trees, dbs, json_path)
        print(report(results))
        print(f"raw: {json_path}; logs: {scratch}/logs", file=sys.stderr)
    finally:
        clean(scratch, dbs)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "one":
        ap = argparse.ArgumentParser()
        ap.add_argument("one")
        ap.add_argument("--db", choices=["sqlite", "pg", "my"], required=True)
        ap.add_argument("--tree", required=True)
        ap.add_argument("--jobs", type=int, default=20000)
        ap.add_argument("--failing", action="store_true")
        ap.add_argument("--kind", default="noop")
        ap.add_argument("--sleepers", type=int, default=0)
        a = ap.parse_args()
        print(json.dumps(one(a.db, a.tree, a.jobs, a.failing, a.kind, a.sleepers)))
    else:
        main()
