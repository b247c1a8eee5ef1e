"""The "physical limit": the tightest plain-Python queue loop on the same database.

SQLite (stdlib sqlite3, WAL, synchronous=NORMAL) and PostgreSQL (psycopg 3,
FOR UPDATE SKIP LOCKED, LISTEN/NOTIFY for idle wake-up). MariaDB (MySQLdb, READ COMMITTED),
which has no UPDATE ... RETURNING and no partial index, gets the claim django_sqlq's dialect
must use there (django_sqlq/db/mysql.py): in one transaction a locking read
``SELECT ... WHERE status = 'pending' AND queue = ? AND scheduled_at <= now ORDER BY priority
DESC, scheduled_at, id LIMIT B FOR UPDATE SKIP LOCKED`` on the index (status, queue, priority
DESC, scheduled_at, id), then ``UPDATE ... WHERE id IN (...)``, commit; the completion one
``UPDATE ... WHERE id IN (...)`` (or one per job), and a 10 ms poll when idle.

    python -m peers.baseline worker --db sqlite|pg|my --batch B [--complete each|batch]

Started from the peer harness in shared/bench.
"""

import argparse
import json
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import common
from benchsite.mark import mark_start

from peers import Peer as BasePeer

CHANNEL = "sqlq_bench"


def noop(i):  # noqa: ARG001 (a task)
    return None


TASKS = {"noop": noop, "mark": mark_start}

SQLITE_DDL = [
    "CREATE TABLE IF NOT EXISTS jobs ("
    " id INTEGER PRIMARY KEY AUTOINCREMENT,"
    " status TEXT NOT NULL DEFAULT 'pending',"
    " priority INTEGER NOT NULL DEFAULT 0,"
    " task TEXT NOT NULL, args TEXT NOT NULL,"
    " created_at REAL NOT NULL, started_at REAL, finished_at REAL)",
    "CREATE INDEX IF NOT EXISTS jobs_pending ON jobs (priority DESC, id) WHERE status = 'pending'",
]
PG_DDL = [
    "CREATE TABLE IF NOT EXISTS jobs ("
    " id bigserial PRIMARY KEY,"
    " status text NOT NULL DEFAULT 'pending',"
    " priority integer NOT NULL DEFAULT 0,"
    " task text NOT NULL, args jsonb NOT NULL,"
    " created_at timestamptz NOT NULL DEFAULT now(),"
    " started_at timestamptz, finished_at timestamptz)",
    "CREATE INDEX IF NOT EXISTS jobs_pending ON jobs (priority DESC, id) WHERE status = 'pending'",
]

# MariaDB: queue and scheduled_at as the claim index needs them; status and queue compare
# byte for byte as django_sqlq's columns do (utf8mb4_nopad_bin, migration 0015).
MY_DDL = [
    "CREATE TABLE IF NOT EXISTS jobs ("
    " id bigint NOT NULL AUTO_INCREMENT PRIMARY KEY,"
    " status varchar(20) COLLATE utf8mb4_nopad_bin NOT NULL DEFAULT 'pending',"
    " queue varchar(255) COLLATE utf8mb4_nopad_bin NOT NULL DEFAULT 'default',"
    " priority integer NOT NULL DEFAULT 0,"
    " scheduled_at datetime(6) NOT NULL DEFAULT UTC_TIMESTAMP(6),"
    " task varchar(255) NOT NULL, args json NOT NULL,"
    " created_at datetime(6) NOT NULL DEFAULT UTC_TIMESTAMP(6),"
    " started_at datetime(6), finished_at datetime(6),"
    " KEY jobs_claim (status, queue, priority DESC, scheduled_at, id)"
    ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4",
]

SQLITE_INSERT = "INSERT INTO jobs (task, args, created_at) VALUES (?, ?, ?)"
SQLITE_CLAIM = (
    "UPDATE jobs SET status = 'running', started_at = ? WHERE id IN ("
    " SELECT id FROM jobs WHERE status = 'pending'"
    " ORDER BY priority DESC, id LIMIT ?) RETURNING id, task, args"
)
PG_INSERT = "INSERT INTO jobs (task, args) VALUES (%s, %s)"
PG_INSERT_NOTIFY = (
    "WITH ins AS (INSERT INTO jobs (task, args) VALUES (%s, %s) RETURNING id)"
    f" SELECT pg_notify('{CHANNEL}', '') FROM ins"
)
PG_CLAIM = (
    "UPDATE jobs SET status = 'running', started_at = now() WHERE id IN ("
    " SELECT id FROM jobs WHERE status = 'pending'"
    " ORDER BY priority DESC, id LIMIT %s FOR UPDATE SKIP LOCKED)"
    " RETURNING id, task, args"
)

