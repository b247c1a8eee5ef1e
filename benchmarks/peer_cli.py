"""One measurement step for one peer on one database; prints one JSON line.

    python peer_cli.py PEER DB setup
    python peer_cli.py PEER DB enqueue --n 10000
    python peer_cli.py PEER DB enqueue-paired --n 10000   # interleaved with the b1 floor
    python peer_cli.py PEER DB drain --n 10000 --workers 1
    python peer_cli.py PEER DB latency --jobs 50
    python peer_cli.py PEER DB trace          # worker's SQL (Django peers)

DB: sqlite | pg | my (MariaDB: sqlq, dtdb and the baseline floors only)

PEER: sqlq | sqlq-c8 | sqlq-v0 | sqlq-v2 | dtdb | djq2 | procrastinate | huey | baseline-b1 |
baseline-b100 | baseline-b100e

Started from the peer harness in shared/bench (peer_cli.py); django_sqlq added.
"""

import argparse
import json
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common

PEERS = {
    "sqlq": ("peers.sqlq", {"concurrency": 1}),
    "sqlq-c8": ("peers.sqlq", {"concurrency": 8}),
    "sqlq-v0": ("peers.sqlq", {"verbosity": 0}),
    "sqlq-v2": ("peers.sqlq", {"verbosity": 2}),
    "dtdb": ("peers.dtdb", {}),
    "djq2": ("peers.djq2", {}),
    "procrastinate": ("peers.procrastinate", {}),
    "huey": ("peers.huey", {}),
    "baseline-b1": ("peers.baseline", {"batch": 1, "complete": "each"}),
    "baseline-b100": ("peers.baseline", {"batch": 100, "complete": "batch"}),
    "baseline-b100e": ("peers.baseline", {"batch": 100, "complete": "each"}),
}


def get_peer(name, db):
    import importlib

    mod, kwargs = PEERS[name]
    return importlib.import_module(mod).Peer(db, **kwargs)


def op_enqueue(peer, n):
    out = {}
    peer.reset()
    t = time.perf_counter()
    for i in range(n):
        peer.enqueue_one(i)
    out["enqueue_rate"] = n / (time.perf_counter() - t)
    if peer.has_bulk:
        peer.reset()
        t = time.perf_counter()
        peer.enqueue_bulk(n)
        out["bulk_rate"] = n / (time.perf_counter() - t)
        out["bulk_kind"] = peer.bulk_kind
    peer.reset()
    return out


