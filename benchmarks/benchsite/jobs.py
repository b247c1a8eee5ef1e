"""django_sqlq's handlers for the benchmark (the worker imports each app's jobs.py)."""

from benchsite.mark import mark_start
from django_sqlq import handler


@handler("noop")
def noop(payload):  # noqa: ARG001 (a task)
    return None


@handler("mark")
def mark(payload):
    mark_start(payload["key"])


@handler("fail")
def fail(payload):  # noqa: ARG001 (a task)
    raise RuntimeError("a failing job (benchmarks/run sidebyside --failing)")