MY_INSERT = "INSERT INTO jobs (task, args) VALUES (%s, %s)"
MY_PICK = (
    "SELECT id, task, args FROM jobs WHERE status = 'pending' AND queue = %s"
    " AND scheduled_at <= UTC_TIMESTAMP(6) ORDER BY priority DESC, scheduled_at, id"
    " LIMIT %s FOR UPDATE SKIP LOCKED"
)


def sqlite_connect():
    import sqlite3

    conn = sqlite3.connect(common.sqlite_path("baseline"), isolation_level=None, timeout=20)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    return conn


def pg_connect(autocommit=False):
    import psycopg

    return psycopg.connect(common.pg_dsn(common.pg_dbname("baseline")), autocommit=autocommit)


def my_connect(autocommit=False):
    return common.my_connect(common.my_dbname("baseline"), autocommit=autocommit)


class Peer(BasePeer):
    name = "baseline"
    dbs = ("sqlite", "pg", "my")
    has_bulk = True
    bulk_kind = "executemany in 1 txn"

    def __init__(self, db, batch=1, complete="each"):
        super().__init__(db)
        self.batch = batch
        self.complete = complete
        self._conn = None

    @property
    def conn(self):
        if self._conn is None:
            connect = {"sqlite": sqlite_connect, "pg": pg_connect, "my": my_connect}[self.db]
            # MariaDB: autocommit, so that each count sees the latest commits.
            self._conn = connect(autocommit=True) if self.db == "my" else connect()
        return self._conn

    def setup(self):
        if self.db == "sqlite":
            path = common.sqlite_path("baseline")
            for suffix in ("", "-wal", "-shm"):
                if os.path.exists(path + suffix):
                    os.unlink(path + suffix)
            for ddl in SQLITE_DDL:
                self.conn.execute(ddl)
        elif self.db == "my":
            common.drop_my_db(common.my_dbname("baseline"))
            common.ensure_my_db(common.my_dbname("baseline"))
            with self.conn.cursor() as cur:
                for ddl in MY_DDL:
                    cur.execute(ddl)
        else:
            common.drop_pg_db(common.pg_dbname("baseline"))
            common.ensure_pg_db(common.pg_dbname("baseline"))
            for ddl in PG_DDL:
                self.conn.execute(ddl)
            self.conn.commit()

    def reset(self):
        if self.db == "sqlite":
            self.conn.execute("DELETE FROM jobs")
        elif self.db == "my":
            with self.conn.cursor() as cur:
                cur.execute("TRUNCATE TABLE jobs")
        else:
            self.conn.execute("TRUNCATE jobs RESTART IDENTITY")
            self.conn.commit()

    def _enqueue(self, task, args):
        if self.db == "sqlite":
            c = self.conn
            c.execute("BEGIN IMMEDIATE")
            c.execute(SQLITE_INSERT, (task, json.dumps(args), time.time()))
            c.execute("COMMIT")
        elif self.db == "my":
            # Autocommit: the INSERT is its own transaction (no NOTIFY: workers poll).
            with self.conn.cursor() as cur:
                cur.execute(MY_INSERT, (task, json.dumps(args)))
        else:
            self.conn.execute(PG_INSERT_NOTIFY, (task, json.dumps(args)))
            self.conn.commit()

    def enqueue_one(self, i):
        self._enqueue("noop", [i])

    def enqueue_mark(self, key):
        self._enqueue("mark", [key])

    def enqueue_bulk(self, n):
        if self.db == "sqlite":
            c = self.conn
            c.execute("BEGIN IMMEDIATE")
            now = time.time()
            c.executemany(SQLITE_INSERT, (("noop", json.dumps([i]), now) for i in range(n)))
            c.execute("COMMIT")
        elif self.db == "my":
            # One transaction; MySQLdb sends executemany's rows as multi-row INSERTs.
            self.conn.begin()
            with self.conn.cursor() as cur:
                cur.executemany(MY_INSERT, [("noop", json.dumps([i])) for i in range(n)])
            self.conn.commit()
        else:
            with self.conn.cursor() as cur:
                cur.executemany(PG_INSERT, [("noop", json.dumps([i])) for i in range(n)])
                cur.execute(f"NOTIFY {CHANNEL}")
            self.conn.commit()

    def done_count(self):
        if self.db == "my":
            with self.conn.cursor() as cur:
                cur.execute("SELECT count(*) FROM jobs WHERE status = 'done'")
                return cur.fetchone()[0]
        row = self.conn.execute("SELECT count(*) FROM jobs WHERE status = 'done'").fetchone()
        if self.db == "pg":
            self.conn.commit()
        return row[0]

    def worker_argvs(self, workers):
        argv = [
            sys.executable,
            "-m",
            "peers.baseline",
            "worker",
            "--db",
            self.db,
            "--batch",
            str(self.batch),
            "--complete",
            self.complete,
        ]
        return [argv for _ in range(workers)]


