"""What one scrape of the Prometheus view costs on a deep jobs table.

    python benchmarks/metrics_scrape.py [--db sqlite|pg] [--rows 1000000] [--scrapes 5]

For each engine, a new database (a SQLite file in WAL mode; PostgreSQL database
``bench_metrics_scrape``, dropped and recreated) is migrated and filled with ``--rows`` jobs
in three queues: 98% completed, 1% failed, the rest pending, scheduled or processing, and
five worker rows with stats. Then the view is called ``--scrapes`` times; the script prints
the queries of one scrape (CaptureQueriesContext) and the median time of a scrape.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PG_DB = "bench_metrics_scrape"
PG = {
    "host": os.environ.get("BENCH_PG_HOST", "127.0.0.1"),
    "port": os.environ.get("BENCH_PG_PORT", "5432"),
    "user": os.environ.get("BENCH_PG_USER", "root"),
}
TOKEN = "benchmark-token-0123456789"


def configure(db: str, tmp: str) -> None:
    import django
    from django.conf import settings

    if db == "pg":
        import psycopg

        with psycopg.connect(dbname="postgres", autocommit=True, **PG) as admin:  # type: ignore[arg-type]
            admin.execute(f'DROP DATABASE IF EXISTS "{PG_DB}" WITH (FORCE)')
            admin.execute(f'CREATE DATABASE "{PG_DB}"')
        database = {"ENGINE": "django.db.backends.postgresql", "NAME": PG_DB, **PG}
    else:
        database = {"ENGINE": "django.db.backends.sqlite3", "NAME": os.path.join(tmp, "q.db")}
    settings.configure(
        DATABASES={"default": database},
        INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth", "django_sqlq"],
        USE_TZ=True,
        DEFAULT_AUTO_FIELD="django.db.models.BigAutoField",
        SQLQ={"QUEUES": ["default", "emails", "reports"], "METRICS_TOKEN": TOKEN},
        ROOT_URLCONF="django_sqlq.urls",
        ALLOWED_HOSTS=["*"],
        MIDDLEWARE=[],
    )
    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def fill(rows: int) -> None:
    from django.db import connection
    from django.utils import timezone

    from django_sqlq.models import Job, WorkerProcess
    from django_sqlq.worker.stats import WorkerStats

    now = timezone.now()
    queues = ("default", "emails", "reports")
    batch = []
    for i in range(rows):
        r = i % 100
        status = (
            "failed"
            if r == 0
            else "pending"
            if r == 1 and i % 1000 < 200
            else "scheduled"
            if r == 1 and i % 1000 < 400
            else "processing"
            if r == 1 and i % 1000 < 410
            else "completed"
        )
        batch.append(
            Job(
                type="bench.noop",
                queue=queues[i % 3],
                status=status,
                completed_at=now if status in ("completed", "failed") else None,
                lease_expires_at=now if status == "processing" else None,
            )
        )
        if len(batch) == 20_000:
            Job.objects.bulk_create(batch)
            batch = []
    if batch:
        Job.objects.bulk_create(batch)
    Job.objects.filter(status="scheduled").update(scheduled_at=now + timezone.timedelta(hours=1))
    for n in range(5):
        stats = WorkerStats()
        for q in queues:
            stats.started(q, now)
            stats.ran(q, 0.01)
            stats.completed(q)
        WorkerProcess.objects.register(f"w{n}", queues=list(queues), concurrency=4)
        WorkerProcess.objects.heartbeat(f"w{n}", jobs_done=3, jobs_failed=0, stats=stats.as_json())
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")


def scrape(scrapes: int) -> None:
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    client = Client()
    headers = {"Authorization": f"Bearer {TOKEN}"}
    with CaptureQueriesContext(connection) as captured:
        response = client.get("/metrics", headers=headers)
    assert response.status_code == 200, response.content
    print(f"  queries per scrape: {len(captured)}")
    for query in captured.captured_queries:
        print(f"    {query['time']}s  {query['sql'][:110]}")
    times = []
    for _ in range(scrapes):
        start = time.perf_counter()
        client.get("/metrics", headers=headers)
        times.append(time.perf_counter() - start)
    print(f"  scrape time (median of {scrapes}): {statistics.median(times) * 1000:.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", choices=["sqlite", "pg"], default="sqlite")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--scrapes", type=int, default=5)
    args = parser.parse_args()
    sys.path.insert(0, ROOT)
    with tempfile.TemporaryDirectory() as tmp:
        configure(args.db, tmp)
        start = time.perf_counter()
        fill(args.rows)
        print(f"{args.db}: {args.rows} rows filled in {time.perf_counter() - start:.0f}s")
        scrape(args.scrapes)
        if args.db == "pg":
            from django.db import connections

            connections.close_all()
            import psycopg

            with psycopg.connect(dbname="postgres", autocommit=True, **PG) as admin:  # type: ignore[arg-type]
                admin.execute(f'DROP DATABASE IF EXISTS "{PG_DB}" WITH (FORCE)')


if __name__ == "__main__":
    main()
