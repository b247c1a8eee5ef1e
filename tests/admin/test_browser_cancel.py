"""In headless Chromium (issue 15): an operator watches a running job's progress on the
dashboard and on its page, cancels it, and sees it end cancelled, with a worker running."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from django_sqlq import enqueue
from django_sqlq.models import Job, JobStatus
from django_sqlq.worker import Worker
from tests.admin.test_browser import TIMEOUT_MS, operator, page, shots
from tests.conftest import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

__all__ = ["operator", "page", "shots"]  # fixtures, used by name


def test_an_operator_watches_a_running_jobs_progress_and_cancels_it(
    live_server: Any, page: Any, shots: Path, operator: tuple[str, str], tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    started, saw = tmp_path / "started", tmp_path / "saw"
    job = enqueue("tests.cancel_cooperative", {"started": str(started), "saw": str(saw)})
    worker = Worker(poll_interval=0.05)
    thread = threading.Thread(
        target=worker.run, kwargs={"install_signal_handlers": False}, daemon=True
    )
    thread.start()
    try:
        wait_for(started.exists, timeout=30)
        wait_for(lambda: Job.objects.get(pk=job.pk).progress is not None, timeout=30)

        page.goto(f"{live_server.url}/admin/")
        page.fill("#id_username", operator[0])
        page.fill("#id_password", operator[1])
        page.click("input[type=submit]")

        # The dashboard lists the running job with its progress bar.
        page.goto(f"{live_server.url}/admin/django_sqlq/job/dashboard/")
        row = page.locator(f'#sqlq-running tr[data-job="{job.pk}"]')
        expect(row.locator("progress.sqlq-progress")).to_be_visible()
        expect(row).to_contain_text("step ")
        page.screenshot(path=str(shots / "admin-dashboard-running.png"))

        # Its page shows the bar too, and a Cancel button that asks the worker to stop it.
        row.get_by_role("link", name=f"#{job.pk}").click()
        expect(page.locator("#sqlq-job-progress progress")).to_be_visible()
        page.get_by_role("button", name="Cancel").click()
        expect(page.locator("ul.messagelist")).to_contain_text(
            "Cancel requested for 1 running job"
        )
        # The open page follows the job until its worker has stopped it.
        expect(page.locator("#sqlq-job-status")).to_have_text("Cancelled", timeout=TIMEOUT_MS)
        page.screenshot(path=str(shots / "admin-job-cancelled.png"))
    finally:
        worker.stop()
        thread.join(timeout=30)
    assert not thread.is_alive()
    assert saw.exists()  # the handler saw the flag and stopped at its checkpoint
    job.refresh_from_db()
    assert (job.status, job.attempts) == (JobStatus.CANCELLED, 1)
