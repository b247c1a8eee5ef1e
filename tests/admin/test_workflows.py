"""Workflows in the admin (issue 16), through Django's test client: a chain's page, what a
job's page says of its chain, its dependencies and the jobs that wait for it, the status
"blocked" on the lists and the dashboard, and the actions on blocked jobs."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from django_sqlq import Chain, bulk_enqueue, dashboard, enqueue
from django_sqlq.admin import chains
from django_sqlq.models import Job, JobBlocker, JobStatus
from tests.admin.test_admin import _act, login, make_job, messages_of, text, url
from tests.conftest import run_burst
from tests.testapp import workflow_jobs  # noqa: F401 (registers the handlers)

pytestmark = pytest.mark.django_db

__all__ = ["login"]  # a fixture, used by name


@pytest.fixture(autouse=True)
def _fresh_throughput_cache() -> Any:
    dashboard.clear_cache()
    yield
    dashboard.clear_cache()


def chain_of(n: int, **fields: Any) -> list[Job]:
    """A chain of ``n`` steps as the worker writes them: the first job's id on each step
    (the first one too), and each step's position."""
    first = make_job(type="tests.step", chain_index=0, **fields)
    first.chain_id = first.pk
    first.save(update_fields=["chain_id"])
    steps = [first]
    for index in range(1, n):
        steps.append(make_job(type="tests.step", chain_id=first.pk, chain_index=index, **fields))
    return steps


def rows_of(page: str, table: str) -> list[str]:
    """The ``data-job`` ids of the rows of the table (or list) ``table``, in order."""
    body = page.split(f'id="{table}"', 1)[1].split("</table>", 1)[0].split("</ul>", 1)[0]
    return re.findall(r'data-job="(\d+)"', body)


def blockers_left(page: str) -> str:
    """The job page's "Blockers left" value (Django 5.2 and 6.1 lay the row out apart)."""
    row = page.split('class="form-row field-blockers_left"', 1)[1].split('class="form-row', 1)[0]
    found = re.search(r'<div class="readonly">([^<]*)</div>', row)
    assert found is not None, row
    return found.group(1)


# -- the chain page ------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_the_chain_page_lists_every_step_in_order_with_links(login: Any, tmp_path: Path) -> None:
    first = enqueue("wf.step", {"path": str(tmp_path / "runs"), "n": 0, "of": 4})
    run_burst()
    steps = list(Chain(first.pk).jobs())
    assert len(steps) == 4
    response = login("viewer").get(url("job_chain", first.pk))
    assert response.status_code == 200
    page = text(response)
    assert f"Chain #{first.pk}" in page
    assert rows_of(page, "sqlq-chain-steps") == [str(s.pk) for s in steps]
    for step in steps:
        assert f'href="{url("job_change", step.pk)}"' in page
    assert page.count('<span class="sqlq-badge sqlq-completed">Completed</span>') >= 4
    assert page.count("<td>wf.step</td>") == 4
    assert page.count('<td class="sqlq-num">1/') == 4  # attempts
    last = page.split('id="sqlq-chain-state"', 1)[1].split("</p>", 1)[0]
    assert f">#{steps[-1].pk}</a>" in last
    assert "Completed" in last
    assert "sqlq-chain-truncated" not in page


def test_the_chain_page_shows_each_steps_times_and_run_time(login: Any) -> None:
    start = timezone.now() - timedelta(minutes=10)
    done, running, waiting = chain_of(3)
    Job.objects.filter(pk=done.pk).update(
        status=JobStatus.COMPLETED,
        attempts=2,
        started_at=start,
        completed_at=start + timedelta(seconds=2.5),
    )
    Job.objects.filter(pk=running.pk).update(
        status=JobStatus.PROCESSING,
        attempts=1,
        started_at=timezone.now() - timedelta(minutes=3),
        locked_by="w",
    )
    page = text(login("viewer").get(url("job_chain", done.pk)))
    rows = {
        job_id: row
        for job_id, row in re.findall(
            r'<tr class="[^"]*sqlq-step" data-job="(\d+)"[^>]*>(.*?)</tr>', page, re.S
        )
    }
    assert "2.50 s" in rows[str(done.pk)]
    assert re.search(r">2/\d+</td>", rows[str(done.pk)])
    assert "3 min so far" in rows[str(running.pk)]
    assert 'sqlq-badge sqlq-processing">Processing' in rows[str(running.pk)]
    # Not started: no start, no end, no run time.
    assert rows[str(waiting.pk)].count("<td>-</td>") == 2
    assert '<td class="sqlq-num">-</td>' in rows[str(waiting.pk)]


