"""The latency probe: a job that records the moment it started running.

Started from the peer harness in shared/bench.
"""

import os
import time


def mark_start(key):
    path = os.environ.get("BENCH_MARK_FILE")
    if path:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{key} {time.time():.6f}\n".encode())
        finally:
            os.close(fd)
