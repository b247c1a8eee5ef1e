"""What workflows cost a draining worker, against a plain drain measured in the same run.

    SQLQ_TEST_ENGINE=sqlite|postgresql PYTHONPATH=. python benchmarks/workflows.py [N] [ROUNDS]

Each round drains N no-op jobs with ``sqlq_worker --burst --concurrency 1`` in this process,
in four shapes, and prints jobs/s and CPU µs a job of each, and each shape's ratio to the
plain drain of the same round:

- ``plain``: N independent jobs (the baseline);
- ``fan-in``: N jobs in one group and one job that waits for all of them
  (``bulk_enqueue(...).then(...)``): every completion releases a dependency;
- ``chains``: N / 5 chains of 5 steps (``context.continue_with()``), N jobs in all;
- ``blocked``: N plain jobs beside N jobs blocked on a job scheduled a day ahead (the
  claim must not read them).

On PostgreSQL it uses the database named by DRAIN_DB (default "test").
"""

import io
import os
import statistics
import sys
import time

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")

import django

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402


def drain() -> tuple[float, float]:
    """(seconds, CPU seconds) of one burst drain."""
    connection.close()
    started, cpu = time.perf_counter(), time.process_time()
    call_command(
        "sqlq_worker", "--burst", "--concurrency", "1", "-v", "0",
        stdout=io.StringIO(), stderr=io.StringIO(),
    )  # fmt: skip
    return time.perf_counter() - started, time.process_time() - cpu


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10000
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    if connection.vendor == "postgresql":
        connection.settings_dict["NAME"] = os.environ.get("DRAIN_DB", "test")
    call_command("migrate", verbosity=0, interactive=False)

    from django_sqlq import bulk_enqueue, enqueue
    from django_sqlq.models import Job, JobBlocker
    from tests.testapp import workflow_jobs  # noqa: F401 (wf.step)

    def plain() -> int:
        bulk_enqueue("tests.noop", [{"i": i} for i in range(n)])
        return n

    def fan_in() -> int:
        bulk_enqueue("tests.noop", [{"i": i} for i in range(n)]).then("tests.noop", {})
        return n + 1

    def chains() -> int:
        path = "/dev/null"
        bulk_enqueue("wf.step", [{"path": path, "n": 0, "of": 5} for _ in range(n // 5)])
        return n // 5 * 5

    def blocked() -> int:
        later = enqueue("tests.noop", {}, delay=86400)
        bulk_enqueue("tests.noop", [{} for _ in range(n)], depends_on=[later])
        bulk_enqueue("tests.noop", [{"i": i} for i in range(n)])
        return n

    shapes = {"plain": plain, "fan-in": fan_in, "chains": chains, "blocked": blocked}
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in shapes}
    for _ in range(rounds):
        for name, fill in shapes.items():
            Job.objects.all().delete()
            JobBlocker.objects.all().delete()
            jobs = fill()
            seconds, cpu = drain()
            results[name].append((jobs / seconds, cpu / jobs * 1e6))
    base = results["plain"]
    for name, runs in results.items():
        ratio = [rate / base[i][0] for i, (rate, _) in enumerate(runs)]
        print(
            f"{connection.vendor} n={n} {name:8}: jobs/s "
            + " ".join(f"{rate:.0f}" for rate, _ in runs)
            + "; CPU µs a job "
            + " ".join(f"{us:.1f}" for _, us in runs)
            + f"; jobs/s vs plain (same round) {statistics.median(ratio):.2f}"
        )


if __name__ == "__main__":
    main()
