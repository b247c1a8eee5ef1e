"""``python -m tests.faults.enqueuer FIRST SECONDS PATH [BATCH [THINK]]``: for SECONDS,
enqueue faults.record jobs numbered from FIRST as fast as it can: one ``enqueue()`` each, or
with BATCH > 1, BATCH ``enqueue()`` calls inside one ``transaction.atomic()`` (a caller's
transaction that writes more than once), pausing THINK seconds (default 0) between two
transactions, as a web process does between requests. Prints ``enqueued COUNT``; exits 1
with the traceback on any error."""

from __future__ import annotations

import os
import sys
import time


def main(argv: list[str]) -> int:
    first, seconds, path = int(argv[0]), float(argv[1]), argv[2]
    batch = int(argv[3]) if len(argv) > 3 else 1
    think = float(argv[4]) if len(argv) > 4 else 0.0
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.faults.settings")
    import django

    django.setup()
    from django.db import transaction

    from django_sqlq import enqueue

    n = first
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if think:
            time.sleep(think)
        if batch == 1:
            enqueue("faults.record", {"n": n, "path": path})
            n += 1
            continue
        with transaction.atomic():
            for _ in range(batch):
                enqueue("faults.record", {"n": n, "path": path})
                n += 1
    print(f"enqueued {n - first}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
