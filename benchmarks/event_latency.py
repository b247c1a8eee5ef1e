"""Pickup of a durable wait's event against pickup of a new job (issue 25's target: "an
emitted event reaches its waiter with pickup latency as for a new job").

    benchmarks/run event-latency [--jobs 30] [--rounds 3] [--dbs sqlite,pg]

Per engine and round, one default ``sqlq_worker``, idle between probes: ``latency`` (a job
enqueued, from its commit to its handler running) then ``event-latency`` (a job waiting in
``wait_for_event``, from the commit of ``emit_event`` to its handler running on). Prints
the p50/p95 of each and their ratio, per round and the medians.
"""

import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from runner import fmt, step


def main():
    ap = argparse.ArgumentParser(prog="benchmarks/run event-latency")
    ap.add_argument("--jobs", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dbs", default="sqlite,pg")
    a = ap.parse_args()
    rows = [
        "| engine | probe | p50 ms (rounds) | p95 ms (rounds) | median p50 |",
        "|---|---|---|---|---|",
    ]
    for db in a.dbs.split(","):
        got = {"latency": [], "event-latency": []}
        setup = step("sqlq", db, "setup")
        if "error" in setup:
            raise SystemExit(f"setup on {db}: {setup['error']}")
        for r in range(a.rounds):
            for op in got:
                res = step("sqlq", db, op, "--jobs", str(a.jobs))
                got[op].append(res)
                print(f"# round {r + 1}, {db}, {op}: {res}", file=sys.stderr, flush=True)
        for op, runs in got.items():
            p50 = [x.get("p50_ms") for x in runs]
            p95 = [x.get("p95_ms") for x in runs]
            ok = [x for x in p50 if x is not None]
            rows.append(
                f"| {db} | {'new job' if op == 'latency' else 'emitted event'} | "
                f"{', '.join(fmt(x, 1) for x in p50)} | {', '.join(fmt(x, 1) for x in p95)} | "
                f"{fmt(statistics.median(ok), 1) if ok else '-'} |"
            )
    print("\n".join(rows))


if __name__ == "__main__":
    main()
