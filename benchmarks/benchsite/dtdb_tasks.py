"""Task module for one peer. Started from the peer harness in shared/bench."""

from django.tasks import task

from benchsite.mark import mark_start


@task
def noop(i):  # noqa: ARG001 (a task)
    return None


@task
def mark(key):
    mark_start(key)
