"""CPU per job of a draining worker, run in this process (load on a shared machine disturbs
per-process CPU time far less than wall time).

    cd <a tree with django_sqlq/ and tests/>   # e.g. `git archive <commit> django_sqlq tests`
    SQLQ_TEST_ENGINE=sqlite PYTHONPATH=. python /path/to/inprocess_drain.py [N] [ROUNDS] [-v V]

Each round fills the queue with N no-op jobs (bulk_enqueue), runs `sqlq_worker --burst
--concurrency 1 -v V` through call_command and prints jobs/s and CPU µs a job. On PostgreSQL
it uses the database named by DRAIN_DB (default "test"): give each commit its own, as
their migrations differ. Alternate two trees round by round to compare them.
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


def main() -> None:
    args = [arg for arg in sys.argv[1:] if not arg.startswith("-v")]
    verbosity = next((arg[2:] for arg in sys.argv[1:] if arg.startswith("-v")), "1") or "1"
    n = int(args[0]) if args else 20000
    rounds = int(args[1]) if len(args) > 1 else 3
    if connection.vendor == "postgresql":
        connection.settings_dict["NAME"] = os.environ.get("DRAIN_DB", "test")
    call_command("migrate", verbosity=0, interactive=False)

    from django_sqlq import bulk_enqueue
    from django_sqlq.models import Job

    rates, cpus = [], []
    for _ in range(rounds):
        Job.objects.all().delete()
        bulk_enqueue("tests.noop", [{"i": i} for i in range(n)])
        connection.close()
        started, cpu = time.perf_counter(), time.process_time()
        call_command(
            "sqlq_worker", "--burst", "--concurrency", "1", "-v", verbosity,
            stdout=io.StringIO(), stderr=io.StringIO(),
        )  # fmt: skip
        rates.append(n / (time.perf_counter() - started))
        cpus.append((time.process_time() - cpu) / n * 1e6)
        assert Job.objects.completed().count() == n
    print(
        f"{os.getcwd()}: n={n} -v {verbosity}: jobs/s "
        + " ".join(f"{rate:.0f}" for rate in rates)
        + f" (median {statistics.median(rates):.0f}); CPU µs a job "
        + " ".join(f"{us:.1f}" for us in cpus)
    )


if __name__ == "__main__":
    main()