def test_the_chain_page_lists_the_jobs_waiting_for_the_chain(login: Any) -> None:
    steps = chain_of(2)
    on_chain = enqueue("tests.echo", {}, depends_on=[Chain(steps[0].pk)])
    on_first = enqueue("tests.echo", {}, depends_on=[steps[0]])  # the job, not the chain
    assert on_chain.status == JobStatus.BLOCKED
    page = text(login("viewer").get(url("job_chain", steps[0].pk)))
    assert rows_of(page, "sqlq-chain-waiters") == [str(on_chain.pk)]
    assert f'href="{url("job_change", on_chain.pk)}"' in page
    assert str(on_first.pk) not in rows_of(page, "sqlq-chain-waiters")


def test_a_chain_with_nothing_waiting_says_so(login: Any) -> None:
    steps = chain_of(2)
    page = text(login("viewer").get(url("job_chain", steps[0].pk)))
    assert "None: no blocked job waits for it" in page


def test_a_job_that_never_continued_is_a_chain_of_one(login: Any) -> None:
    job = make_job()
    waiter = enqueue("tests.echo", {}, depends_on=[job.chain])
    page = text(login("viewer").get(url("job_chain", job.pk)))
    assert rows_of(page, "sqlq-chain-steps") == [str(job.pk)]
    assert rows_of(page, "sqlq-chain-waiters") == [str(waiter.pk)]


def test_an_unknown_chain_is_a_404(login: Any) -> None:
    assert login("viewer").get(url("job_chain", 987654)).status_code == 404


def test_a_later_steps_id_leads_to_its_chain(login: Any) -> None:
    steps = chain_of(3)
    response = login("viewer").get(url("job_chain", steps[1].pk))
    assert response.status_code == 302
    assert response["Location"] == url("job_chain", steps[0].pk)


@pytest.mark.parametrize(
    ("role", "expected"), [("anonymous", 302), ("staff", 403), ("viewer", 200), ("superuser", 200)]
)
def test_the_chain_page_needs_the_view_permission(login: Any, role: str, expected: int) -> None:
    steps = chain_of(2)
    assert login(role).get(url("job_chain", steps[0].pk)).status_code == expected