running = True


def _stop(signum, frame):  # noqa: ARG001 (a signal handler)
    global running
    running = False


def run_jobs(rows):
    for _id, task, args in rows:
        if isinstance(args, str):
            args = json.loads(args)
        TASKS[task](*args)


def worker_sqlite(batch, complete, poll):
    conn = sqlite_connect()
    while running:
        conn.execute("BEGIN IMMEDIATE")
        rows = conn.execute(SQLITE_CLAIM, (time.time(), batch)).fetchall()
        conn.execute("COMMIT")
        if not rows:
            time.sleep(poll)
            continue
        if complete == "each":
            for row in rows:
                run_jobs([row])
                conn.execute("BEGIN IMMEDIATE")
                conn.execute(
                    "UPDATE jobs SET status = 'done', finished_at = ? WHERE id = ?",
                    (time.time(), row[0]),
                )
                conn.execute("COMMIT")
        else:
            run_jobs(rows)
            ids = [r[0] for r in rows]
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(
                "UPDATE jobs SET status = 'done', finished_at = ? WHERE id IN ({})".format(
                    ",".join("?" * len(ids))
                ),
                (time.time(), *ids),
            )
            conn.execute("COMMIT")


def worker_pg(batch, complete, poll):
    conn = pg_connect()
    listener = pg_connect(autocommit=True)
    listener.execute(f"LISTEN {CHANNEL}")
    while running:
        rows = conn.execute(PG_CLAIM, (batch,)).fetchall()
        conn.commit()
        if not rows:
            # Sleep until a NOTIFY arrives (or `poll` seconds as a safety net).
            for _ in listener.notifies(timeout=poll, stop_after=1):
                pass
            continue
        if complete == "each":
            for row in rows:
                run_jobs([row])
                conn.execute(
                    "UPDATE jobs SET status = 'done', finished_at = now() WHERE id = %s", (row[0],)
                )
                conn.commit()
        else:
            run_jobs(rows)
            conn.execute(
                "UPDATE jobs SET status = 'done', finished_at = now() WHERE id = ANY(%s)",
                ([r[0] for r in rows],),
            )
            conn.commit()


def worker_my(batch, complete, poll, queue="default"):
    conn = my_connect()
    cur = conn.cursor()
    while running:
        # The claim: one transaction, the locking read then one UPDATE by primary key.
        cur.execute(MY_PICK, (queue, batch))
        rows = cur.fetchall()
        if not rows:
            conn.commit()
            time.sleep(poll)
            continue
        ids = ", ".join(str(int(r[0])) for r in rows)
        cur.execute(
            "UPDATE jobs SET status = 'processing', started_at = UTC_TIMESTAMP(6)"
            f" WHERE id IN ({ids})"
        )
        conn.commit()
        if complete == "each":
            for row in rows:
                run_jobs([row])
                cur.execute(
                    "UPDATE jobs SET status = 'done', finished_at = UTC_TIMESTAMP(6)"
                    " WHERE id = %s",
                    (row[0],),
                )
                conn.commit()
        else:
            run_jobs(rows)
            cur.execute(
                "UPDATE jobs SET status = 'done', finished_at = UTC_TIMESTAMP(6)"
                f" WHERE id IN ({ids})"
            )
            conn.commit()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cmd", choices=["worker"])
    ap.add_argument("--db", choices=["sqlite", "pg", "my"], required=True)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--complete", choices=["each", "batch"], default="each")
    ap.add_argument(
        "--poll",
        type=float,
        default=None,
        help="idle poll interval (default: sqlite and my 0.01 s; pg 1 s, woken by NOTIFY)",
    )
    a = ap.parse_args()
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    if a.db == "sqlite":
        worker_sqlite(a.batch, a.complete, a.poll or 0.01)
    elif a.db == "my":
        worker_my(a.batch, a.complete, a.poll or 0.01)
    else:
        worker_pg(a.batch, a.complete, a.poll or 1.0)


if __name__ == "__main__":
    main()
