"""In headless Chromium (issue 26): the job list fits a 1400 px window beside the admin's
navigation sidebar and the filters, with long job types and errors; a type name that has
to wrap wraps at its dots, never in the middle of a word."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from django_sqlq.models import Job, JobStatus
from tests.admin.test_browser import operator, page, shots

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

__all__ = ["operator", "page", "shots"]  # fixtures, used by name

# Type names as projects write them: dotted module paths with long last parts.
TYPES = [
    "shop.notifications.emails.send_order_confirmation_email",
    "reports.monthly.accounting.export_general_ledger_to_the_data_warehouse",
    "thumbnails.rebuild",
    "integrations.payments.stripe.webhooks.reconcile_disputed_charges",
]
ERROR = (
    "requests.exceptions.ConnectionError: HTTPSConnectionPool(host='api.payments.example."
    "com', port=443): Max retries exceeded with url: /v1/charges/ch_3Nq2sLd8k2a9Zx1y0"
)

# Where a type cell's text breaks onto a new line, each character before the break: a line
# of the cell that starts lower than the character before it starts a new line.
BREAKS = """
() => [...document.querySelectorAll('#result_list td.field-type_display')].map((td) => {
  const before = [];
  let top = null, previous = null;
  const walker = document.createTreeWalker(td, NodeFilter.SHOW_TEXT);
  while (walker.nextNode()) {
    const node = walker.currentNode;
    for (let i = 0; i < node.length; i++) {
      const range = document.createRange();
      range.setStart(node, i);
      range.setEnd(node, i + 1);
      const rect = range.getClientRects()[0];
      if (!rect || !node.data[i].trim()) continue;
      if (top !== null && rect.top > top + 2) before.push(previous);
      top = rect.top;
      previous = node.data[i];
    }
  }
  return [td.textContent.trim(), before];
})
"""

OVERFLOW = """
() => {
  const table = document.querySelector('#result_list');
  return {
    page: [document.documentElement.scrollWidth, document.documentElement.clientWidth],
    table: [Math.round(table.getBoundingClientRect().right), window.innerWidth],
    results: [...document.querySelectorAll('.results')].map(
      (el) => [el.scrollWidth, el.clientWidth]),
  };
}
"""


def test_the_job_list_fits_1400_px_and_type_names_wrap_at_dots(
    live_server: Any, page: Any, shots: Path, operator: tuple[str, str]
) -> None:
    from playwright.sync_api import expect

    now = timezone.now()
    Job.objects.bulk_create(
        Job(
            type=TYPES[i % len(TYPES)],
            queue="default",
            status=JobStatus.FAILED if i % 2 else JobStatus.PENDING,
            attempts=1 if i % 2 else 0,
            last_error=ERROR if i % 2 else "",
            scheduled_at=now,
        )
        for i in range(12)
    )
    # A running job that reports its progress, and whose cancel was requested.
    Job.objects.bulk_create([
        Job(
            type=TYPES[0], queue="default", status=JobStatus.PROCESSING, attempts=1,
            scheduled_at=now, locked_by="web-1:4121:5f0c2a1e", lease_expires_at=now,
            progress=0.4, progress_message="resized 40 of 100 images",
            progress_at=now, cancel_requested_at=now,
        )
    ])  # fmt: skip
    page.set_viewport_size({"width": 1400, "height": 900})
    page.goto(f"{live_server.url}/admin/")
    page.fill("#id_username", operator[0])
    page.fill("#id_password", operator[1])
    page.click("input[type=submit]")
    page.goto(f"{live_server.url}/admin/django_sqlq/job/")
    expect(page.locator("#changelist-filter")).to_be_visible()
    expect(page.locator("#result_list")).to_contain_text("ConnectionError")
    page.screenshot(path=str(shots / "admin-job-list-1400.png"), full_page=True)

    sizes = page.evaluate(OVERFLOW)
    scroll_width, client_width = sizes["page"]
    assert scroll_width <= client_width, sizes  # no horizontal scrolling of the page
    right, viewport = sizes["table"]
    assert right <= viewport, sizes  # the table's last column is on screen
    for inner, outer in sizes["results"]:
        assert inner <= outer, sizes  # nor scrolled inside its box

    for text, before in page.evaluate(BREAKS):
        assert set(before) <= {".", "_"}, f"{text!r} breaks after {before}"