def test_a_long_chain_shows_its_first_steps_then_its_last_and_says_so(
    login: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(chains, "MAX_CHAIN_STEPS", 5)
    steps = chain_of(9)
    page = text(login("viewer").get(url("job_chain", steps[0].pk)))
    assert rows_of(page, "sqlq-chain-steps") == [str(s.pk) for s in [*steps[:5], steps[-1]]]
    assert "the first 5 steps are shown, then the last one" in page
    assert f">#{steps[-1].pk}</a>" in page.split('id="sqlq-chain-state"', 1)[1].split("</p>")[0]


def test_the_chain_page_reads_a_bounded_number_of_steps(login: Any) -> None:
    steps = chain_of(3)
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as queries:
        login("viewer").get(url("job_chain", steps[0].pk))
    column = "`chain_index`" if connection.vendor == "mysql" else '"chain_index"'
    reads = [q["sql"] for q in queries if column in q["sql"] and "sqlq_job" in q["sql"]]
    assert reads
    for sql in reads:
        assert "LIMIT" in sql.upper(), sql


# -- the job page ---------------------------------------------------------------------------


def test_a_steps_page_links_its_chain(login: Any) -> None:
    steps = chain_of(3)
    page = text(login("viewer").get(url("job_change", steps[1].pk)))
    chain = url("job_chain", steps[0].pk)
    assert f'<a href="{chain}" id="sqlq-chain-link">chain #{steps[0].pk}, step 1</a>' in page
    assert f'href="{chain}" class="sqlq-chain-link"' in page  # in the live box too
    assert "Workflow" in page


def test_a_plain_job_has_no_workflow_section(login: Any) -> None:
    job = make_job()
    page = text(login("viewer").get(url("job_change", job.pk)))
    assert "Workflow" not in page
    assert "sqlq-chain-link" not in page


@pytest.mark.django_db(transaction=True)
def test_a_blocked_jobs_page_shows_what_it_waits_for_and_what_is_left(login: Any) -> None:
    later = enqueue("tests.echo", {}, delay=3600)
    soon = enqueue("tests.echo", {})
    waiter = enqueue(
        "tests.echo", {}, depends_on=[later, soon.chain], on_dependency_failure="cancel"
    )
    client = login("viewer")
    page = text(client.get(url("job_change", waiter.pk)))
    assert 'sqlq-badge sqlq-big sqlq-blocked" id="sqlq-job-status">Blocked' in page
    depends = page.split('class="sqlq-depends-on"', 1)[1].split("</ul>", 1)[0]
    assert f'<a href="{url("job_change", later.pk)}">job #{later.pk}</a>' in depends
    assert "sqlq-badge sqlq-scheduled" in depends
    assert f'<a href="{url("job_chain", soon.pk)}">chain #{soon.pk}</a>' in depends
    assert "not done yet" in depends
    assert blockers_left(page) == "2"
    assert "Cancel it" in page  # the policy
    assert "Blocked: waits for 2 of the jobs and chains it depends on" in page
    assert "If one fails or is cancelled: cancel it." in page

    run_burst()  # the chain of one completes; the scheduled job still waits
    page = text(client.get(url("job_change", waiter.pk)))
    depends = page.split('class="sqlq-depends-on"', 1)[1].split("</ul>", 1)[0]
    chain_item = re.search(rf'<li data-chain="{soon.pk}">(.*?)</li>', depends, re.S)
    assert chain_item is not None
    assert "done, or no longer waited for" in chain_item.group(1)
    assert blockers_left(page) == "1"
    assert "waits for 1 of the jobs" in page


def test_a_released_jobs_page_still_shows_what_it_waited_for(login: Any) -> None:
    done = make_job(status=JobStatus.COMPLETED, completed_at=timezone.now())
    job = enqueue("tests.echo", {}, depends_on=[done])
    assert job.status == JobStatus.PENDING  # nothing left to wait for
    page = text(login("viewer").get(url("job_change", job.pk)))
    assert f'<a href="{url("job_change", done.pk)}">job #{done.pk}</a>' in page
    assert "sqlq-badge sqlq-completed" in page.split('class="sqlq-depends-on"', 1)[1]
    assert "field-blockers_left" not in page  # only while blocked
    assert "Fail it" in page  # the default policy


def test_a_jobs_page_lists_the_blocked_jobs_waiting_for_it(login: Any) -> None:
    group = bulk_enqueue("tests.echo", [{"n": 1}, {"n": 2}])
    on_job = enqueue("tests.echo", {}, depends_on=[group[0]])
    fan_in = group.then("tests.echo", {})
    page = text(login("viewer").get(url("job_change", group[0].pk)))
    waiting = page.split('class="sqlq-waiters"', 1)[1].split("</ul>", 1)[0]
    assert re.findall(r'data-job="(\d+)"', waiting) == [str(on_job.pk), str(fan_in.pk)]
    assert f'href="{url("job_change", fan_in.pk)}"' in waiting
    fan_in_item = waiting.split(f'data-job="{fan_in.pk}"', 1)[1]
    assert "waits for the chain" in fan_in_item
    assert "waits for the chain" not in waiting.split(f'data-job="{fan_in.pk}"', 1)[0]
    # The other member: only the fan-in waits for it.
    other = text(login("viewer").get(url("job_change", group[1].pk)))
    assert re.findall(
        r'data-job="(\d+)"', other.split('class="sqlq-waiters"', 1)[1].split("</ul>", 1)[0]
    ) == [str(fan_in.pk)]


# -- "blocked" on the lists and the dashboard ----------------------------------------------


def test_the_status_filter_offers_blocked_and_the_list_shows_its_badge(login: Any) -> None:
    later = enqueue("tests.echo", {}, delay=3600)
    blocked = enqueue("tests.echo", {}, depends_on=[later])
    client = login("viewer")
    page = text(client.get(url("job_changelist")))
    assert "?status__exact=blocked" in page
    page = text(client.get(url("job_changelist") + "?status__exact=blocked"))
    ids = re.findall(r'href="/admin/django_sqlq/job/(\d+)/change/', page)
    assert ids == [str(blocked.pk)]
    assert '<span class="sqlq-badge sqlq-blocked">Blocked</span>' in page


def test_the_dashboard_counts_blocked_jobs_per_queue(login: Any) -> None:
    later = enqueue("tests.echo", {}, delay=3600)
    for _ in range(2):
        enqueue("tests.echo", {}, queue="emails", depends_on=[later])
    enqueue("tests.echo", {}, queue="reports", depends_on=[later])
    page = text(login("viewer").get(url("job_dashboard")))
    assert ">Blocked</th>" in page
    emails = re.search(r'data-queue="emails">(.*?)</tr>', page, re.S)
    assert emails is not None
    assert re.search(
        r'data-col="blocked"><a href="[^"]*queue=emails&amp;status__exact=blocked">2</a>',
        emails.group(1),
    )
    reports = re.search(r'data-queue="reports">(.*?)</tr>', page, re.S)
    assert reports is not None
    assert re.search(r'data-col="blocked"><a [^>]*>1</a>', reports.group(1))
    default = re.search(r'data-queue="default">(.*?)</tr>', page, re.S)
    assert default is not None
    assert 'data-col="blocked"><span class="sqlq-zero">0</span>' in default.group(1)
    total = page.split('class="sqlq-total"', 1)[1].split("</tr>", 1)[0]
    assert re.findall(r'<td class="sqlq-num">(\d+)</td>', total)[4] == "3"  # the blocked column


def test_the_dashboard_counts_a_blocked_job_once_whatever_it_waits_for() -> None:
    a = enqueue("tests.echo", {}, delay=3600)
    b = enqueue("tests.echo", {}, delay=3600)
    enqueue("tests.echo", {}, queue="emails", depends_on=[a, b, a.chain])
    assert JobBlocker.objects.count() == 3
    rows = {q.name: q for q in dashboard.queue_rows("default", timezone.now())}
    assert rows["emails"].blocked == 1


# -- actions on blocked jobs -----------------------------------------------------------------


def test_a_blocked_jobs_page_offers_cancel_and_delete_only(login: Any) -> None:
    later = enqueue("tests.echo", {}, delay=3600)
    blocked = enqueue("tests.echo", {}, depends_on=[later])
    page = text(login("superuser").get(url("job_change", blocked.pk)))
    assert f'action="{url("job_cancel", blocked.pk)}"' in page
    assert f'action="{url("job_retry", blocked.pk)}"' not in page
    assert f'action="{url("job_run_now", blocked.pk)}"' not in page
    assert f'href="{url("job_delete", blocked.pk)}"' in page
    assert "data-sqlq-refresh" in page  # it is not finished: the box follows it


def test_cancelling_a_blocked_job_from_its_page_decides_its_waiters(login: Any) -> None:
    later = enqueue("tests.echo", {}, delay=3600)
    blocked = enqueue("tests.echo", {}, depends_on=[later])
    below = enqueue("tests.echo", {}, depends_on=[blocked])  # policy "fail"
    response = login("operator").post(url("job_cancel", blocked.pk), follow=True)
    assert messages_of(response) == ["Cancelled 1 job."]
    blocked.refresh_from_db()
    below.refresh_from_db()
    assert blocked.status == JobStatus.CANCELLED
    assert below.status == JobStatus.FAILED
    assert f"job id={blocked.pk}, which this job depends on, cancelled" in below.last_error
    assert not JobBlocker.objects.filter(job_id__in=[blocked.pk, below.pk]).exists()


def test_bulk_cancel_accepts_blocked_jobs(login: Any) -> None:
    later = enqueue("tests.echo", {}, delay=3600)
    blocked = enqueue("tests.echo", {}, depends_on=[later])
    done = make_job(status=JobStatus.COMPLETED)
    response = _act(login("operator"), "cancel_jobs", [blocked, done])
    assert messages_of(response) == [
        "Cancelled 1 job. Skipped 1 job (1 completed): only blocked, scheduled, pending or "
        "running jobs can be cancelled."
    ]
    assert Job.objects.get(pk=blocked.pk).status == JobStatus.CANCELLED
    assert Job.objects.get(pk=later.pk).status == JobStatus.SCHEDULED  # what it waited for


@pytest.mark.parametrize(
    ("action", "message"),
    [
        (
            "run_jobs_now",
            "Skipped 1 job (1 blocked): only jobs scheduled in the future can be brought forward.",
        ),
        ("retry_jobs", "Skipped 1 job (1 blocked): only failed or cancelled jobs can be retried."),
    ],
)
def test_retry_and_run_now_leave_a_blocked_job_alone(
    login: Any, action: str, message: str
) -> None:
    later = enqueue("tests.echo", {}, delay=3600)
    blocked = enqueue("tests.echo", {}, depends_on=[later])
    response = _act(login("operator"), action, [blocked])
    assert messages_of(response)[0].endswith(message)
    blocked.refresh_from_db()
    assert blocked.status == JobStatus.BLOCKED
    assert blocked.blockers_left == 1


def test_bulk_delete_deletes_blocked_jobs_and_decides_their_waiters(login: Any) -> None:
    later = enqueue("tests.echo", {}, delay=3600)
    blocked = enqueue("tests.echo", {}, depends_on=[later])
    below = enqueue("tests.echo", {}, depends_on=[blocked], on_dependency_failure="run")
    response = _act(login("operator"), "delete_jobs", [blocked], post="yes")
    assert messages_of(response) == ["Deleted 1 job."]
    assert not Job.objects.filter(pk=blocked.pk).exists()
    below.refresh_from_db()
    assert below.status == JobStatus.PENDING  # policy "run": a deleted dependency is done


def test_blocked_jobs_are_counted_by_primary_key_not_by_reading_the_table() -> None:
    """The dashboard's (and the metrics') count of blocked jobs starts from the blockers'
    table and finds each job by its primary key: the finished rows are never read."""
    from django.test.utils import CaptureQueriesContext

    Job.objects.bulk_create([Job(type="t", status=JobStatus.COMPLETED) for _ in range(3000)])
    later = enqueue("tests.echo", {}, delay=3600)
    for _ in range(3):
        enqueue("tests.echo", {}, depends_on=[later])
    with CaptureQueriesContext(connection) as queries:
        rows = dashboard.queue_rows("default", timezone.now())
    assert {q.name: q.blocked for q in rows}["default"] == 3
    (sql,) = [q["sql"] for q in queries if "sqlq_job_blocker" in q["sql"]]
    with connection.cursor() as cursor:
        if connection.vendor == "mysql":
            _assert_mariadb_reads_only_the_blocked_rows(cursor, sql)
            return
        cursor.execute("ANALYZE")
        if connection.vendor == "sqlite":
            cursor.execute(f"EXPLAIN QUERY PLAN {sql}")
            plan = " | ".join(str(row[-1]) for row in cursor.fetchall())
            assert "SEARCH sqlq_job USING INTEGER PRIMARY KEY" in plan, plan
        else:
            cursor.execute(f"EXPLAIN {sql}")
            plan = " | ".join(str(row[0]) for row in cursor.fetchall())
            assert "sqlq_job_pkey" in plan, plan
            assert not re.search(r"Seq Scan on sqlq_job\s", plan), plan


def _assert_mariadb_reads_only_the_blocked_rows(cursor: Any, sql: str) -> None:
    """MariaDB joins the blockers' table (its live rows only: a blocker's row goes when it
    is released) to the jobs either by primary key, or through the blocked rows alone (a
    range of an index led by status: MariaDB has no partial index, those hold every row):
    never a scan of the jobs' table, whose finished rows are most of it. (No ANALYZE TABLE:
    it commits, and this test's rows are rolled back.)"""
    cursor.execute(
        "SELECT index_name FROM information_schema.statistics WHERE table_schema = DATABASE() "
        "AND table_name = 'sqlq_job' AND seq_in_index = 1 AND column_name = 'status'"
    )
    status_led = {row[0] for row in cursor.fetchall()}
    cursor.execute(f"EXPLAIN {sql}")
    columns = [column[0] for column in cursor.description]
    steps = [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]
    (jobs,) = [step for step in steps if step["table"] == "sqlq_job"]
    assert jobs["type"] in ("eq_ref", "ref"), steps
    if jobs["key"] != "PRIMARY":
        assert jobs["key"] in status_led, (steps, status_led)
        assert jobs["ref"] == "const", steps  # status = 'blocked'
    assert any(step["table"] in ("U0", "sqlq_job_blocker") for step in steps), steps