def op_enqueue_paired(peer, n, blocks=10):
    """One-per-transaction enqueue of this peer and of the batch=1 floor, interleaved in
    blocks (ABBA order) in one process, so that both see the same disk and the same
    neighbours: on a shared machine the ratio is far steadier than two separate runs'."""
    from peers.baseline import Peer as Floor

    floor = Floor(peer.db)
    floor.setup()
    peer.reset()
    per = max(1, n // blocks)
    spent = {"ours": 0.0, "floor": 0.0}
    ratios = []
    for b in range(blocks):
        order = [("floor", floor), ("ours", peer)]
        if b % 2:
            order.reverse()
        block = {}
        for key, p in order:
            t = time.perf_counter()
            for i in range(per):
                p.enqueue_one(i)
            block[key] = time.perf_counter() - t
            spent[key] += block[key]
        ratios.append(block["floor"] / block["ours"])
    peer.reset()
    floor.reset()
    return {
        "paired_rate": per * blocks / spent["ours"],
        "paired_floor_rate": per * blocks / spent["floor"],
        "paired_ratio": spent["floor"] / spent["ours"],
        "paired_block_ratios": ratios,
    }


def op_drain(peer, n, workers, timeout, tick=0.02):
    peer.reset()
    peer.fill(n)
    label = f"{peer.name}-{peer.db}-drain{workers}"
    procs = [
        common.spawn(argv, peer.worker_env(workers), label) for argv in peer.worker_argvs(workers)
    ]
    t_spawn = time.perf_counter()
    first_t = first_c = cpu_first = None
    done = 0
    died = None
    try:
        while True:
            done = peer.done_count()
            now = time.perf_counter()
            if first_t is None and done > 0:
                first_t, first_c = now, done
                cpu_first = common.cpu_seconds(procs)
            if done >= n or now - t_spawn > timeout:
                break
            dead = [p for p in procs if p.poll() is not None]
            if dead:
                died = f"worker exited rc={dead[0].returncode}"
                break
            time.sleep(tick)
        end = now
        mem = common.mem_stats(procs)
        cpu_end = common.cpu_seconds(procs)
    finally:
        common.stop(procs)
    out = {
        "workers": workers,
        "n": n,
        "done": done,
        "complete": done >= n,
        "startup_s": (first_t - t_spawn) if first_t else None,
        **mem,
    }
    if died:
        out["error"] = died
    if first_t is not None and end > first_t and done > first_c:
        out["drain_rate"] = (done - first_c) / (end - first_t)
        out["cpu_ms_per_job"] = 1000 * (cpu_end - cpu_first) / (done - first_c)
    else:
        out["drain_rate"] = None
    if hasattr(peer, "completion_span"):
        # The same rate by the database's completed_at stamps (no polling tick).
        count, span = peer.completion_span()
        if count > 1 and span > 0:
            out["drain_rate_db"] = (count - 1) / span
    return out


def _wait_mark(path, pos, key, timeout):
    deadline = time.monotonic() + timeout
    buf = ""
    while time.monotonic() < deadline:
        if os.path.exists(path):
            with open(path) as f:
                f.seek(pos)
                buf += f.read()
                pos = f.tell()
            for line in buf.splitlines():
                k, _, ts = line.partition(" ")
                if k == key:
                    return float(ts), pos
        time.sleep(0.002)
    return None, pos


def op_latency(peer, jobs, seed=1):
    rnd = random.Random(seed)
    peer.reset()
    mark_file = os.path.join(common.TMP, f"marks-{peer.name}-{peer.db}-{os.getpid()}.txt")
    if os.path.exists(mark_file):
        os.unlink(mark_file)
    env = dict(peer.worker_env(1), BENCH_MARK_FILE=mark_file)
    procs = [
        common.spawn(argv, env, f"{peer.name}-{peer.db}-latency") for argv in peer.worker_argvs(1)
    ]
    lat = []
    try:
        peer.enqueue_mark("warmup")
        ts, pos = _wait_mark(mark_file, 0, "warmup", 90)
        if ts is None:
            return {"error": "worker never ran the warm-up job"}
        time.sleep(1.0)
        cpu0, w0 = common.cpu_seconds(procs), time.perf_counter()
        for k in range(jobs):
            time.sleep(rnd.uniform(0.2, 1.0))  # sporadic arrivals, idle worker
            key = f"j{k}"
            peer.enqueue_mark(key)
            t_enq = time.time()  # after commit: the job is visible from here on
            ts, pos = _wait_mark(mark_file, pos, key, 30)
            if ts is None:
                return {"error": f"job {key} not picked up within 30 s", "lat": lat}
            lat.append(max(0.0, ts - t_enq))
        cpu_pct = 100 * (common.cpu_seconds(procs) - cpu0) / (time.perf_counter() - w0)
        mem = common.mem_stats(procs)
    finally:
        common.stop(procs)
    ms = [x * 1000 for x in lat]
    return {
        "jobs": jobs,
        "p50_ms": common.percentile(ms, 50),
        "p95_ms": common.percentile(ms, 95),
        "max_ms": max(ms),
        "trickle_cpu_pct": cpu_pct,
        "idle_main_rss_mb": mem["main_rss_mb"],
    }


def op_event_latency(peer, jobs, seed=2):
    """django_sqlq's durable waits: a job waits (``wait_for_event``, no thread held), the
    harness emits its event after a pause (``emit_event`` in a transaction), and the latency
    is from the commit to the job running on, by the same probe as ``op_latency``."""
    rnd = random.Random(seed)
    peer.reset()  # Django is set up from here on
    from django.db import transaction

    from django_sqlq import emit_event, enqueue
    from django_sqlq.models import Job

    mark_file = os.path.join(common.TMP, f"marks-event-{peer.db}-{os.getpid()}.txt")
    if os.path.exists(mark_file):
        os.unlink(mark_file)
    env = dict(peer.worker_env(1), BENCH_MARK_FILE=mark_file)
    procs = [common.spawn(argv, env, f"sqlq-{peer.db}-event") for argv in peer.worker_argvs(1)]
    lat = []
    try:
        peer.enqueue_mark("warmup")
        ts, pos = _wait_mark(mark_file, 0, "warmup", 90)
        if ts is None:
            return {"error": "worker never ran the warm-up job"}
        for k in range(jobs):
            key = f"e{os.getpid()}-{k}"  # events outlive the jobs table's reset: keys of its own
            job = enqueue("wait_mark", {"key": key})
            deadline = time.monotonic() + 30
            while not Job.objects.filter(pk=job.pk, status="scheduled").exists():
                if time.monotonic() > deadline:
                    return {"error": f"job {key} never waited", "lat": lat}
                time.sleep(0.005)
            time.sleep(rnd.uniform(0.2, 1.0))  # the worker idle again
            with transaction.atomic():
                emit_event(key)
            t_emit = time.time()  # after commit
            ts, pos = _wait_mark(mark_file, pos, key, 30)
            if ts is None:
                return {"error": f"job {key} not woken within 30 s", "lat": lat}
            lat.append(max(0.0, ts - t_emit))
    finally:
        common.stop(procs)
    ms = [x * 1000 for x in lat]
    return {
        "jobs": jobs,
        "p50_ms": common.percentile(ms, 50),
        "p95_ms": common.percentile(ms, 95),
        "max_ms": max(ms),
    }


def op_trace(peer, jobs=2):
    """Run one worker with Django SQL logging on; return the path of its log."""
    peer.reset()
    peer.fill(jobs)
    env = dict(peer.worker_env(1), BENCH_SQL_LOG="1")
    procs = [
        common.spawn(argv, env, f"{peer.name}-{peer.db}-trace") for argv in peer.worker_argvs(1)
    ]
    try:
        deadline = time.monotonic() + 60
        while peer.done_count() < jobs and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(2.5)  # idle: show the polling query
    finally:
        common.stop(procs)
    return {"log": procs[0]._bench_log.name}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("peer", choices=sorted(PEERS))
    ap.add_argument("db", choices=["sqlite", "pg", "my"])
    ap.add_argument(
        "op",
        choices=[
            "setup",
            "enqueue",
            "enqueue-paired",
            "drain",
            "latency",
            "event-latency",
            "trace",
        ],
    )
    ap.add_argument("--n", type=int, default=10000)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=50)
    ap.add_argument("--timeout", type=float, default=300)
    a = ap.parse_args()
    peer = get_peer(a.peer, a.db)
    peer.name_key = a.peer
    if a.op == "setup":
        peer.setup()
        out = {"ok": True}
    elif a.op == "enqueue":
        out = op_enqueue(peer, a.n)
    elif a.op == "enqueue-paired":
        out = op_enqueue_paired(peer, a.n)
    elif a.op == "drain":
        out = op_drain(peer, a.n, a.workers, a.timeout)
    elif a.op == "latency":
        out = op_latency(peer, a.jobs)
    elif a.op == "event-latency":
        out = op_event_latency(peer, a.jobs)
    else:
        out = op_trace(peer)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
