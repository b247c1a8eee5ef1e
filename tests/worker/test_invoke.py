"""Running one handler (django_sqlq.worker.invoke): sync and async calls, timeouts, the
checks after each handler (a transaction left open, a context variable changed)."""

from __future__ import annotations

import asyncio
import contextvars
import time

import pytest
from django.db import transaction
from django.utils import translation

from django_sqlq.exceptions import JobTimeoutError, TransactionLeftOpenError
from django_sqlq.models import Job
from django_sqlq.worker.invoke import (
    check_connections,
    close_event_loop,
    context_changed,
    invoke,
)


def test_a_sync_handler_gets_its_arguments_back():
    assert invoke(lambda a, b: a + b, (2, 3), None, is_async=False) == 5


def test_async_handlers_share_the_thread_loop_and_leave_no_task_behind():
    loops = []

    async def handler(value: int) -> int:
        loops.append(asyncio.get_running_loop())
        asyncio.get_running_loop().create_task(asyncio.sleep(60))  # never awaited
        return value * 2

    try:
        assert invoke(handler, (4,), None, is_async=True) == 8
        assert invoke(handler, (5,), None, is_async=True) == 10
        assert loops[0] is loops[1]
        assert not asyncio.all_tasks(loops[0])  # the leftover tasks were cancelled
    finally:
        close_event_loop()
    assert loops[0].is_closed()


def test_a_handler_past_its_timeout_is_abandoned():
    with pytest.raises(JobTimeoutError, match=r"timeout of 0\.05s"):
        invoke(time.sleep, (5,), 0.05, is_async=False)


def test_a_timed_handler_that_returns_in_time_gives_its_result():
    assert invoke(lambda: "done", (), 5, is_async=False) == "done"


def test_a_timed_handler_error_is_raised_in_the_caller():
    def fail() -> None:
        raise KeyError("boom")

    with pytest.raises(KeyError, match="boom"):
        invoke(fail, (), 5, is_async=False)


def test_context_changed_sees_an_activated_language():
    def handler() -> None:
        translation.activate("fr")

    before = contextvars.copy_context()
    assert not context_changed(before)
    try:
        handler()
        assert context_changed(before)
    finally:
        translation.deactivate()


@pytest.mark.django_db(transaction=True)
def test_uncommitted_writes_left_open_fail_the_attempt_and_are_rolled_back():
    atomic = transaction.atomic()
    atomic.__enter__()  # a handler that entered an atomic block and returned inside it
    Job.objects.create(type="tests.noop", payload={})
    with pytest.raises(TransactionLeftOpenError, match="transaction open on database"):
        check_connections()
    assert not transaction.get_connection().in_atomic_block
    assert not Job.objects.exists()
