"""Task module for one peer. Started from the peer harness in shared/bench."""

from procrastinate.contrib.django import app

from benchsite.mark import mark_start


@app.task(name="noop")
def noop(i):  # noqa: ARG001 (a task)
    return None


@app.task(name="mark")
def mark(key):
    mark_start(key)
