"""``python -m tests.faults.fanin_enqueuer SECONDS PATH MODE SEED``: for SECONDS (and at
least MIN_ROUNDS rounds, however slow the machine), write
groups of wf.record jobs and, while workers are finishing them, jobs that wait for them, as
a site that fans in on running work does. Each round: a group of GROUP jobs (committed),
a wait until the workers run some of it, then (MODE ``view``) one transaction that calls
``group.then()``, an ``enqueue(depends_on=...)`` on a random part of the group and on
the fan-in just written, and one on the chain of an earlier round's fan-in; or (MODE
``calls``) the same three enqueues, each its own transaction. Every job records its run in
PATH. Prints ``rounds N`` and the ids of the waiters as ``waiters ID,ID,...``; exits 1 with
the traceback on any error (a deadlock raised into the caller's call among them), but a
deadlock that ended a ``view``'s transaction on MariaDB, which it tries again as that
engine's docs say (MariaDB ends the whole transaction, PostgreSQL one statement)."""

from __future__ import annotations

import os
import random
import sys
import time
from contextlib import nullcontext
from typing import Any

GROUP = 12
#: Rounds written whatever SECONDS allows: a round can take over 2 s on a loaded machine (its
#: wait for the workers is capped at 2 s), and the test wants several.
MIN_ROUNDS = 5
VIEW_TRIES = 5


def fan_in_round(
    path: str, name: str, group: Any, fan_ins: list[Any], rng: random.Random, mode: str
) -> tuple[Any, list[Any]]:
    """One round's three enqueues: in one transaction (``view``) or each in its own."""
    from django.db import transaction

    from django_sqlq import enqueue

    with transaction.atomic() if mode == "view" else nullcontext():
        fan_in = group.then("wf.record", {"path": path, "name": f"{name}-fan"})
        some = rng.sample(list(group), 5)
        part = enqueue(
            "wf.record",
            {"path": path, "name": f"{name}-part"},
            depends_on=[*some, fan_in],
        )
        made = [fan_in, part]
        if fan_ins:
            earlier = rng.choice(fan_ins)
            made.append(
                enqueue(
                    "wf.record",
                    {"path": path, "name": f"{name}-chain"},
                    depends_on=[earlier.chain, rng.choice(list(group))],
                )
            )
    return fan_in, made


def main(argv: list[str]) -> int:
    seconds, path, mode, seed = float(argv[0]), argv[1], argv[2], int(argv[3])
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.faults.settings")
    import django

    django.setup()
    from django.db import OperationalError, connection

    from django_sqlq import bulk_enqueue
    from django_sqlq.db import is_deadlock
    from django_sqlq.models import Job, JobStatus

    rng = random.Random(seed)
    mariadb = connection.vendor == "mysql"
    waiters: list[int] = []
    fan_ins: list[Job] = []
    rounds = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline or rounds < MIN_ROUNDS:
        name = f"{mode}{rounds}"
        group = bulk_enqueue(
            "wf.record",
            [{"path": path, "name": f"{name}-{i}", "sleep": 0.002} for i in range(GROUP)],
        )
        # Until the workers are finishing this group: some of it claimed or done.
        ids = [job.pk for job in group]
        until = time.monotonic() + 2.0
        while (
            time.monotonic() < until
            and not Job.objects.filter(
                pk__in=ids, status__in=(JobStatus.PROCESSING, JobStatus.COMPLETED)
            ).exists()
        ):
            time.sleep(0.001)
        for attempt in range(1, VIEW_TRIES + 1):
            try:
                fan_in, made = fan_in_round(path, name, group, fan_ins, rng, mode)
                break
            except OperationalError as exc:
                # MariaDB ends the whole transaction to break a deadlock, and a view's is the
                # view's to try again (docs/reference/mariadb.md); never on PostgreSQL.
                if not (mode == "view" and is_deadlock(exc) and mariadb) or attempt == VIEW_TRIES:
                    raise
        fan_ins.append(fan_in)
        waiters.extend(job.pk for job in made)
        rounds += 1
    print(f"rounds {rounds}")
    print("waiters " + ",".join(map(str, waiters)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
