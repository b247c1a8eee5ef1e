"""Where django_sqlq's time goes: `benchmarks/run profile`.

    python profile_worker.py [--dbs sqlite,pg] [--n 50000] [--concurrency 1] [--idle]
                             [--rate 250] [--top 25] [--enqueue]

Fills the queue with N no-op jobs (bulk_enqueue), starts `manage.py sqlq_worker --burst -v 0`,
attaches py-spy (a sampling profiler outside the process, every thread) once the first job is
done, so start-up stays out, until the worker exits, and prints the
functions with the most samples: "self" (the sampled frame itself) and "inclusive" (anywhere
on the stack), per thread and over all threads. Without --idle only samples of running
threads count (CPU); with --idle also threads waiting for the database or a lock (wall
time). py-spy's raw collapsed stacks stay in $BENCH_TMP/profile-*.txt for a flame graph.

With --enqueue it profiles the enqueue side instead: N calls of enqueue() each in its own
transaction.atomic() (as the benchmark's "enqueue 1/txn" does), under cProfile in this
process, and prints the top functions by own and by cumulative time.
"""

import argparse
import collections
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common

FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^():]*?)(?::(?P<line>\d+))?\)$")


def short_file(path):
    for marker in ("site-packages/", "/lib/python3"):
        if marker in path:
            return path.split(marker, 1)[1]
    if common.ROOT and path.startswith(common.ROOT):
        return os.path.relpath(path, common.ROOT)
    return path


def frame_key(frame):
    m = FRAME.match(frame)
    if not m:
        return frame
    return f"{m['func']} ({short_file(m['file'])})"


def parse(path):
    """Collapsed stacks -> list of (thread, [frames root first], samples)."""
    stacks = []
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                continue
            stack, _, count = line.rpartition(" ")
            frames = stack.split(";")
            thread = frames[0] if frames and frames[0].startswith(("thread", "process")) else "?"
            if thread != "?":
                frames = frames[1:]
            while frames and frames[0].startswith(("process", "thread")):
                frames = frames[1:]
            stacks.append((thread, frames, int(count)))
    return stacks


def summarise(stacks, top):
    total = sum(c for _, _, c in stacks) or 1
    by_thread = collections.Counter()
    own = collections.Counter()
    incl = collections.Counter()
    for thread, frames, count in stacks:
        by_thread[re.sub(r"\s*\(0x[0-9A-Fa-f]+\)", "", thread)] += count
        if frames:
            own[frame_key(frames[-1])] += count
        for key in {frame_key(fr) for fr in frames}:
            incl[key] += count
    out = [f"{total:,} samples", "", "| thread | share |", "|---|---|"]
    out += [f"| {t} | {c / total:.0%} |" for t, c in by_thread.most_common()]
    out += ["", f"Top {top} functions by own samples:", "", "| function | own |", "|---|---|"]
    out += [f"| `{k}` | {c / total:.1%} |" for k, c in own.most_common(top)]
    out += ["", f"Top {top} functions by inclusive samples:", "",
            "| function | inclusive |", "|---|---|"]  # fmt: skip
    out += [f"| `{k}` | {c / total:.1%} |" for k, c in incl.most_common(top)]
    if any(k.startswith("wait (psycopg/") for k in own):
        out += ["", "Note: `wait (psycopg/connection.py)` is psycopg blocking on the server's "
                "answer (or, in the sqlq-listen thread, on a notification); py-spy counts it "
                "as active, but it burns no CPU."]  # fmt: skip
    return "\n".join(out) + "\n"


def fill(peer, n, kind):
    """N jobs of ``kind`` (sidebyside.py's kinds; noop by the peer's own fill)."""
    if kind == "noop":
        peer.fill(n)
        return
    from django.db import connection

    from django_sqlq import bulk_enqueue

    if kind in ("writes3", "steps3w"):
        with connection.cursor() as cursor:
            cursor.execute("DROP TABLE IF EXISTS bench_write")
            cursor.execute("CREATE TABLE bench_write (job bigint NOT NULL, step varchar(20))")
    bulk_enqueue(kind, [{"i": i} for i in range(n)])


