"""Shared helpers for the benchmark: paths, PostgreSQL, MariaDB, process stats.

Started from the peer harness in shared/bench (common.py).
"""

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time

import psutil

HERE = os.path.dirname(os.path.abspath(__file__))
TMP = os.environ.get("BENCH_TMP", "/tmp/django_sqlq_bench")
ROOT = os.environ.get("BENCH_ROOT", os.path.dirname(HERE))
PG_HOST = os.environ.get("BENCH_PG_HOST", "127.0.0.1")
PG_PORT = os.environ.get("BENCH_PG_PORT", "5432")
PG_USER = os.environ.get("BENCH_PG_USER", "root")
# Database names are PG_PREFIX + row: `benchmarks/run sidebyside` uses its own prefix so that
# its drops never hit another run's databases.
PG_PREFIX = os.environ.get("BENCH_PG_PREFIX", "bench_")
# MariaDB (db key "my"): the same names as PostgreSQL's (PG_PREFIX + row), on this server.
MY_HOST = os.environ.get("BENCH_MY_HOST", "127.0.0.1")
MY_PORT = os.environ.get("BENCH_MY_PORT", "3306")
MY_USER = os.environ.get("BENCH_MY_USER", "root")
MY_PASSWORD = os.environ.get("BENCH_MY_PASSWORD", "")
# Engines by db key, as the tables name them.
ENGINE = {"sqlite": "SQLite", "pg": "PostgreSQL", "my": "MariaDB"}


def sqlite_path(peer):
    os.makedirs(TMP, exist_ok=True)
    return os.path.join(TMP, f"{peer}.sqlite3")


def pg_dbname(peer):
    return PG_PREFIX + peer.replace("-", "_")


def pg_dsn(dbname):
    return f"host={PG_HOST} port={PG_PORT} user={PG_USER} dbname={dbname}"


def ensure_pg_db(dbname):
    import psycopg

    with psycopg.connect(pg_dsn("postgres"), autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (dbname,)).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{dbname}"')


def drop_pg_db(dbname):
    import psycopg

    with psycopg.connect(pg_dsn("postgres"), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')


def my_dbname(peer):
    name = pg_dbname(peer)
    if not name.startswith("bench_"):
        # The harness creates and drops these: never anything but its own.
        raise SystemExit(f"MariaDB database {name!r}: the benchmarks' names start with bench_")
    return name


def my_connect(dbname=None, autocommit=False):
    """A MySQLdb connection to the MariaDB server (to ``dbname`` if given), utf8mb4, at READ
    COMMITTED as Django's mysql backend (and so django_sqlq) runs."""
    import MySQLdb

    kwargs = {"db": dbname} if dbname else {}
    conn = MySQLdb.connect(
        host=MY_HOST, port=int(MY_PORT), user=MY_USER, password=MY_PASSWORD,
        charset="utf8mb4", autocommit=autocommit, connect_timeout=10, **kwargs,
    )  # fmt: skip
    with conn.cursor() as cur:
        cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
    return conn


def ensure_my_db(dbname):
    conn = my_connect(autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE IF NOT EXISTS `{dbname}` CHARACTER SET utf8mb4")
    finally:
        conn.close()


def drop_my_db(dbname):
    conn = my_connect(autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{dbname}`")
    finally:
        conn.close()


def my_version():
    conn = my_connect(autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT VERSION()")
            return cur.fetchone()[0]
    finally:
        conn.close()


def log_path(name):
    d = os.path.join(TMP, "logs")
    os.makedirs(d, exist_ok=True)
    return os.path.join(d, f"{name}-{int(time.time() * 1000)}.log")


def spawn(argv, env_extra, log_name):
    """Start a worker in its own session so that we can stop exactly what we started."""
    env = dict(os.environ)
    env["PYTHONPATH"] = HERE + os.pathsep + env.get("PYTHONPATH", "")
    env["PYTHONUNBUFFERED"] = "1"
    env.update(env_extra)
    log = open(log_path(log_name), "wb")  # noqa: SIM115 - closed by stop()
    p = subprocess.Popen(
        argv,
        cwd=HERE,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    p._bench_log = log
    return p


def stop(procs, timeout=10.0):
    """SIGTERM the processes we spawned, then SIGKILL their own process groups."""
    for p in procs:
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for p in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(max(0.1, deadline - time.monotonic()))
    for p in procs:
        # Kill whatever is left in the session we created for this worker (our own
        # children only: the group id is the pid of a process we started).
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(p.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(5)
        p._bench_log.close()


def _vm_hwm_kb(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def tree(procs):
    out = []
    for p in procs:
        try:
            root = psutil.Process(p.pid)
            out.append(root)
            out.extend(root.children(recursive=True))
        except psutil.NoSuchProcess:
            pass
    return out


def cpu_seconds(procs):
    total = 0.0
    for pr in tree(procs):
        try:
            t = pr.cpu_times()
            total += t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return total


def mem_stats(procs):
    """Peak RSS (VmHWM) of the first spawned process and summed over the whole tree."""
    main = _vm_hwm_kb(procs[0].pid) / 1024 if procs else 0
    members = tree(procs)
    total = sum(_vm_hwm_kb(pr.pid) for pr in members) / 1024
    return {"main_rss_mb": round(main, 1), "tree_rss_mb": round(total, 1), "nprocs": len(members)}


def percentile(values, p):
    v = sorted(values)
    if not v:
        return float("nan")
    k = (len(v) - 1) * p / 100.0
    lo, hi = int(k), min(int(k) + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def py():
    return sys.executable


def export_tree(rev, parent=TMP):
    """Put django_sqlq as of git revision ``rev`` (a commit, a branch, ``HEAD~1``...) into a
    directory of its own under ``parent``, with ``git archive``; ``WORKTREE`` copies this
    checkout's django_sqlq/ as it is, uncommitted changes included. Returns (the full commit
    id or "WORKTREE", the directory to put first on PYTHONPATH)."""
    if rev == "WORKTREE":
        dest = os.path.join(parent, "src-worktree")
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(
            os.path.join(ROOT, "django_sqlq"),
            os.path.join(dest, "django_sqlq"),
            ignore=shutil.ignore_patterns("__pycache__"),
        )
        return rev, dest
    sha = subprocess.run(
        ["git", "-C", ROOT, "rev-parse", "--verify", f"{rev}^{{commit}}"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    dest = os.path.join(parent, f"src-{sha[:12]}")
    if not os.path.isdir(os.path.join(dest, "django_sqlq")):
        os.makedirs(dest, exist_ok=True)
        archive = subprocess.run(
            ["git", "-C", ROOT, "archive", sha, "django_sqlq"], capture_output=True, check=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", dest], input=archive, check=True)
    return sha, dest


def export_revision(rev):
    """Put django_sqlq as of git revision ``rev`` (exported with git archive into TMP) first
    on this process's and every child's PYTHONPATH. Returns the full commit id."""
    sha, dest = export_tree(rev)
    os.environ["PYTHONPATH"] = dest + os.pathsep + os.environ.get("PYTHONPATH", "")
    sys.path.insert(0, dest)
    return sha
