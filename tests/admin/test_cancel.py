"""The admin's Cancel on running jobs and its progress bars (issue 15), through Django's
test client, on both engines."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from django_sqlq.models import Job, JobStatus
from tests.admin.test_admin import _act, login, make_job, messages_of, text, url

pytestmark = pytest.mark.django_db

__all__ = ["login"]  # the fixture, used by name


def running_job(**fields: Any) -> Job:
    values: dict[str, Any] = {
        "status": JobStatus.PROCESSING,
        "locked_by": "host:1:w1",
        "attempts": 1,
        "started_at": timezone.now(),
        "lease_expires_at": timezone.now() + timedelta(minutes=5),
    }
    values.update(fields)
    return make_job(**values)


def test_bulk_cancel_requests_the_running_jobs_and_cancels_the_waiting(login: Any) -> None:
    running, waiting = running_job(), make_job()
    done = make_job(status=JobStatus.COMPLETED)
    response = _act(login("operator"), "cancel_jobs", [running, waiting, done])
    (message,) = messages_of(response)
    assert message.startswith(
        "Cancelled 1 job. Cancel requested for 1 running job: its worker stops it"
    )
    assert "Skipped 1 job (1 completed)" in message
    running.refresh_from_db()
    assert (running.status, running.locked_by) == (JobStatus.PROCESSING, "host:1:w1")
    assert running.cancel_requested_at is not None
    assert Job.objects.get(pk=waiting.pk).status == JobStatus.CANCELLED
    assert Job.objects.get(pk=done.pk).status == JobStatus.COMPLETED


def test_the_job_pages_cancel_button_requests_a_running_jobs_cancel(login: Any) -> None:
    job = running_job()
    client = login("operator")
    response = client.post(url("job_cancel", job.pk), follow=True)
    assert messages_of(response)[0].startswith("Cancel requested for 1 running job")
    page = text(client.get(url("job_change", job.pk)))
    assert "Cancel requested at" in page
    assert "cancel requested" in page  # the badge
    assert Job.objects.get(pk=job.pk).cancel_requested_at is not None


@pytest.mark.parametrize("role", ["viewer", "staff"])
def test_a_user_without_the_cancel_permission_cannot_cancel_a_running_job(
    login: Any, role: str
) -> None:
    job = running_job()
    client = login(role)
    assert client.post(url("job_cancel", job.pk)).status_code == 403
    _act(client, "cancel_jobs", [job])  # not an action this user is offered: nothing runs
    job.refresh_from_db()
    assert (job.status, job.cancel_requested_at) == (JobStatus.PROCESSING, None)


def test_a_running_jobs_progress_shows_in_the_list_the_job_page_and_the_dashboard(
    login: Any,
) -> None:
    job = running_job(progress=0.4, progress_message="resized <b>40</b> of 100")
    finished = make_job(status=JobStatus.COMPLETED, progress=1.0, progress_message="all resized")
    client = login("operator")
    bar = '<progress class="sqlq-progress" value="0.400" max="1"'
    listing = text(client.get(url("job_changelist")))
    assert bar in listing
    assert "resized &lt;b&gt;40&lt;/b&gt; of 100" in listing  # escaped
    assert "all resized" not in listing  # the lists show bars for running jobs only
    assert bar in text(client.get(url("job_change", job.pk)))
    assert "all resized" in text(client.get(url("job_change", finished.pk)))  # kept
    live = text(client.get(url("job_dashboard_live")))
    assert 'id="sqlq-running"' in live
    assert bar in live
    assert f'data-job="{job.pk}"' in live
    assert f'data-job="{finished.pk}"' not in live