def profile(db, n, concurrency, idle, rate, top, kind="noop"):
    from peers.sqlq import Peer

    peer = Peer(db, concurrency=concurrency)
    subprocess.run(
        [sys.executable, os.path.join(common.HERE, "peer_cli.py"), "sqlq", db, "setup"],
        check=True, cwd=common.HERE, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    peer.reset()
    fill(peer, n, kind)
    out = os.path.join(common.TMP, f"profile-{db}-{time.strftime('%Y%m%d-%H%M%S')}.txt")
    pyspy = os.path.join(os.path.dirname(sys.executable), "py-spy")
    # Start the worker, attach py-spy once it has finished its first job (so start-up and
    # imports stay out of the profile), and let py-spy run until the burst worker exits.
    argv = peer.manage("sqlq_worker", "--burst", "-v", "0", "--concurrency", str(concurrency))
    proc = common.spawn(argv, peer.worker_env(1), f"sqlq-{db}-profile")
    try:
        deadline = time.monotonic() + 60
        while peer.done_count() == 0 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.005)
        first = peer.done_count()
        spy = [pyspy, "record", "-r", str(rate), "-f", "raw", "--threads", "-o", out,
               "--pid", str(proc.pid)]  # fmt: skip
        if idle:
            spy.append("--idle")
        t = time.perf_counter()
        r = subprocess.run(spy, capture_output=True, text=True)
        wall = time.perf_counter() - t
        proc.wait(60)
    finally:
        common.stop([proc])
    done = peer.done_count()
    head = (f"### Profile: {db}, {done - first:,} {kind} jobs profiled ({n:,} queued), "
            f"`sqlq_worker --burst --concurrency {concurrency}`, {wall:.1f} s under py-spy, "
            f"{(done - first) / wall:,.0f} jobs/s ({'wall-time' if idle else 'CPU'} samples "
            f"at {rate} Hz)\n\n")  # fmt: skip
    if not os.path.exists(out) or os.path.getsize(out) == 0:
        return head + f"py-spy failed (rc={r.returncode}):\n\n```\n{r.stderr[-2000:]}\n```\n"
    return head + summarise(parse(out), top) + f"\nRaw stacks: {out}\n"


def profile_enqueue(db, n, top):
    import cProfile
    import io
    import pstats

    from peers.sqlq import Peer

    subprocess.run(
        [sys.executable, os.path.join(common.HERE, "peer_cli.py"), "sqlq", db, "setup"],
        check=True, cwd=common.HERE, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    peer = Peer(db)
    peer.reset()
    peer.enqueue_one(-1)  # warm: imports, connection, cached SQL
    prof = cProfile.Profile()
    t = time.perf_counter()
    prof.enable()
    for i in range(n):
        peer.enqueue_one(i)
    prof.disable()
    wall = time.perf_counter() - t
    out = [f"### Profile: {db}, {n:,} x enqueue() in its own atomic(), {n / wall:,.0f} jobs/s "
           "under cProfile", ""]  # fmt: skip
    for key in ("tottime", "cumulative"):
        buf = io.StringIO()
        stats = pstats.Stats(prof, stream=buf)
        stats.strip_dirs().sort_stats(key).print_stats(top)
        body = buf.getvalue()
        body = body[body.find("ncalls") :] if "ncalls" in body else body
        out += [f"By {key}:", "", "```", body.rstrip(), "```", ""]
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(
        prog="benchmarks/run profile", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument("--dbs", default="sqlite,pg")
    ap.add_argument("--n", type=int, default=50000)
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--idle", action="store_true", help="count waiting threads too (wall time)")
    ap.add_argument("--rate", type=int, default=250, help="samples per second (250)")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--enqueue", action="store_true", help="profile enqueue() instead")
    ap.add_argument("--kind", default="noop", choices=["noop", "steps3", "writes3", "steps3w"],
                    help="the jobs drained (benchmarks/sidebyside.py's kinds)")  # fmt: skip
    ap.add_argument("--rev", default=None, help="profile django_sqlq as of this git revision")
    a = ap.parse_args()
    if a.rev:
        common.export_revision(a.rev)
    os.makedirs(common.TMP, exist_ok=True)
    dbs = a.dbs.split(",")
    if len(dbs) > 1:
        # Django is set up once per process, for one database: one child per database.
        argv = sys.argv[1:]
        rest = [
            arg
            for i, arg in enumerate(argv)
            if not arg.startswith(("--dbs", "--rev"))
            and (i == 0 or argv[i - 1] not in ("--dbs", "--rev"))
        ]
        for db in dbs:
            subprocess.run([sys.executable, os.path.abspath(__file__), "--dbs", db, *rest])
        return
    for db in dbs:
        if a.enqueue:
            print(profile_enqueue(db, a.n, a.top), flush=True)
        else:
            print(profile(db, a.n, a.concurrency, a.idle, a.rate, a.top, a.kind), flush=True)


if __name__ == "__main__":
    main()
