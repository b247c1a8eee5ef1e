"""aenqueue() and abulk_enqueue(): enqueueing from async code (an ``async def`` view)."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.core.exceptions import SynchronousOnlyOperation
from django.db import transaction

from django_sqlq import abulk_enqueue, aenqueue, enqueue
from django_sqlq.exceptions import PayloadError, UnknownQueueError
from django_sqlq.models import Job, JobStatus
from django_sqlq.worker import Worker

pytestmark = pytest.mark.django_db(transaction=True)


def test_async_code_enqueues_with_aenqueue_and_abulk_enqueue():
    @async_to_sync
    async def view() -> tuple[Job, list[Job]]:
        with pytest.raises(SynchronousOnlyOperation):
            enqueue("tests.echo", {"n": 0})  # why the a-variants exist
        one = await aenqueue("tests.echo", {"n": 1}, queue="emails", priority=3)
        many = await abulk_enqueue("tests.echo", ({"n": n} for n in (2, 3, 4)), delay=0)
        return one, many

    one, many = view()
    # Committed by the time they return, with what the database chose filled in.
    assert one.pk is not None
    assert one.uuid is not None
    assert one.created_at is not None
    stored = Job.objects.get(pk=one.pk)
    assert (stored.queue, stored.priority, stored.payload) == ("emails", 3, {"n": 1})
    assert [job.payload for job in many] == [{"n": 2}, {"n": 3}, {"n": 4}]
    assert Job.objects.count() == 4
    Worker(queues=["default", "emails"]).run(burst=True, install_signal_handlers=False)
    assert set(Job.objects.values_list("status", flat=True)) == {JobStatus.COMPLETED}


def test_bad_input_raises_in_the_async_caller_and_writes_nothing():
    @async_to_sync
    async def view() -> None:
        with pytest.raises(UnknownQueueError):
            await aenqueue("tests.echo", {}, queue="nope")
        with pytest.raises(PayloadError, match=r"payloads\[1\]"):
            await abulk_enqueue("tests.echo", [{}, {"bad": {1, 2}}])

    view()
    assert not Job.objects.exists()


def test_a_transaction_in_async_code_is_a_sync_function_awaited_through_sync_to_async():
    def place_order(fail: bool) -> Job:
        with transaction.atomic():
            job = enqueue("tests.echo", {"order": 1})
            if fail:
                raise RuntimeError("payment refused")
            return job

    @async_to_sync
    async def view() -> Job:
        with pytest.raises(RuntimeError):
            await sync_to_async(place_order)(True)
        assert not await Job.objects.aexists()  # rolled back with the order
        return await sync_to_async(place_order)(False)

    job = view()
    assert list(Job.objects.values_list("pk", flat=True)) == [job.pk]
