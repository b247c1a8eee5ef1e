"""The admin's actions without a browser or a request: what each one runs, which jobs it
hands to lifecycle, and what it tells the operator."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from django.contrib import messages
from django.utils import timezone

from django_sqlq import lifecycle
from django_sqlq.admin import actions
from django_sqlq.admin.actions import (
    CANCEL,
    DELETE,
    RETRY,
    RUN_NOW,
    ActionReport,
    perform,
)
from django_sqlq.models import Job, JobStatus

pytestmark = pytest.mark.django_db


def make_job(**fields: Any) -> Job:
    values: dict[str, Any] = {"type": "tests.echo", "queue": "default", "payload": {}}
    values.update(fields)
    return Job.objects.create(**values)


def test_each_action_runs_its_lifecycle_function() -> None:
    assert RETRY.function is lifecycle.retry_now
    assert CANCEL.function is lifecycle.cancel_or_request
    assert RUN_NOW.function is lifecycle.run_now
    assert DELETE.function is lifecycle.delete


@pytest.mark.parametrize(
    ("bulk", "name", "permission"),
    [
        (actions.retry_jobs, "retry_jobs", "retry"),
        (actions.cancel_jobs, "cancel_jobs", "cancel"),
        (actions.run_jobs_now, "run_jobs_now", "change"),
        (actions.delete_jobs, "delete_jobs", "delete"),
    ],
)
def test_the_bulk_actions_are_functions_named_as_before_with_their_permission(
    bulk: Any, name: str, permission: str
) -> None:
    assert callable(bulk)
    assert bulk.__name__ == name  # the value the changelist form posts
    assert list(bulk.allowed_permissions) == [permission]


def test_perform_hands_only_the_applicable_jobs_to_the_function_in_chunks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pending = [make_job() for _ in range(5)]
    done = make_job(status=JobStatus.COMPLETED)
    calls: list[list[int]] = []

    def record(ids: Iterable[int], *, alias: str | None = None) -> lifecycle.Outcome:  # noqa: ARG001
        ids = list(ids)
        calls.append(ids)
        return lifecycle.Outcome(changed=len(ids), skipped=0)

    monkeypatch.setattr(actions, "ACTION_CHUNK", 2)
    report = perform(replace(CANCEL, function=record), Job.objects.all(), alias="default")
    assert sorted(pk for chunk in calls for pk in chunk) == sorted(j.pk for j in pending)
    assert all(len(chunk) <= 2 for chunk in calls)
    assert done.pk not in {pk for chunk in calls for pk in chunk}
    assert (report.changed, report.not_applicable, report.raced) == (5, {"completed": 1}, 0)


def test_cancel_reports_changed_skipped_by_status_and_missing_jobs() -> None:
    pending = make_job()
    make_job(status=JobStatus.COMPLETED)
    make_job(status=JobStatus.FAILED)
    report = perform(CANCEL, Job.objects.all(), alias="default", requested=5)
    assert (report.changed, report.missing, report.skipped) == (1, 2, 4)
    assert report.not_applicable == {"completed": 1, "failed": 1}
    assert Job.objects.get(pk=pending.pk).status == JobStatus.CANCELLED
    assert report.message() == (
        "Cancelled 1 job. Skipped 2 jobs (1 completed, 1 failed): only blocked, scheduled, "
        "pending or running jobs can be cancelled. Skipped 2 jobs that no longer exist."
    )
    assert report.level == messages.WARNING


def test_run_now_skips_a_job_already_due_for_that_reason() -> None:
    now = timezone.now()
    later = make_job(status=JobStatus.SCHEDULED, scheduled_at=now + timedelta(hours=1))
    make_job(scheduled_at=now - timedelta(minutes=1))
    report = perform(RUN_NOW, Job.objects.all(), alias="default", now=now)
    assert (report.changed, report.not_applicable) == (1, {"already due": 1})
    assert Job.objects.get(pk=later.pk).scheduled_at <= timezone.now()


def test_delete_never_removes_a_running_job() -> None:
    running = make_job(status=JobStatus.PROCESSING, locked_by="w1")
    failed = make_job(status=JobStatus.FAILED)
    report = perform(DELETE, Job.objects.all(), alias="default")
    assert report.changed == 1
    assert list(Job.objects.values_list("pk", flat=True)) == [running.pk]
    assert not Job.objects.filter(pk=failed.pk).exists()


@pytest.mark.parametrize(
    ("changed", "skipped", "level"),
    [(2, 0, messages.SUCCESS), (2, 1, messages.WARNING), (0, 0, messages.WARNING)],
)
def test_a_report_is_a_warning_unless_every_job_changed(
    changed: int, skipped: int, level: int
) -> None:
    report = ActionReport(RETRY, changed=changed, not_applicable={}, raced=skipped, missing=0)
    assert report.level == level
