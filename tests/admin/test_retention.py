"""The dashboard's retention panel: what is kept per status and the last prune, through
Django's test client and in headless Chromium (the pattern of tests/admin/test_browser.py)."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.test import override_settings
from django.urls import reverse
from django.utils import timezone

from django_sqlq import dashboard, retention
from django_sqlq.models import Job
from django_sqlq.worker import Worker
from tests.admin.test_browser import operator, page, shots  # noqa: F401 (fixtures)

DAY = 86400
SQLQ = {"QUEUES": ["default", "emails", "reports"]}


def old_rows(status: str, n: int) -> None:
    finished = timezone.now() - timedelta(days=40)
    Job.objects.bulk_create(
        [Job(type="tests.noop", status=status, completed_at=finished) for _ in range(n)]
    )


def text(response: Any) -> str:
    return re.sub(r"\s+", " ", response.content.decode())


@pytest.fixture(autouse=True)
def _fresh_throughput_cache() -> Any:
    dashboard.clear_cache()
    yield
    dashboard.clear_cache()


@pytest.mark.django_db
def test_the_dashboard_shows_what_is_kept_and_the_last_prune(admin_client: Any) -> None:
    url = reverse("admin:django_sqlq_job_dashboard")
    keep = {"completed": DAY, "failed": 30 * DAY, "cancelled": None}
    with override_settings(SQLQ={**SQLQ, "KEEP_FINISHED": keep}):
        page_text = text(admin_client.get(url))
        assert '<tr class="row1" data-status="completed">' in page_text
        assert re.search(r'data-status="completed">.*?data-col="kept">1 d 0 h<', page_text)
        assert re.search(r'data-status="failed">.*?data-col="kept">30 d 0 h<', page_text)
        assert re.search(r'data-status="cancelled">.*?data-col="kept">for ever<', page_text)
        assert "No prune has run yet: the workers prune every 60 s" in page_text

        old_rows("completed", 3)
        old_rows("failed", 2)
        retention.prune("default", keep=keep, holder="host:42:abc")
        page_text = text(admin_client.get(url))
        assert "by <code>host:42:abc</code>: 5 jobs deleted (Completed 3, Failed 2)." in page_text
        assert "5 deleted in all." in page_text
    with override_settings(SQLQ={**SQLQ, "KEEP_FINISHED": None}):
        page_text = text(admin_client.get(url))
        # Pruning was turned off since: the last prune is still shown.
        assert "5 jobs deleted" in page_text
        assert re.search(r'data-status="completed">.*?data-col="kept">for ever<', page_text)


@pytest.mark.django_db
def test_the_dashboard_says_when_nothing_is_pruned(admin_client: Any) -> None:
    with override_settings(SQLQ={**SQLQ, "KEEP_FINISHED": None}):
        page_text = text(admin_client.get(reverse("admin:django_sqlq_job_dashboard")))
    assert "Nothing is pruned: KEEP_FINISHED keeps every finished job for ever." in page_text


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_an_operator_sees_a_workers_prune_on_the_dashboard(
    live_server: Any, request: pytest.FixtureRequest
) -> None:
    from playwright.sync_api import expect

    tab = request.getfixturevalue("page")
    username, password = request.getfixturevalue("operator")
    folder: Path = request.getfixturevalue("shots")
    old_rows("completed", 7)
    old_rows("cancelled", 1)
    keep = {"completed": DAY, "failed": 30 * DAY, "cancelled": 0}
    with override_settings(SQLQ={**SQLQ, "KEEP_FINISHED": keep, "PRUNE_INTERVAL": 0.01}):
        # One turn of a worker's pruner, in this thread.
        worker = Worker(worker_id="web-1:4121:5f0c2a1e", poll_interval=0.05)
        worker.pruner.tick()
        assert not Job.objects.exists()

        tab.goto(f"{live_server.url}/admin/")
        tab.fill("#id_username", username)
        tab.fill("#id_password", password)
        tab.click("input[type=submit]")
        tab.goto(f"{live_server.url}/admin/django_sqlq/job/dashboard/")
        panel = tab.locator("#sqlq-retention")
        expect(panel.locator('tr[data-status="failed"] [data-col="kept"]')).to_have_text(
            "30 d 0 h"
        )
        expect(panel.locator('tr[data-status="cancelled"] [data-col="kept"]')).to_have_text(
            "pruned at once"
        )
        last = tab.locator("#sqlq-last-prune")
        expect(last).to_contain_text("web-1:4121:5f0c2a1e")
        expect(last).to_contain_text("8 jobs deleted (Completed 7, Cancelled 1).")
        expect(last).to_contain_text("8 deleted in all.")
        last.scroll_into_view_if_needed()
        tab.screenshot(path=str(folder / "admin-retention.png"))
