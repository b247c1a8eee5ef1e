"""End to end in headless Chromium, on whichever engine the run uses: an operator logs in,
sees on the dashboard that a job failed, opens it, retries it, and watches a worker complete
it, on pages that refresh themselves.

Needs Debian's ``chromium`` and the ``playwright`` package (``scripts/install-browser``); no
browser is ever downloaded. Without them the tests skip, unless ``SQLQ_REQUIRE_BROWSER`` is
set, when they fail. ``SQLQ_SCREENSHOTS=DIR`` keeps the screenshots there (the docs' images
come from such a run); otherwise they go to the test's temporary directory.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import connections
from django.utils import timezone

from django_sqlq import dashboard, enqueue
from django_sqlq.models import Job, JobStatus, WorkerProcess
from django_sqlq.worker import Worker

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

CHROMIUM = os.environ.get("SQLQ_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TIMEOUT_MS = 20_000


def browser_missing() -> str | None:
    if not os.access(CHROMIUM, os.X_OK):
        return f"no Chromium at {CHROMIUM} (run scripts/install-browser)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright package is not installed (run scripts/install-browser PYTHON)"
    return None


@pytest.fixture
def page(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    reason = browser_missing()
    if reason:
        if os.environ.get("SQLQ_REQUIRE_BROWSER"):
            pytest.fail(f"browser tests required (SQLQ_REQUIRE_BROWSER), but {reason}")
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    # Playwright's sync API runs an event loop in this thread; Django's ORM calls made by
    # the test meanwhile are still plain synchronous calls.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    # Inside Playwright's context the test's code runs in a greenlet with its own context
    # variables, hence its own database connections: close them on both sides of the
    # boundary, or one stays open and the test database cannot be dropped.
    connections.close_all()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        context = browser.new_context(viewport={"width": 1280, "height": 860})
        context.set_default_timeout(TIMEOUT_MS)
        tab = context.new_page()
        try:
            yield tab
        finally:
            context.close()
            browser.close()
            connections.close_all()


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("SQLQ_SCREENSHOTS") or tmp_path / "screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture
def operator(django_user_model: Any) -> tuple[str, str]:
    django_user_model.objects.create_superuser("operator", "ops@example.com", "correct-horse")
    return "operator", "correct-horse"


def seed_history() -> None:
    """A day of finished jobs and some scheduled ones, so the charts have something to draw."""
    now = timezone.now()
    jobs = []
    for minute in range(0, 24 * 60, 7):
        done = 2 + (minute * 7919) % 9 if minute < 60 else 1 + (minute * 31) % 4
        for i in range(done):
            jobs.append(
                Job(
                    type="shop.send_receipt" if i % 2 else "shop.make_thumbnail",
                    queue="emails" if i % 2 else "default",
                    status=JobStatus.FAILED if (minute + i) % 97 == 0 else JobStatus.COMPLETED,
                    attempts=1,
                    completed_at=now - timedelta(minutes=minute, seconds=i),
                    locked_by="web-1:4121:5f0c2a1e",
                )
            )
    for hours in (2, 3, 5):
        jobs.append(
            Job(type="shop.nightly_report", queue="reports",
                scheduled_at=now + timedelta(hours=hours))
        )  # fmt: skip
    Job.objects.bulk_create(jobs)
    # The failed rows seeded above are history; keep only the one the story is about.
    Job.objects.filter(status=JobStatus.FAILED).update(status=JobStatus.COMPLETED)


def test_an_operator_finds_a_failed_job_retries_it_and_watches_it_complete(
    live_server: Any, page: Any, shots: Path, operator: tuple[str, str], tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    dashboard.clear_cache()
    seed_history()
    # Uploads stop processing: the handler writes into a directory that is not there.
    uploads = tmp_path / "uploads"
    job = enqueue("tests.record", {"n": 1, "path": str(uploads / "done.txt")}, max_attempts=1)
    Worker(poll_interval=0.05).run(burst=True, install_signal_handlers=False)
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED
    assert "FileNotFoundError" in job.last_error

    # Log in.
    page.goto(f"{live_server.url}/admin/")
    page.fill("#id_username", operator[0])
    page.fill("#id_password", operator[1])
    page.click("input[type=submit]")
    expect(page.locator('a[href$="/admin/django_sqlq/"]').first).to_be_visible()

    # From the admin index to the app, to the dashboard.
    page.locator('a[href$="/admin/django_sqlq/"]').first.click()
    expect(page.locator(".sqlq-index-box")).to_contain_text("1 job failed")  # loaded live
    page.screenshot(path=str(shots / "admin-app-index.png"))
    page.click("#sqlq-open-dashboard")
    live = page.locator("#sqlq-live")
    expect(live).to_contain_text("1 job failed and waits for an operator.")
    default_row = page.locator('#sqlq-queues tr[data-queue="default"]')
    expect(default_row.locator('[data-col="failed"]')).to_have_text("1")

    # Jobs arrive and no worker runs: the dashboard notices by itself, without a reload.
    url_before = page.url
    enqueue("tests.echo", {"to": "b@example.com"}, queue="emails")
    emails_row = page.locator('#sqlq-queues tr[data-queue="emails"]')
    expect(emails_row.locator('[data-col="waiting"]')).to_have_text("1", timeout=TIMEOUT_MS)
    expect(live).to_contain_text("No worker is running: 1 job is waiting.")
    assert page.url == url_before
    expect(page.locator("#sqlq-chart-minutes svg rect.sqlq-bar-completed").first).to_be_visible()
    page.screenshot(path=str(shots / "admin-dashboard.png"))

    # The failed jobs, the error first.
    live.get_by_role("link", name="Show the failed jobs").click()
    expect(page.locator("#result_list")).to_contain_text("FileNotFoundError")
    page.screenshot(
        path=str(shots / "admin-failed-jobs.png"),
        clip={"x": 0, "y": 0, "width": 1280, "height": 500},
    )

    # The job: its traceback, then the fix and a retry.
    link = page.locator("#result_list").get_by_role("link", name=str(job.pk), exact=True)
    job_url = f"/admin/django_sqlq/failedjob/{job.pk}/change/"
    link.click()
    try:
        page.wait_for_url(f"**{job_url}", timeout=TIMEOUT_MS)
    except Exception:
        # A click lost while a loaded machine was still settling the page: click again,
        # as an operator would (a loaded CI run saw the list page 20 s after the click).
        link.click()
        page.wait_for_url(f"**{job_url}", timeout=TIMEOUT_MS)
    expect(page.locator("#sqlq-job-status")).to_have_text("Failed", timeout=TIMEOUT_MS)
    expect(page.locator("pre.sqlq-traceback").first).to_contain_text("Traceback")
    expect(page.locator("pre.sqlq-traceback").first).to_contain_text("FileNotFoundError")
    page.screenshot(path=str(shots / "admin-job-failed.png"), full_page=True)

    uploads.mkdir()  # the operator fixes the cause...
    page.get_by_role("button", name="Retry now").click()  # ...and retries
    expect(page.locator("ul.messagelist")).to_contain_text("Retried 1 job")
    expect(page.locator("#sqlq-job-status")).to_have_text("Pending")

    # A worker starts; the open page follows the job until it completes.
    worker = Worker(poll_interval=0.05)
    thread = threading.Thread(
        target=worker.run, kwargs={"install_signal_handlers": False}, daemon=True
    )
    thread.start()
    try:
        expect(page.locator("#sqlq-job-status")).to_have_text("Completed", timeout=TIMEOUT_MS)
        expect(page.locator("pre.sqlq-json").nth(1)).to_contain_text(f"1 {os.getpid()}")
        page.screenshot(path=str(shots / "admin-job-completed.png"))
    finally:
        worker.stop()
        thread.join(timeout=30)
    assert not thread.is_alive()
    assert (uploads / "done.txt").read_text().startswith("1 ")
    job.refresh_from_db()
    assert (job.status, job.attempts) == (JobStatus.COMPLETED, 1)

    # Back on the dashboard: nothing failed, nothing waits.
    page.goto(f"{live_server.url}/admin/django_sqlq/job/dashboard/")
    expect(default_row.locator('[data-col="failed"]')).to_have_text("0")
    expect(emails_row.locator('[data-col="waiting"]')).to_have_text("0")
    assert WorkerProcess.objects.filter(worker_id=worker.worker_id).exists()


def test_the_job_list_shows_every_column_at_1400_px(
    live_server: Any, page: Any, shots: Path, operator: tuple[str, str]
) -> None:
    """Issue 11: at 1400 px the list cut its last columns off. With long type names and
    errors, every column header is on screen and the page does not scroll sideways."""
    from playwright.sync_api import expect

    for n in range(3):
        Job.objects.create(
            type=f"shop.integrations.warehouse.synchronise_inventory_levels_{n}" * 2,
            queue="default",
            status=JobStatus.FAILED,
            attempts=5,
            max_attempts=5,
            last_error="requests.exceptions.ConnectionError: " + "HTTPSConnectionPool " * 30,
            completed_at=timezone.now(),
        )
    page.set_viewport_size({"width": 1400, "height": 900})
    page.goto(f"{live_server.url}/admin/")
    page.fill("#id_username", operator[0])
    page.fill("#id_password", operator[1])
    page.click("input[type=submit]")
    for path in ("job", "failedjob"):
        page.goto(f"{live_server.url}/admin/django_sqlq/{path}/")
        expect(page.locator("#result_list")).to_be_visible()
        page.screenshot(path=str(shots / f"admin-{path}-list-1400.png"))
        width = page.evaluate("document.documentElement.clientWidth")
        overflow = page.evaluate(
            "document.documentElement.scrollWidth - document.documentElement.clientWidth"
        )
        edges = page.evaluate(
            "[...document.querySelectorAll('#result_list thead th')]"
            ".map(th => [th.textContent.trim(), th.getBoundingClientRect().right])"
        )
        cut = [name for name, right in edges if right > width + 1]
        assert not cut, (path, width, overflow, edges)
        assert overflow <= 0, (path, width, overflow, edges)


def test_an_operator_sees_the_schedules_and_runs_one_now(
    live_server: Any, page: Any, shots: Path, operator: tuple[str, str]
) -> None:
    from django.conf import settings
    from django.test import override_settings
    from playwright.sync_api import expect

    schedule = {
        "nightly-report": {
            "type": "tests.echo",
            "cron": "0 3 * * *",
            "timezone": "Europe/Paris",
            "payload": {"report": "sales"},
        }
    }
    with override_settings(SQLQ={**settings.SQLQ, "SCHEDULE": schedule}):
        page.goto(f"{live_server.url}/admin/")
        page.fill("#id_username", operator[0])
        page.fill("#id_password", operator[1])
        page.click("input[type=submit]")
        page.locator('a[href$="/admin/django_sqlq/scheduletick/"]').first.click()
        row = page.locator('tr.sqlq-schedule[data-schedule="nightly-report"]')
        expect(row).to_contain_text("0 3 * * *")
        expect(row).to_contain_text("Europe/Paris")
        expect(row.locator(".sqlq-next-run")).not_to_have_text("never")
        page.screenshot(path=str(shots / "admin-schedules.png"))

        row.get_by_role("button", name="Run now").click()
        expect(page.locator("ul.messagelist")).to_contain_text("for nightly-report, to run now")
        job = Job.objects.get(type="tests.echo")
        assert job.payload == {"report": "sales"}
        Worker(poll_interval=0.05).run(burst=True, install_signal_handlers=False)
        page.locator("a.sqlq-run-now-job").click()
        expect(page.locator("#sqlq-job-status")).to_have_text("Completed")
