"""The worker's output and poolers (issue 10), each against its baseline in the same run:

- drain rate of `sqlq_worker` at its default verbosity against `-v 0`, both engines
  (the default must cost little: target >= 0.9x);
- pickup latency (p50/p95, an idle worker, sporadic enqueues) on PostgreSQL directly,
  through a PgBouncer in transaction mode with `SQLQ["LISTEN_DATABASE"]` naming a direct
  alias (target p50 < 10 ms), and through the same PgBouncer without it (the polling
  fallback, for reference).

    benchmarks/run worker-shapes [--n 20000] [--repeats 3] [--jobs 50] [--dbs sqlite,pg]

Needs Debian's pgbouncer for the pooler rows (skipped without it). Raw results go to
$BENCH_TMP/worker-shapes-<time>.json; the tables are printed.
"""

import argparse
import contextlib
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import common
from runner import fmt, step


@contextlib.contextmanager
def pgbouncer():
    """A PgBouncer in transaction mode in front of the benchmark's PostgreSQL (any database
    name), on a free port of its own; yields the port, or None if pgbouncer is missing."""
    binary = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
    if not os.path.exists(binary):
        yield None
        return
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    directory = tempfile.mkdtemp(prefix="bench-pgbouncer-")
    with open(os.path.join(directory, "userlist.txt"), "w") as f:
        f.write(f'"{common.PG_USER}" ""\n')
    with open(os.path.join(directory, "pgbouncer.ini"), "w") as f:
        f.write(
            "[databases]\n"
            f"* = host={common.PG_HOST} port={common.PG_PORT}\n"
            "[pgbouncer]\n"
            f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
            f"auth_type = trust\nauth_file = {directory}/userlist.txt\n"
            "pool_mode = transaction\nmax_client_conn = 200\ndefault_pool_size = 20\n"
            "ignore_startup_parameters = extra_float_digits,options\n"
        )
    kwargs = {}
    if os.geteuid() == 0:  # pgbouncer refuses to run as root
        shutil.chown(directory, "postgres")
        kwargs = {"user": "postgres", "group": "postgres"}
    log = open(common.log_path("pgbouncer"), "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        [binary, os.path.join(directory, "pgbouncer.ini")],
        stdout=log,
        stderr=subprocess.STDOUT,
        **kwargs,
    )
    try:
        deadline = time.monotonic() + 15
        while True:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"pgbouncer did not start; see {log.name}")
            time.sleep(0.05)
        yield port
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()
        shutil.rmtree(directory, ignore_errors=True)


@contextlib.contextmanager
def env(**values):
    old = {k: os.environ.get(k) for k in values}
    os.environ.update({k: v for k, v in values.items() if v is not None})
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def rate(result):
    return result.get("drain_rate_db") or result.get("drain_rate")


def main():  # noqa: C901 (the whole run, step by step, read top to bottom)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=20000, help="jobs per drain (20000)")
    ap.add_argument("--repeats", type=int, default=3, help="drains per verbosity (3)")
    ap.add_argument("--jobs", type=int, default=50, help="pickup probes per latency row (50)")
    ap.add_argument("--dbs", default="sqlite,pg")
    a = ap.parse_args()
    dbs = [db for db in ("sqlite", "pg") if db in a.dbs.split(",")]
    os.makedirs(common.TMP, exist_ok=True)
    results = {"command": "benchmarks/run worker-shapes " + " ".join(sys.argv[1:])}

    # Default verbosity against -v 0: alternating drains of one table, same process shape.
    drains = {}
    for db in dbs:
        setup = step("sqlq", db, "setup")
        if "error" in setup:
            raise SystemExit(f"setup on {db}: {setup['error']}")
        runs = {"default": [], "-v 0": [], "-v 2": []}
        for r in range(a.repeats):
            for label, peer in (("default", "sqlq"), ("-v 0", "sqlq-v0"), ("-v 2", "sqlq-v2")):
                res = step(peer, db, "drain", "--n", str(a.n), "--workers", "1")
                runs[label].append(res)
                print(f"# {db} drain {label} run {r + 1}: {rate(res)}", file=sys.stderr)
        drains[db] = runs
    results["drains"] = drains

    # Pickup latency on PostgreSQL: direct, through PgBouncer with and without the alias.
    latency = {}
    if "pg" in dbs:
        step("sqlq", "pg", "setup")
        latency["direct"] = step("sqlq", "pg", "latency", "--jobs", str(a.jobs))
        print(f"# latency direct: {latency['direct']}", file=sys.stderr)
        with pgbouncer() as port:
            if port is None:
                print("# pgbouncer not installed: no pooler rows", file=sys.stderr)
            else:
                for label, listen in (
                    ("PgBouncer transaction mode, LISTEN_DATABASE", '"direct"'),
                    ("PgBouncer transaction mode, no LISTEN_DATABASE", None),
                ):
                    with env(BENCH_PGBOUNCER_PORT=str(port), BENCH_SQLQ_LISTEN_DATABASE=listen):
                        latency[label] = step("sqlq", "pg", "latency", "--jobs", str(a.jobs))
                    print(f"# latency {label}: {latency[label]}", file=sys.stderr)
    results["latency"] = latency

    lines = [
        "| engine | drain, default verbosity (jobs/s) | drain, `-v 0` | default / `-v 0` "
        "| drain, `-v 2` (a line per job) | `-v 2` / `-v 0` |",
        "|---|---|---|---|---|---|",
    ]
    for db, runs in drains.items():
        default, quiet, loud = (
            statistics.median(filter(None, map(rate, runs[k])))
            for k in ("default", "-v 0", "-v 2")
        )
        lines.append(
            f"| {'SQLite' if db == 'sqlite' else 'PostgreSQL'} | {fmt(default)} | "
            f"{fmt(quiet)} | {default / quiet:.2f}x | {fmt(loud)} | {loud / quiet:.2f}x |"
        )
    if latency:
        lines += ["", "| PostgreSQL pickup | p50 (ms) | p95 (ms) |", "|---|---|---|"]
        for label, res in latency.items():
            lines.append(
                f"| {label} | {fmt(res.get('p50_ms'), 1)} | {fmt(res.get('p95_ms'), 1)} |"
            )
    md = "\n".join(lines)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    with open(os.path.join(common.TMP, f"worker-shapes-{stamp}.json"), "w") as f:
        json.dump(results, f, indent=1)
    print(results["command"])
    print(md)


if __name__ == "__main__":
    main()
