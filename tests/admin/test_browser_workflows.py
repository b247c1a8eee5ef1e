"""In headless Chromium (issue 16): an operator finds a blocked job, follows it to the chain
it waits for, watches the chain run to its end and the job released, and moves between a
chain's page and its steps' pages."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from django_sqlq import enqueue
from django_sqlq.models import Chain, Job, JobStatus
from django_sqlq.worker import Worker
from tests.admin.test_browser import operator, page, shots
from tests.testapp import workflow_jobs  # noqa: F401 (registers the handlers)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

__all__ = ["operator", "page", "shots"]  # fixtures, used by name


def test_an_operator_follows_a_blocked_job_to_its_chain_and_back(
    live_server: Any, page: Any, shots: Path, operator: tuple[str, str], tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    runs = tmp_path / "runs"
    first = enqueue("wf.step", {"path": str(runs), "n": 0, "of": 3})
    report = enqueue("wf.record", {"path": str(runs), "name": "report"}, depends_on=[first.chain])
    assert report.status == JobStatus.BLOCKED

    page.goto(f"{live_server.url}/admin/")
    page.fill("#id_username", operator[0])
    page.fill("#id_password", operator[1])
    page.click("input[type=submit]")

    # The dashboard counts the blocked job, and its link lists it.
    page.goto(f"{live_server.url}/admin/django_sqlq/job/dashboard/")
    blocked = page.locator('#sqlq-queues tr[data-queue="default"] [data-col="blocked"]')
    expect(blocked).to_have_text("1")
    blocked.get_by_role("link").click()
    expect(page.locator("#result_list .sqlq-badge.sqlq-blocked")).to_have_count(1)
    page.locator("#result_list").get_by_role("link", name=str(report.pk), exact=True).click()

    # Its page says what it waits for; the chain is a link.
    expect(page.locator("#sqlq-job-status")).to_have_text("Blocked")
    expect(page.locator(".sqlq-summary")).to_contain_text("Blocked: waits for 1 of the jobs")
    expect(page.locator("button.sqlq-cancel")).to_be_visible()
    expect(page.locator("button.sqlq-retry")).to_have_count(0)
    depends = page.locator(f'ul.sqlq-depends-on li[data-chain="{first.pk}"]')
    expect(depends).to_contain_text("not done yet")
    page.screenshot(path=str(shots / "admin-job-blocked.png"), full_page=True)
    depends.get_by_role("link", name=f"chain #{first.pk}").click()

    # The chain's page: one step so far, and the report waiting for it.
    expect(page.locator("h1")).to_have_text(f"Chain #{first.pk}")
    steps = page.locator("#sqlq-chain-steps tr.sqlq-step")
    expect(steps).to_have_count(1)
    expect(page.locator(f'#sqlq-chain-waiters li[data-job="{report.pk}"]')).to_be_visible()

    # A worker runs the chain to its end; the report runs after its last step.
    Worker(poll_interval=0.05).run(burst=True, install_signal_handlers=False)
    assert [line.split()[0] for line in runs.read_text().splitlines()] == [
        "0",
        "1",
        "2",
        "report",
    ]
    page.reload()
    expect(steps).to_have_count(3)
    chain = list(Chain(first.pk).jobs())
    for row, job in zip(steps.all(), chain, strict=True):
        expect(row).to_have_attribute("data-job", str(job.pk))
        expect(row.locator(".sqlq-badge")).to_have_text("Completed")
    expect(page.locator("#sqlq-chain-waiters")).to_contain_text("None")
    page.screenshot(path=str(shots / "admin-chain.png"), full_page=True)

    # A step's page leads back to its chain.
    middle = chain[1]
    steps.nth(1).get_by_role("link", name=f"#{middle.pk}").click()
    expect(page.locator("#sqlq-job-status")).to_have_text("Completed")
    link = page.locator("#sqlq-chain-link")
    expect(link).to_have_text(f"chain #{first.pk}, step 1")
    link.click()
    expect(page.locator("h1")).to_have_text(f"Chain #{first.pk}")
    assert Job.objects.get(pk=report.pk).status == JobStatus.COMPLETED
