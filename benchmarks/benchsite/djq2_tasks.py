"""Task module for one peer. Started from the peer harness in shared/bench."""

from benchsite.mark import mark_start


def noop(i):  # noqa: ARG001 (a task)
    return None


def mark(key):
    mark_start(key)
