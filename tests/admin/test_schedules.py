"""The admin's schedules page: who sees it, what it shows, and "run now"."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from django.conf import settings
from django.test import Client, override_settings
from django.urls import reverse

from django_sqlq import schedules
from django_sqlq.models import Job, ScheduleTick

pytestmark = pytest.mark.django_db

SCHEDULE = {
    "nightly-report": {
        "type": "tests.noop",
        "cron": "0 3 * * *",
        "timezone": "Europe/Paris",
        "payload": {"report": "<b>sales</b>"},
    },
    "hourly": {"type": "tests.echo", "cron": "0 * * * *", "missed": "skip"},
}


@pytest.fixture(autouse=True)
def _schedule() -> Iterator[None]:
    with override_settings(SQLQ={**settings.SQLQ, "SCHEDULE": SCHEDULE}):
        yield


LIST = "admin:django_sqlq_scheduletick_changelist"
RUN_NOW = "admin:django_sqlq_scheduletick_run_now"


def test_the_page_needs_staff_and_the_view_permission_on_jobs(staff_client: Any) -> None:
    assert Client().get(reverse(LIST)).status_code == 302
    assert staff_client().get(reverse(LIST)).status_code == 403
    viewer = staff_client("view_job").get(reverse(LIST))
    assert viewer.status_code == 200
    assert "sqlq-run-now" not in viewer.content.decode()  # run now needs change on jobs
    assert (
        "sqlq-run-now"
        in staff_client("view_job", "change_job").get(reverse(LIST)).content.decode()
    )


def test_the_admin_index_lists_the_schedules(staff_client: Any) -> None:
    page = staff_client(superuser=True).get(reverse("admin:index")).content.decode()
    assert reverse(LIST) in page


def test_the_page_shows_each_schedule_its_last_and_next_run_and_last_job(
    staff_client: Any,
) -> None:
    job = Job.objects.create(type="tests.noop", status="completed")
    ScheduleTick.objects.create(
        name="nightly-report", tick_at=datetime(2026, 1, 10, 2, tzinfo=UTC), job_id=job.pk
    )
    page = staff_client("view_job").get(reverse(LIST)).content.decode()
    for text in ("nightly-report", "0 3 * * *", "Europe/Paris", "hourly", "0 * * * *", "skip",
                 " 03:00 CE"):  # fmt: skip
        assert text in page
    assert reverse("admin:django_sqlq_job_change", args=[job.pk]) in page
    assert 'sqlq-badge sqlq-completed">Completed' in page
    assert "<b>sales</b>" not in page  # nothing unescaped (payloads are not shown anyway)
    job_id = job.pk
    job.delete()  # pruned: the row still says which job it was
    page = staff_client("view_job").get(reverse(LIST)).content.decode()
    assert f"#{job_id}" in page
    assert "(deleted)" in page


def test_run_now_enqueues_one_job_and_no_tick(staff_client: Any) -> None:
    response = staff_client("view_job", "change_job").post(
        reverse(RUN_NOW), {"name": "nightly-report"}, follow=True
    )
    job = Job.objects.get()
    assert (job.type, job.payload) == ("tests.noop", {"report": "<b>sales</b>"})
    page = response.content.decode()
    assert f">job {job.pk}</a> for nightly-report, to run now." in page
    assert reverse("admin:django_sqlq_job_change", args=[job.pk]) in page
    assert not ScheduleTick.objects.exists()


def test_run_now_needs_the_change_permission_and_a_post(staff_client: Any) -> None:
    assert staff_client("view_job").post(reverse(RUN_NOW), {"name": "hourly"}).status_code == 403
    assert staff_client("view_job", "change_job").get(reverse(RUN_NOW)).status_code == 405
    assert Client().post(reverse(RUN_NOW), {"name": "hourly"}).status_code == 302  # staff_client
    assert not Job.objects.exists()


def test_run_now_of_an_unknown_schedule_says_so(staff_client: Any) -> None:
    response = staff_client("change_job").post(reverse(RUN_NOW), {"name": "nope"}, follow=True)
    assert "No schedule is named" in response.content.decode()
    assert not Job.objects.exists()


def test_a_broken_schedule_is_shown_not_a_500(staff_client: Any) -> None:
    broken = {**SCHEDULE, "bad": {"type": "tests.noop", "cron": "99 * * * *"}}
    with override_settings(SQLQ={**settings.SQLQ, "SCHEDULE": broken}):
        page = staff_client("view_job").get(reverse(LIST))
    assert page.status_code == 200
    assert "SQLQ[&#x27;SCHEDULE&#x27;][&#x27;bad&#x27;]" in page.content.decode()


def test_the_page_lists_the_decorators_schedules_too(staff_client: Any) -> None:
    schedules.declare(schedules.from_decorator("tests.add", "*/5 * * * *", source="@handler"))
    try:
        assert set(schedules.load()) == {"nightly-report", "hourly", "tests.add"}
        page = staff_client("view_job").get(reverse(LIST)).content.decode()
        assert 'data-schedule="tests.add"' in page
        assert "*/5 * * * *" in page
    finally:
        schedules.undeclare("tests.add")


def test_names_and_types_are_escaped(staff_client: Any) -> None:
    hostile = {"<script>alert(1)</script>": {"type": "<img src=x>", "cron": "0 3 * * *"}}
    with override_settings(SQLQ={**settings.SQLQ, "SCHEDULE": hostile}):
        page = staff_client("view_job", "change_job").get(reverse(LIST)).content.decode()
    assert "<script>alert(1)</script>" not in page
    assert "<img src=x>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
