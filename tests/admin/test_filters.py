"""The job lists' filters on their own: where their choices come from, and what they keep."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib import admin
from django.test import RequestFactory
from django.utils import timezone

from django_sqlq.admin import QueueFilter, TypeFilter, WhenFilter
from django_sqlq.models import Job, JobStatus

pytestmark = pytest.mark.django_db


def make_filter(filter_class: Any, **params: str) -> Any:
    request = RequestFactory().get("/", params)
    model_admin = admin.site._registry[Job]
    lists = {key: [value] for key, value in params.items()}
    return filter_class(request, lists, Job, model_admin), request, model_admin


def test_queue_choices_are_the_configured_queues_then_the_ones_seen() -> None:
    Job.objects.create(type="tests.echo", queue="legacy")
    queue_filter, request, model_admin = make_filter(QueueFilter, queue="gone")
    names = [name for name, _ in queue_filter.lookups(request, model_admin)]
    assert names[:3] == ["default", "emails", "reports"]
    assert "legacy" in names
    assert names[-1] == "gone"  # selected: kept as a choice though no row shows it


def test_type_choices_are_the_registered_handlers_and_the_types_seen() -> None:
    Job.objects.create(type="old.module.task", queue="default")
    type_filter, request, model_admin = make_filter(TypeFilter)
    names = [name for name, _ in type_filter.lookups(request, model_admin)]
    assert "tests.boom" in names
    assert "old.module.task" in names


def test_the_scheduled_filter_splits_waiting_jobs_into_due_and_future() -> None:
    now = timezone.now()
    due = Job.objects.create(type="t", queue="default", scheduled_at=now - timedelta(seconds=5))
    future = Job.objects.create(
        type="t", queue="default", status=JobStatus.SCHEDULED, scheduled_at=now + timedelta(1)
    )
    Job.objects.create(type="t", queue="default", status=JobStatus.FAILED)
    for value, expected in (("due", [due.pk]), ("future", [future.pk])):
        when, request, _ = make_filter(WhenFilter, when=value)
        picked = when.queryset(request, Job.objects.all())
        assert list(picked.values_list("pk", flat=True)) == expected
