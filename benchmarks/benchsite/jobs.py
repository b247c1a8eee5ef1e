"""django_sqlq's handlers for the benchmark (the worker imports each app's jobs.py)."""

from django.db import connection, transaction

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


def _write(job, step):
    """One row of work (sidebyside.py makes the table)."""
    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO bench_write (job, step) VALUES (%s, %s)", [job, step])


@handler("writes3", takes_context=True)
def writes3(payload, context):  # noqa: ARG001 (a task)
    """Three rows, each written in a transaction of its own: a job's three pieces of work
    without steps (benchmarks/run sidebyside --a-kind writes3)."""
    for name in ("one", "two", "three"):
        with transaction.atomic():
            _write(context.job_id, name)


@handler("steps3w", takes_context=True)
def steps3w(payload, context):  # noqa: ARG001 (a task)
    """The same three rows, each written in a durable step (--b-kind steps3w)."""
    for name in ("one", "two", "three"):
        context.step(name, _write, context.job_id, name)


@handler("wait_mark", takes_context=True)
def wait_mark(payload, context):
    """The event-latency probe: waits for event ``key``, then records when it ran on."""
    context.wait_for_event("event", payload["key"], timeout=None)
    mark_start(payload["key"])
