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


def _nothing():
    return None


@handler("steps3", takes_context=True)
def steps3(payload, context):  # noqa: ARG001 (a task)
    """A no-op job in three durable steps (benchmarks/run sidebyside --b-kind steps3)."""
    for name in ("one", "two", "three"):
        context.step(name, _nothing)


@handler("wait_mark", takes_context=True)
def wait_mark(payload, context):
    """The event-latency probe: waits for event ``key``, then records when it ran on."""
    context.wait_for_event("event", payload["key"], timeout=None)
    mark_start(payload["key"])
