"""A worker's row in the workers table: WorkerProcess.objects.register/heartbeat/deregister."""

from __future__ import annotations

import os
import socket

import pytest

from django_sqlq.models import WorkerProcess

pytestmark = pytest.mark.django_db


def test_register_records_this_process():
    WorkerProcess.objects.register("w-1", queues=["default", "mail"], concurrency=4)
    row = WorkerProcess.objects.get(worker_id="w-1")
    assert (row.hostname, row.pid) == (socket.gethostname(), os.getpid())
    assert row.queues == ["default", "mail"]
    assert row.concurrency == 4
    assert row.stopped_at is None


def test_registering_again_under_the_same_id_marks_it_running():
    WorkerProcess.objects.register("w-1", queues=["default"], concurrency=1)
    WorkerProcess.objects.deregister("w-1", jobs_done=0, jobs_failed=0)
    WorkerProcess.objects.register("w-1", queues=["mail"], concurrency=2)
    row = WorkerProcess.objects.get(worker_id="w-1")
    assert row.stopped_at is None
    assert (row.queues, row.concurrency) == (["mail"], 2)


def test_heartbeat_records_the_counts():
    WorkerProcess.objects.register("w-1", queues=["default"], concurrency=1)
    assert WorkerProcess.objects.heartbeat("w-1", jobs_done=7, jobs_failed=2) == 1
    row = WorkerProcess.objects.get(worker_id="w-1")
    assert (row.jobs_done, row.jobs_failed, row.stopped_at) == (7, 2, None)


def test_deregister_marks_it_stopped():
    WorkerProcess.objects.register("w-1", queues=["default"], concurrency=1)
    assert WorkerProcess.objects.deregister("w-1", jobs_done=3, jobs_failed=1) == 1
    row = WorkerProcess.objects.get(worker_id="w-1")
    assert row.stopped_at is not None
    assert (row.jobs_done, row.jobs_failed) == (3, 1)


def test_an_unknown_worker_changes_nothing():
    assert WorkerProcess.objects.heartbeat("nobody", jobs_done=1, jobs_failed=0) == 0
    assert WorkerProcess.objects.deregister("nobody", jobs_done=1, jobs_failed=0) == 0
    assert not WorkerProcess.objects.exists()
