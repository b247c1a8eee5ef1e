"""The dashboard's Pause/Resume buttons (issue 15 part 1): through Django's test client, and
in headless Chromium (marker ``browser``, skipped without a browser like the rest)."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings
from django.test import Client, override_settings

from django_sqlq import dashboard, enqueue
from django_sqlq.models import Job, JobStatus, Queue
from django_sqlq.worker import Worker
from tests.admin.test_admin import _user, messages_of, text, url
from tests.admin.test_browser import TIMEOUT_MS, operator, page  # noqa: F401 (fixtures)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _fresh_cache() -> Iterator[None]:
    dashboard.clear_cache()
    yield
    dashboard.clear_cache()


def _client(
    django_user_model: Any, *codenames: str, superuser: bool = False, name: str = "u"
) -> Client:
    client = Client()
    client.force_login(_user(django_user_model, name, *codenames, superuser=superuser))
    return client


def _paused(name: str) -> bool:
    return Queue.objects.filter(name=name, paused=True).exists()


def test_the_dashboard_pauses_and_resumes_a_queue(django_user_model: Any) -> None:
    client = _client(django_user_model, superuser=True)
    live = text(client.get(url("job_dashboard_live")))
    assert 'data-action="pause"' in live
    assert "csrfmiddlewaretoken" in live
    response = client.post(url("job_queue_state"), {"queue": "emails", "action": "pause"},
                           follow=True)  # fmt: skip
    assert _paused("emails")
    assert any("Queue emails paused" in m for m in messages_of(response))
    live = text(client.get(url("job_dashboard_live")))
    assert 'class="sqlq-badge sqlq-paused"' in live
    assert 'value="resume"' in live
    client.post(url("job_queue_state"), {"queue": "emails", "action": "resume"})
    assert not _paused("emails")


def test_a_paused_queue_without_jobs_is_listed_with_its_resume_button(
    django_user_model: Any,
) -> None:
    client = _client(django_user_model, superuser=True)
    client.post(url("job_queue_state"), {"queue": "nightly", "action": "pause"})
    live = text(client.get(url("job_dashboard_live")))
    assert 'data-queue="nightly"' in live


def test_the_dashboard_shows_each_queues_global_limit(django_user_model: Any) -> None:
    limits = {"emails": {"concurrency": 2}, "sms": {"rate": "10/s"}}
    with override_settings(SQLQ={**settings.SQLQ, "QUEUE_LIMITS": limits}):
        live = text(_client(django_user_model, superuser=True).get(url("job_dashboard_live")))
    rows = re.findall(r'<tr [^>]*data-queue="([^"]+)".*?data-col="limit">([^<]*)</td>', live, re.S)
    shown = dict(rows)
    assert shown["emails"] == "concurrency 2"
    assert shown["sms"] == "rate 10/s"  # listed though it holds no job and is not configured
    assert shown["default"] == "-"


def test_pausing_needs_the_change_queue_permission_and_a_post(django_user_model: Any) -> None:
    viewer = _client(django_user_model, "view_job")
    assert 'data-action="pause"' not in text(viewer.get(url("job_dashboard_live")))
    response = viewer.post(url("job_queue_state"), {"queue": "emails", "action": "pause"})
    assert response.status_code == 403
    assert not _paused("emails")
    viewer.logout()
    operator_client = _client(django_user_model, "view_job", "change_queue", name="ops")
    assert operator_client.get(url("job_queue_state")).status_code == 405
    response = operator_client.post(url("job_queue_state"), {"queue": "emails", "action": "x"})
    assert response.status_code == 400
    operator_client.post(url("job_queue_state"), {"queue": "emails", "action": "pause"})
    assert _paused("emails")


def test_the_pause_button_needs_the_csrf_token(django_user_model: Any) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(_user(django_user_model, "u", superuser=True))
    response = client.post(url("job_queue_state"), {"queue": "emails", "action": "pause"})
    assert response.status_code == 403
    assert not _paused("emails")


def test_a_junk_queue_name_is_an_error_message(django_user_model: Any) -> None:
    client = _client(django_user_model, superuser=True)
    response = client.post(url("job_queue_state"), {"queue": "", "action": "pause"}, follow=True)
    assert any("non-empty" in m for m in messages_of(response))
    assert not Queue.objects.exists()


@pytest.mark.browser
def test_an_operator_pauses_a_queue_in_the_browser_and_resumes_it(
    live_server: Any,
    page: Any,  # noqa: F811 (the fixture)
    operator: tuple[str, str],  # noqa: F811 (the fixture)
) -> None:
    from playwright.sync_api import expect

    page.goto(f"{live_server.url}/admin/django_sqlq/job/dashboard/")
    page.fill("#id_username", operator[0])
    page.fill("#id_password", operator[1])
    page.click("input[type=submit]")
    emails = page.locator('#sqlq-queues tr[data-queue="emails"]')
    emails.get_by_role("button", name="Pause").click()
    expect(page.locator("ul.messagelist")).to_contain_text("Queue emails paused")
    expect(emails.locator('[data-col="state"]')).to_contain_text("paused")
    job = enqueue("tests.noop", queue="emails")
    worker = Worker(queues=["default", "emails"], poll_interval=0.05)
    thread = threading.Thread(
        target=worker.run, kwargs={"install_signal_handlers": False}, daemon=True
    )
    thread.start()
    try:
        other = enqueue("tests.noop")
        expect(page.locator('#sqlq-queues tr[data-queue="emails"] [data-col="waiting"]'))\
            .to_have_text("1", timeout=TIMEOUT_MS)  # fmt: skip
        _wait_completed(other.pk)
        assert Job.objects.get(pk=job.pk).status == JobStatus.PENDING
        page.locator('#sqlq-queues tr[data-queue="emails"]').get_by_role(
            "button", name="Resume"
        ).click()
        expect(page.locator("ul.messagelist")).to_contain_text("Queue emails resumed")
        _wait_completed(job.pk)
    finally:
        worker.stop()
        thread.join(timeout=30)
    assert not thread.is_alive()


def _wait_completed(pk: int) -> None:
    from tests.conftest import wait_for

    wait_for(lambda: Job.objects.get(pk=pk).status == JobStatus.COMPLETED)
