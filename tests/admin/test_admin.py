"""The admin, through Django's test client: lists, filters, the job page, the dashboard,
actions and their permissions, escaping, and what the lists cost on a big table."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.contrib import admin
from django.contrib.auth.models import Permission
from django.db import connection
from django.test import Client, override_settings
from django.test.utils import CaptureQueriesContext
from django.urls import NoReverseMatch, reverse
from django.utils import timezone
from django.utils.html import strip_tags

from django_sqlq import dashboard, enqueue
from django_sqlq.admin import BoundedCountPaginator
from django_sqlq.db import json_depth_limit
from django_sqlq.jsoncodec import MAX_DEPTH
from django_sqlq.models import FailedJob, Job, JobStatus, WorkerProcess

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_throughput_cache() -> Any:
    dashboard.clear_cache()
    yield
    dashboard.clear_cache()


XSS = "<script>alert(1)</script>"
TRACEBACK = (
    "tests.testapp.jobs.Boom: it went boom: bad input\n\n"
    "Traceback (most recent call last):\n"
    '  File "jobs.py", line 34, in boom\n'
    "tests.testapp.jobs.Boom: it went boom: bad input"
)


def make_job(**fields: Any) -> Job:
    values: dict[str, Any] = {"type": "tests.echo", "queue": "default", "payload": {"n": 1}}
    values.update(fields)
    job = Job.objects.create(**values)
    job.refresh_from_db()
    return job


def failed_job(**fields: Any) -> Job:
    values: dict[str, Any] = {
        "status": JobStatus.FAILED,
        "attempts": 3,
        "max_attempts": 3,
        "last_error": TRACEBACK,
        "errors": [
            {
                "attempt": 3,
                "worker_id": "host:1:abc",
                "exception_class": "tests.testapp.jobs.Boom",
                "message": "it went boom: bad input",
                "traceback": "Traceback (most recent call last):\n  ...",
            }
        ],
        "locked_by": "host:1:abc",
        "completed_at": timezone.now(),
    }
    values.update(fields)
    return make_job(**values)


# -- users --------------------------------------------------------------------------------

ROLES = ("anonymous", "staff", "viewer", "superuser")


def _user(django_user_model: Any, name: str, *codenames: str, superuser: bool = False) -> Any:
    user = django_user_model.objects.create_user(
        name, password="pw", is_staff=True, is_superuser=superuser
    )
    for codename in codenames:
        user.user_permissions.add(
            Permission.objects.get(content_type__app_label="django_sqlq", codename=codename)
        )
    return user


@pytest.fixture
def login(django_user_model: Any) -> Any:
    """login(role) -> a Client: anonymous, staff (no permission), viewer (view jobs only),
    operator (every job permission), superuser; or login("custom", perm, ...)."""

    made = 0

    def make(role: str, *codenames: str) -> Client:
        nonlocal made
        made += 1
        client = Client()
        if role == "anonymous":
            return client
        perms = {
            "staff": (),
            "viewer": ("view_job",),
            "operator": ("view_job", "change_job", "delete_job", "retry_job", "cancel_job"),
            "superuser": (),
        }.get(role, codenames)
        user = _user(django_user_model, f"{role}{made}", *perms, superuser=role == "superuser")
        client.force_login(user)
        return client

    return make


def url(name: str, *args: Any) -> str:
    return reverse(f"admin:django_sqlq_{name}", args=args)


def text(response: Any) -> str:
    return str(response.content.decode())


def messages_of(response: Any) -> list[str]:
    return [str(m) for m in response.context["messages"]] if response.context else []


# -- who may see what ---------------------------------------------------------------------

PAGES = [
    ("job_changelist", False),
    ("failedjob_changelist", False),
    ("job_change", True),
    ("failedjob_change", True),
    ("job_summary", True),
    ("job_dashboard", False),
    ("job_dashboard_live", False),
    ("job_dashboard_charts", False),
    ("job_dashboard_alerts", False),
    ("workerprocess_changelist", False),
]


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize(("page", "takes_id"), PAGES)
def test_every_page_needs_staff_and_the_view_permission(
    login: Any, role: str, page: str, takes_id: bool
) -> None:
    job = failed_job()
    client = login(role)
    if page == "workerprocess_changelist" and role == "viewer":
        client = login("custom", "view_workerprocess")
    response = client.get(url(page, job.pk) if takes_id else url(page))
    expected = {"anonymous": 302, "staff": 403, "viewer": 200, "superuser": 200}[role]
    assert response.status_code == expected, (page, role)
    if role == "anonymous":
        assert response["Location"].startswith(reverse("admin:login"))


def test_the_admin_index_lists_jobs_failed_jobs_and_workers(login: Any) -> None:
    response = login("superuser").get(reverse("admin:index"))
    for name in ("job_changelist", "failedjob_changelist", "workerprocess_changelist"):
        assert url(name) in text(response)
    assert "Failed jobs" in text(response)


@pytest.mark.parametrize("role", ["viewer", "superuser"])
def test_the_admin_index_links_the_dashboard(login: Any, role: str) -> None:
    """ "Queue dashboard" sits in the main admin index beside the lists and opens it."""
    client = login(role)
    response = client.get(reverse("admin:index"))
    assert url("queuedashboard_changelist") in text(response)
    assert "Queue dashboard" in text(response)
    opened = client.get(url("queuedashboard_changelist"))
    assert opened.status_code == 302
    assert opened["Location"] == url("job_dashboard")
    assert client.get(opened["Location"]).status_code == 200


@pytest.mark.parametrize("role", ["anonymous", "staff"])
def test_the_dashboard_entry_is_not_for_everyone(login: Any, role: str) -> None:
    client = login(role)
    if role == "staff":
        assert url("queuedashboard_changelist") not in text(client.get(reverse("admin:index")))
    response = client.get(url("queuedashboard_changelist"))
    expected = {"anonymous": 302, "staff": 403}[role]
    assert response.status_code == expected
    if role == "anonymous":
        assert response["Location"].startswith(reverse("admin:login"))
    with pytest.raises(NoReverseMatch):  # the entry is a link, not a model to edit
        url("queuedashboard_add")


def test_the_app_index_links_the_dashboard(login: Any) -> None:
    response = login("viewer").get(reverse("admin:app_list", args=["django_sqlq"]))
    assert url("job_dashboard") in text(response)
    assert url("job_dashboard_alerts") in text(response)  # loaded live by refresh.js
    assert "django_sqlq/refresh.js" in text(response)


def test_a_staff_user_without_permissions_sees_no_dashboard_link(login: Any) -> None:
    client = login("custom", "view_workerprocess")
    response = client.get(reverse("admin:app_list", args=["django_sqlq"]))
    assert response.status_code == 200
    assert url("job_dashboard") not in text(response)


def test_the_failed_jobs_list_accepts_the_jobs_permissions_or_its_own(login: Any) -> None:
    failed_job()
    assert login("viewer").get(url("failedjob_changelist")).status_code == 200
    own = login("custom", "view_failedjob")
    assert own.get(url("failedjob_changelist")).status_code == 200
    assert own.get(url("job_changelist")).status_code == 403


# -- the jobs list ------------------------------------------------------------------------


def test_the_list_shows_the_columns_newest_first(login: Any) -> None:
    older = make_job(type="tests.add", priority=7, max_attempts=4, attempts=1)
    newer = failed_job(type="tests.boom", queue="emails")
    response = login("viewer").get(url("job_changelist"))
    page = text(response)
    assert [job.pk for job in response.context["cl"].result_list] == [newer.pk, older.pk]
    assert '<span class="sqlq-badge sqlq-failed">Failed</span>' in page
    assert '<span class="sqlq-badge sqlq-pending">Pending</span>' in page
    assert "1/4" in page
    assert "3/3" in page
    assert "tests.testapp.jobs.Boom: it went boom: bad input" in page
    assert "Traceback (most recent call last)" not in page  # one line of the error only
    assert "2 jobs" in page
    for header in (
        "Type",
        "Queue",
        "Status",
        "Priority",
        "Attempts",
        "Scheduled",
        "Created",
        "Error",
    ):
        assert f">{header}<" in page or f">{header}</" in page, header


def test_the_list_reads_the_head_of_the_error_and_not_the_json_columns(login: Any) -> None:
    failed_job(payload={"big": "x" * 1000})
    with CaptureQueriesContext(connection) as queries:
        login("viewer").get(url("job_changelist"))
    if connection.vendor == "mysql":  # names quoted with backticks
        page_query = next(q["sql"] for q in queries if "`sqlq_job`.`type`" in q["sql"])
        assert "`sqlq_job`.`payload`" not in page_query
        assert "`sqlq_job`.`errors`" not in page_query
        return
    page_query = next(q["sql"] for q in queries if '"sqlq_job"."type"' in q["sql"])
    assert '"sqlq_job"."payload"' not in page_query
    assert '"sqlq_job"."errors"' not in page_query


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("status__exact=failed", {"failed"}),
        ("status__exact=pending", {"due", "future"}),
        ("status__exact=scheduled", {"later"}),
        ("queue=emails", {"emails"}),
        ("type=tests.add", {"add"}),
        ("when=future", {"future", "later"}),
        ("when=due", {"due"}),
        ("q=tests.ad", {"add"}),
        ("q=add", {"add"}),
    ],
)
def test_filters_and_search(login: Any, query: str, expected: set[str]) -> None:
    now = timezone.now()
    jobs = {
        "failed": failed_job(type="tests.boom"),
        "due": make_job(scheduled_at=now - timedelta(minutes=1)),
        "future": make_job(scheduled_at=now + timedelta(hours=1)),
        "later": make_job(scheduled_at=now + timedelta(hours=1), status=JobStatus.SCHEDULED),
        "emails": make_job(queue="emails", status=JobStatus.COMPLETED),
        "add": make_job(type="tests.add", status=JobStatus.COMPLETED),
    }
    response = login("viewer").get(f"{url('job_changelist')}?{query}")
    assert response.status_code == 200
    shown = {job.pk for job in response.context["cl"].result_list}
    assert shown == {jobs[name].pk for name in expected}


@pytest.mark.parametrize("term", ["{pk}", "#{pk}", " {pk} "])
def test_search_by_id(login: Any, term: str) -> None:
    make_job()
    job = make_job()
    response = login("viewer").get(url("job_changelist"), {"q": term.format(pk=job.pk)})
    assert [j.pk for j in response.context["cl"].result_list] == [job.pk]


@pytest.mark.parametrize("term", ["{uuid}", "{uuid.hex}", " {uuid} "])
def test_search_by_uuid_finds_a_tasks_job_from_its_result_id(login: Any, term: str) -> None:
    make_job()
    job = make_job()
    response = login("viewer").get(url("job_changelist"), {"q": term.format(uuid=job.uuid)})
    assert [j.pk for j in response.context["cl"].result_list] == [job.pk]


def test_filter_choices_come_from_settings_registry_and_newest_rows(login: Any) -> None:
    make_job(queue="legacy", type="old.module.task")
    response = login("viewer").get(url("job_changelist"))
    choices = {
        # The type names are HTML: <wbr> where a long name may wrap.
        spec.title: [strip_tags(c["display"]) for c in spec.choices(response.context["cl"])]
        for spec in response.context["cl"].filter_specs
    }
    queues = choices["queue"]
    assert queues[1:4] == ["default", "emails", "reports"]  # SQLQ["QUEUES"], in order
    assert "legacy" in queues  # seen among the newest rows
    assert "tests.boom" in choices["type"]  # registered handler, no row needed
    assert "old.module.task" in choices["type"]


def test_the_selected_queue_stays_a_choice_even_when_not_sampled(login: Any) -> None:
    response = login("viewer").get(url("job_changelist"), {"queue": "nowhere"})
    spec = next(s for s in response.context["cl"].filter_specs if s.title == "queue")
    assert "nowhere" in [c["display"] for c in spec.choices(response.context["cl"])]


def test_only_the_id_column_sorts(login: Any) -> None:
    make_job(priority=5)
    newest = make_job(priority=-5)
    # "o=5" asks to sort by priority: not offered (no index for it), so ignored.
    response = login("viewer").get(url("job_changelist"), {"o": "5"})
    assert response.context["cl"].result_list[0].pk == newest.pk
    assert 'class="sortable' in text(response)
    assert text(response).count('class="sortable') == 1


# -- the lists on a big table -------------------------------------------------------------


@pytest.fixture
def small_pages(monkeypatch: Any) -> None:
    """Count at most 10 rows and show 4 a page, so 30 rows behave like millions."""
    monkeypatch.setattr(BoundedCountPaginator, "count_limit", 10)
    for model in (Job, FailedJob):
        monkeypatch.setattr(admin.site._registry[model], "list_per_page", 4)


def _job_queries(queries: CaptureQueriesContext) -> list[str]:
    return [q["sql"] for q in queries if "sqlq_job" in q["sql"]]


@pytest.mark.parametrize(
    "query", ["", "?status__exact=failed", "?queue=default&type=tests.echo", "?q=echo", "?p=3"]
)
@pytest.mark.usefixtures("small_pages")
def test_the_list_never_counts_or_scans_the_whole_table(login: Any, query: str) -> None:
    Job.objects.bulk_create(
        [Job(type="tests.echo", status=JobStatus.FAILED, last_error="x") for _ in range(30)]
    )
    client = login("viewer")
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url("job_changelist") + query)
    assert response.status_code == 200
    job_sql = _job_queries(queries)
    assert job_sql
    for sql in job_sql:
        # Every read of the jobs table is bounded: the page, the bounded count, the
        # newest rows sampled for the filter choices.
        assert "LIMIT" in sql.upper(), sql
    counts = [sql for sql in job_sql if "COUNT(" in sql.upper()]
    assert len(counts) == 1
    assert re.search(r"LIMIT 11\b", counts[0]), counts[0]
    page = text(response)
    assert "More than 10 jobs" in page
    assert "30" not in re.sub(r"\d{2,}:", "", page.split('class="paginator"')[1])


@pytest.mark.usefixtures("small_pages")
def test_pages_go_on_past_the_counting_limit(login: Any) -> None:
    jobs = Job.objects.bulk_create([Job(type="tests.echo") for _ in range(30)])
    client = login("viewer")
    ids = sorted((j.pk for j in Job.objects.all()), reverse=True)
    seen: list[int] = []
    for number in range(1, 9):
        response = client.get(url("job_changelist"), {"p": number})
        assert response.status_code == 200
        cl = response.context["cl"]
        seen += [job.pk for job in cl.result_list]
        if number < 8:
            assert str(number + 1) in [str(p) for p in cl.paginator.get_elided_page_range(number)]
    assert seen == ids
    assert len(jobs) == 30
    # Past the last page: Django's "invalid page" redirect, as for any list.
    assert client.get(url("job_changelist"), {"p": 9}).status_code == 302


def test_a_small_list_is_counted_exactly(login: Any) -> None:
    failed_job()
    failed_job()
    response = login("viewer").get(url("failedjob_changelist"))
    assert "2 failed jobs" in text(response)
    assert response.context["cl"].paginator.count_is_exact


# -- the failed jobs ----------------------------------------------------------------------


def test_the_failed_list_shows_only_failed_jobs_error_first(login: Any) -> None:
    failed = failed_job(type="tests.boom")
    make_job(status=JobStatus.COMPLETED)
    make_job()
    response = login("operator").get(url("failedjob_changelist"))
    assert [j.pk for j in response.context["cl"].result_list] == [failed.pk]
    headers = re.findall(r'<th scope="col" class="[^"]*column-(\w+)', text(response))
    assert headers[:2] == ["id", "error_line"]
    actions = dict(response.context["action_form"].fields["action"].choices)
    assert "retry_jobs" in actions
    assert "cancel_jobs" not in actions


# -- the job page -------------------------------------------------------------------------


def test_the_job_page_shows_everything_read_only(login: Any) -> None:
    job = failed_job(payload={"to": "a@example.com", "n": [1, 2]}, result={"sent": False})
    WorkerProcess.objects.create(worker_id="host:1:abc", hostname="web-3", pid=4242)
    response = login("superuser").get(url("job_change", job.pk))
    page = text(response)
    assert f"Job #{job.pk}: tests.echo" in page  # the admin keeps numeric ids...
    assert str(job.uuid) in page  # ... and shows the public one (the tasks' result id)
    assert "&quot;to&quot;: &quot;a@example.com&quot;" in page  # pretty JSON, escaped
    assert "  &quot;n&quot;: [\n    1,\n    2\n  ]," in page
    assert "&quot;sent&quot;: false" in page
    assert "File &quot;jobs.py&quot;, line 34, in boom" in page  # the full traceback
    assert "Attempt 3 on host:1:abc: tests.testapp.jobs.Boom" in page  # per attempt
    assert "host:1:abc" in page
    assert "web-3" in page
    assert "4242" in page
    assert 'name="_save"' not in page  # nothing to save: read-only
    # The error comes before the payload on a failed job's page.
    assert page.index("Traceback (most recent call last)") < page.index("a@example.com")


def test_the_job_page_refuses_a_post(login: Any) -> None:
    job = make_job()
    response = login("superuser").post(url("job_change", job.pk), {"type": "x"})
    assert response.status_code == 403


BUTTONS = {"retry": "Retry now", "cancel": "Cancel", "run_now": "Run now"}


@pytest.mark.parametrize(
    ("status", "future", "buttons", "delete"),
    [
        (JobStatus.FAILED, False, {"retry"}, True),
        (JobStatus.CANCELLED, False, {"retry"}, True),
        (JobStatus.PENDING, False, {"cancel"}, True),
        (JobStatus.PENDING, True, {"cancel", "run_now"}, True),
        (JobStatus.PROCESSING, False, {"cancel"}, False),
        (JobStatus.COMPLETED, False, set(), True),
    ],
)
def test_the_job_page_offers_the_actions_that_apply(
    login: Any, status: str, future: bool, buttons: set[str], delete: bool
) -> None:
    when = timezone.now() + timedelta(hours=1 if future else -1)
    job = make_job(status=status, scheduled_at=when)
    page = text(login("superuser").get(url("job_change", job.pk)))
    for name, label in BUTTONS.items():
        form = f'action="{url(f"job_{name}", job.pk)}"'
        assert (form in page) == (name in buttons), name
        if name in buttons:
            assert label in page
    assert (f'href="{url("job_delete", job.pk)}"' in page) == delete
    assert ("data-sqlq-refresh" in page) == (status in (JobStatus.PENDING, JobStatus.PROCESSING))


def test_the_job_page_shows_only_the_buttons_the_user_may_use(login: Any) -> None:
    job = failed_job()
    page = text(login("viewer").get(url("job_change", job.pk)))
    assert url("job_retry", job.pk) not in page
    assert url("job_delete", job.pk) not in page
    page = text(login("custom", "view_job", "retry_job").get(url("job_change", job.pk)))
    assert url("job_retry", job.pk) in page
    assert url("job_delete", job.pk) not in page


def test_the_summary_fragment_marks_a_finished_job_final(login: Any) -> None:
    job = make_job()
    client = login("viewer")
    assert "data-sqlq-final" not in text(client.get(url("job_summary", job.pk)))
    Job.objects.filter(pk=job.pk).update(status=JobStatus.COMPLETED)
    fragment = text(client.get(url("job_summary", job.pk)))
    assert "data-sqlq-final" in fragment
    assert ">Completed<" in fragment
    assert "<html" not in fragment


# -- actions on one job -------------------------------------------------------------------

SINGLE = [
    ("retry", "retry_job", JobStatus.FAILED, JobStatus.PENDING),
    ("cancel", "cancel_job", JobStatus.PENDING, JobStatus.CANCELLED),
    ("run_now", "change_job", JobStatus.PENDING, JobStatus.PENDING),
]


@pytest.mark.parametrize(("name", "perm", "before", "after"), SINGLE)
def test_a_job_page_action_changes_the_job_and_says_so(
    login: Any, name: str, perm: str, before: str, after: str
) -> None:
    later = timezone.now() + timedelta(days=1)
    job = failed_job(status=before, scheduled_at=later)
    client = login("custom", "view_job", perm)
    response = client.post(url(f"job_{name}", job.pk), follow=True)
    assert response.redirect_chain[-1][0] == url("job_change", job.pk)
    job.refresh_from_db()
    assert job.status == after
    assert job.scheduled_at < later if name in ("retry", "run_now") else True
    if name == "retry":
        assert job.attempts == 0
    assert any(m.startswith(("Retried 1 job", "Cancelled 1 job", "Scheduled 1 job")) for m in
               messages_of(response))  # fmt: skip


@pytest.mark.parametrize(("name", "perm", "before", "after"), SINGLE)
@pytest.mark.parametrize("role", ["anonymous", "staff", "viewer", "wrong-permission"])
def test_a_job_page_action_needs_its_permission(
    login: Any,
    name: str,
    perm: str,
    before: str,
    after: str,  # noqa: ARG001 (the table is shared with the test that checks it)
    role: str,
) -> None:
    job = failed_job(status=before, scheduled_at=timezone.now() + timedelta(days=1))
    if role == "wrong-permission":
        others = {"retry_job", "cancel_job", "change_job", "delete_job"} - {perm}
        client = login("custom", "view_job", *others)
    else:
        client = login(role)
    response = client.post(url(f"job_{name}", job.pk))
    assert response.status_code == (302 if role == "anonymous" else 403)
    if role == "anonymous":
        assert response["Location"].startswith(reverse("admin:login"))
    assert Job.objects.get(pk=job.pk).status == before
    assert Job.objects.get(pk=job.pk).scheduled_at == job.scheduled_at


@pytest.mark.parametrize("name", ["retry", "cancel", "run_now"])
def test_a_job_page_action_is_post_only_with_csrf(login: Any, name: str) -> None:
    job = failed_job()
    client = login("superuser")
    assert client.get(url(f"job_{name}", job.pk)).status_code == 405
    strict = Client(enforce_csrf_checks=True)
    strict.cookies = client.cookies
    assert strict.post(url(f"job_{name}", job.pk)).status_code == 403
    assert Job.objects.get(pk=job.pk).status == JobStatus.FAILED


def test_a_job_page_action_on_a_job_in_the_wrong_status_is_skipped_with_the_reason(
    login: Any,
) -> None:
    job = make_job(status=JobStatus.COMPLETED)
    response = login("superuser").post(url("job_retry", job.pk), follow=True)
    assert messages_of(response) == [
        "Retried 0 jobs: they are pending again, runnable now. Skipped 1 job (1 completed): "
        "only failed or cancelled jobs can be retried."
    ]
    assert Job.objects.get(pk=job.pk).status == JobStatus.COMPLETED


def test_a_job_that_started_running_meanwhile_gets_a_cancel_request_not_corrupted(
    login: Any,
) -> None:
    job = make_job()
    claimed = False

    def worker_claims_first(execute: Any, sql: str, *args: Any) -> Any:
        # A worker claims the job between the admin's read and its write (the UPDATE).
        nonlocal claimed
        if not claimed and sql.lstrip().startswith("UPDATE") and Job._meta.db_table in sql:
            claimed = True
            Job.objects.filter(pk=job.pk).update(
                status=JobStatus.PROCESSING, locked_by="w1", attempts=1
            )
        return execute(sql, *args)

    client = login("superuser")
    with connection.execute_wrapper(worker_claims_first):
        response = client.post(url("job_cancel", job.pk), follow=True)
    assert claimed
    job.refresh_from_db()
    assert (job.status, job.locked_by, job.attempts) == (JobStatus.PROCESSING, "w1", 1)
    assert job.cancel_requested_at is not None  # its worker is asked to stop it
    (message,) = messages_of(response)
    assert message.startswith("Cancel requested for 1 running job")


def test_a_missing_job_is_reported(login: Any) -> None:
    response = login("superuser").post(url("job_retry", 999999), follow=True)
    assert response.status_code == 200
    assert any("exist" in m for m in messages_of(response))


def test_retry_from_the_failed_jobs_page_lands_on_the_job_page(login: Any) -> None:
    job = failed_job()
    response = login("superuser").post(url("failedjob_retry", job.pk), follow=True)
    assert response.redirect_chain[-1][0] == url("job_change", job.pk)
    assert Job.objects.get(pk=job.pk).status == JobStatus.PENDING


def test_deleting_one_job_uses_the_admin_delete_page(login: Any) -> None:
    job = failed_job()
    client = login("operator")
    assert client.get(url("job_delete", job.pk)).status_code == 200
    response = client.post(url("job_delete", job.pk), {"post": "yes"}, follow=True)
    assert response.status_code == 200
    assert not Job.objects.filter(pk=job.pk).exists()


def test_a_running_job_cannot_be_deleted_from_its_page(login: Any) -> None:
    job = make_job(status=JobStatus.PROCESSING, locked_by="w1")
    client = login("operator")
    for method in (client.get, client.post):
        response = method(url("job_delete", job.pk), follow=True)
        assert response.redirect_chain[-1][0] == url("job_change", job.pk)
    assert Job.objects.filter(pk=job.pk).exists()
    assert any("is running" in m for m in messages_of(response))


def test_delete_needs_the_delete_permission(login: Any) -> None:
    job = failed_job()
    client = login("custom", "view_job", "retry_job", "cancel_job", "change_job")
    assert client.post(url("job_delete", job.pk), {"post": "yes"}).status_code == 403
    assert Job.objects.filter(pk=job.pk).exists()


# -- bulk actions on the lists ------------------------------------------------------------


def _act(
    client: Client, action: str, jobs: list[Job], changelist: str = "job", **extra: Any
) -> Any:
    data = {"action": action, "_selected_action": [j.pk for j in jobs], "index": 0, **extra}
    return client.post(url(f"{changelist}_changelist"), data, follow=True)


def test_bulk_retry_resets_failed_and_cancelled_and_skips_the_rest(login: Any) -> None:
    failed = failed_job()
    cancelled = make_job(status=JobStatus.CANCELLED, attempts=2)
    done = make_job(status=JobStatus.COMPLETED)
    running = make_job(status=JobStatus.PROCESSING, locked_by="w1")
    response = _act(login("operator"), "retry_jobs", [failed, cancelled, done, running])
    assert messages_of(response) == [
        "Retried 2 jobs: they are pending again, runnable now. Skipped 2 jobs (1 completed, "
        "1 processing): only failed or cancelled jobs can be retried."
    ]
    for job in (failed, cancelled):
        job.refresh_from_db()
        assert (job.status, job.attempts) == (JobStatus.PENDING, 0)
    assert Job.objects.get(pk=running.pk).locked_by == "w1"


def test_bulk_cancel_and_run_now(login: Any) -> None:
    now = timezone.now()
    later = make_job(scheduled_at=now + timedelta(hours=2), status=JobStatus.SCHEDULED)
    due = make_job(scheduled_at=now - timedelta(minutes=5))
    failed = failed_job()
    client = login("operator")
    response = _act(client, "run_jobs_now", [later, due, failed])
    assert messages_of(response) == [
        "Scheduled 1 job to run now. Skipped 2 jobs (1 already due, 1 failed): only jobs "
        "scheduled in the future can be brought forward."
    ]
    later.refresh_from_db()
    assert later.scheduled_at <= timezone.now()
    assert later.status == JobStatus.PENDING  # in the claim's index: a worker takes it
    response = _act(client, "cancel_jobs", [later, due, failed])
    assert messages_of(response)[0].startswith("Cancelled 2 jobs. Skipped 1 job (1 failed)")
    assert set(Job.objects.values_list("status", flat=True)) == {"cancelled", "failed"}


@pytest.mark.usefixtures("small_pages")
def test_bulk_retry_on_the_failed_list_across_all_pages(login: Any) -> None:
    Job.objects.bulk_create(
        [Job(type="tests.echo", status=JobStatus.FAILED, attempts=5) for _ in range(12)]
    )
    make_job(status=JobStatus.COMPLETED)
    first = Job.objects.failed().first()
    assert first is not None
    response = _act(login("operator"), "retry_jobs", [first], "failedjob", select_across=1)
    assert messages_of(response)[0].startswith("Retried 12 jobs")
    assert Job.objects.pending().count() == 12


def test_bulk_delete_asks_first_then_skips_running_jobs(login: Any) -> None:
    failed = failed_job()
    done = make_job(status=JobStatus.COMPLETED)
    running = make_job(status=JobStatus.PROCESSING, locked_by="w1")
    client = login("operator")
    confirm = _act(client, "delete_jobs", [failed, done, running])
    page = text(confirm)
    assert "2 jobs will be deleted" in page
    assert "1 running job is left alone" in page
    assert Job.objects.count() == 3
    response = _act(client, "delete_jobs", [failed, done, running], post="yes")
    assert messages_of(response) == [
        "Deleted 2 jobs. Skipped 1 job (1 processing): a running job cannot be deleted while "
        "its worker holds it."
    ]
    assert list(Job.objects.values_list("pk", flat=True)) == [running.pk]


ACTION_PERMS = {
    "retry_jobs": "retry_job",
    "cancel_jobs": "cancel_job",
    "run_jobs_now": "change_job",
    "delete_jobs": "delete_job",
}


@pytest.mark.parametrize(("action", "perm"), ACTION_PERMS.items())
def test_each_bulk_action_needs_its_permission(login: Any, action: str, perm: str) -> None:
    job = failed_job(status=JobStatus.PENDING, scheduled_at=timezone.now() + timedelta(days=1))
    job.status = JobStatus.FAILED if action == "retry_jobs" else JobStatus.PENDING
    Job.objects.filter(pk=job.pk).update(status=job.status)
    without = login("custom", "view_job", *(set(ACTION_PERMS.values()) - {perm}))
    response = without.get(url("job_changelist"))
    offered = dict(response.context["action_form"].fields["action"].choices)
    assert action not in offered
    response = _act(without, action, [job], post="yes")
    assert Job.objects.filter(pk=job.pk, status=job.status).exists()  # untouched
    assert Job.objects.get(pk=job.pk).scheduled_at == job.scheduled_at
    with_perm = login("custom", "view_job", perm)
    offered = dict(
        with_perm.get(url("job_changelist")).context["action_form"].fields["action"].choices
    )
    assert action in offered
    response = _act(with_perm, action, [job], post="yes")
    assert messages_of(response)[0].split()[1] == "1", messages_of(response)


def test_a_viewer_gets_no_actions_and_django_delete_selected_is_gone(login: Any) -> None:
    failed_job()
    page = text(login("viewer").get(url("job_changelist")))
    assert 'name="action"' not in page
    response = login("superuser").get(url("job_changelist"))
    offered = dict(response.context["action_form"].fields["action"].choices)
    assert "delete_selected" not in offered
    assert set(ACTION_PERMS) <= set(offered)


# -- escaping -----------------------------------------------------------------------------


def test_payload_result_error_and_type_are_escaped_everywhere(login: Any) -> None:
    job = failed_job(
        type=XSS,
        queue=XSS,
        payload={"html": XSS},
        result=XSS,
        last_error=f"{XSS}: boom\n\nTraceback {XSS}",
        errors=[{"attempt": 1, "worker_id": XSS, "exception_class": XSS, "message": XSS,
                 "traceback": XSS}],
        locked_by=XSS,
    )  # fmt: skip
    make_job(type=XSS, queue=XSS)  # a waiting job in a queue no worker serves: an alert
    WorkerProcess.objects.create(worker_id=XSS, hostname=XSS, pid=1, queues=[XSS + "2"])
    client = login("superuser")
    for page_url in (
        url("job_changelist"),
        url("failedjob_changelist"),
        url("job_change", job.pk),
        url("failedjob_change", job.pk),
        url("job_summary", job.pk),
        url("job_dashboard"),
        url("job_dashboard_live"),
        url("job_dashboard_alerts"),
        url("workerprocess_changelist"),
    ):
        page = text(client.get(page_url))
        assert "<script>alert" not in page, page_url
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page, page_url


# -- the dashboard ------------------------------------------------------------------------


def test_the_dashboard_shows_queues_failures_workers_and_charts(login: Any) -> None:
    now = timezone.now()
    make_job(queue="emails", scheduled_at=now - timedelta(minutes=12))
    make_job(queue="emails", scheduled_at=now - timedelta(minutes=2))
    make_job(queue="reports", scheduled_at=now + timedelta(hours=1))
    make_job(
        status=JobStatus.PROCESSING,
        locked_by="web-1:77:aa",
        lease_expires_at=now + timedelta(minutes=1),
    )
    failed_job(queue="emails")
    for minutes in (1, 1, 30):
        make_job(status=JobStatus.COMPLETED, completed_at=now - timedelta(minutes=minutes))
    WorkerProcess.objects.create(
        worker_id="web-1:77:aa", hostname="web-1", pid=77, queues=["default"], concurrency=4,
        jobs_done=1234,
    )  # fmt: skip
    response = login("viewer").get(url("job_dashboard"))
    page = text(response)
    assert response.status_code == 200
    emails = re.search(r'<tr class="[^"]*" data-queue="emails">(.*?)</tr>', page, re.S)
    assert emails is not None
    row = emails.group(1)
    assert re.search(r'data-col="waiting"><a href="[^"]*queue=emails&amp;when=due">2</a>', row)
    assert 'data-col="oldest">12 min<' in row
    assert re.search(r'data-col="failed"><a [^>]*>1</a>', row)
    assert 'data-col="workers">0<' in row
    reports = re.search(r'data-queue="reports">(.*?)</tr>', page, re.S).group(1)  # type: ignore[union-attr]
    assert re.search(r'data-col="scheduled"><a [^>]*>1</a>', reports)
    # The stuck queue is called out, with a link to its waiting jobs.
    assert "No running worker serves queue “emails”: 2 jobs are waiting." in page
    assert "1 job failed and waits for an operator." in page
    # Workers: id, host, pid, queues, concurrency, heartbeat, jobs done.
    workers = page.split('id="sqlq-workers"')[1]
    for value in ("web-1:77:aa", "web-1", "77", "default", "4", "1234", "s ago"):
        assert value in workers
    # Charts: inline SVG, 3 completed and 1 failed in the last hour.
    assert page.count('<div class="sqlq-chart"') == 2
    assert "3 completed" in page
    assert "1 failed" in page
    # It refreshes itself from same-origin fragment URLs, and loads nothing from outside.
    assert f'data-sqlq-refresh="{url("job_dashboard_live")}"' in page
    assert f'data-sqlq-refresh="{url("job_dashboard_charts")}"' in page
    assert not re.search(r'(src|href)="(https?:)?//', page)


def test_the_dashboard_says_when_no_worker_runs(login: Any) -> None:
    make_job()
    WorkerProcess.objects.create(
        worker_id="gone:1:x", hostname="gone", pid=1,
        last_seen_at=timezone.now() - timedelta(minutes=10),
    )  # fmt: skip
    page = text(login("viewer").get(url("job_dashboard_live")))
    assert "No worker is running: 1 job is waiting." in page
    assert "The last worker reported 10 min ago (gone:1:x)." in page
    assert "not responding" in page


def test_the_dashboard_is_all_clear_when_nothing_is_wrong(login: Any) -> None:
    WorkerProcess.objects.create(worker_id="w", hostname="h", pid=1, queues=["default"])
    page = text(login("viewer").get(url("job_dashboard_live")))
    assert "All clear: 1 worker is running" in page
    compact = text(login("viewer").get(url("job_dashboard_alerts") + "?compact=1"))
    assert "All clear" not in compact


def test_dashboard_alerts_for_a_slow_queue_and_expired_leases() -> None:
    now = timezone.now()
    make_job(scheduled_at=now - timedelta(seconds=dashboard.WAITING_ALERT_SECONDS + 60))
    make_job(status=JobStatus.PROCESSING, lease_expires_at=now - timedelta(seconds=5))
    WorkerProcess.objects.create(worker_id="w", hostname="h", pid=1, queues=["*"])
    snap = dashboard.snapshot("default", configured=["default"], now=now)
    messages = [a.message for a in snap.alerts]
    assert messages[0].startswith("Queue “default” is falling behind: 1 job is waiting")
    assert "stopped renewing its lease" in messages[1]
    assert snap.queues[0].workers == 1
    assert snap.queues[0].stuck


def test_dashboard_counts_scheduled_jobs_and_due_ones_as_runnable() -> None:
    now = timezone.now()
    make_job(status=JobStatus.SCHEDULED, scheduled_at=now + timedelta(hours=1))
    make_job(scheduled_at=now + timedelta(hours=2))  # pending, moved forward by hand
    # Due, not yet moved to pending (no worker ran since): waiting, so runnable.
    overdue = make_job(status=JobStatus.SCHEDULED, scheduled_at=now - timedelta(minutes=3))
    make_job(scheduled_at=now - timedelta(minutes=1))
    [row] = dashboard.queue_rows("default", now, configured=["default"])
    assert (row.runnable, row.scheduled) == (2, 2)
    assert row.oldest_runnable_at == overdue.scheduled_at


def totals(buckets: list[Any]) -> tuple[int, int]:
    """The completed and failed jobs of a throughput chart's buckets."""
    return sum(b.completed for b in buckets), sum(b.failed for b in buckets)


def test_throughput_buckets_per_minute_and_per_hour() -> None:
    now = timezone.now().replace(second=30)
    for minutes, status in ((0, "completed"), (0, "failed"), (5, "completed"), (90, "completed"),
                            (60 * 30, "completed")):  # fmt: skip
        make_job(status=status, completed_at=now - timedelta(minutes=minutes))
    flow = dashboard.throughput("default", now=now)
    assert len(flow.minutes) == 60
    assert len(flow.hours) == 24
    assert (flow.minutes[-1].completed, flow.minutes[-1].failed) == (1, 1)
    assert flow.minutes[-6].completed == 1
    assert totals(flow.minutes) == (2, 1)
    assert totals(flow.hours) == (3, 1)  # 30 h ago is out


def test_throughput_reads_the_finished_index(engine: str) -> None:
    """The dashboard's throughput is a range of ``sqlq_job_finished_idx`` per status (the
    index the pruner walks; no index on ``completed_at`` alone since 0013), on both engines:
    the query repeats that partial index's condition, which SQLite's planner needs to see."""
    recorded: list[tuple[str, Any]] = []

    def record(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        recorded.append((sql, params))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        dashboard.throughput("default")
    assert recorded
    for sql, params in recorded:
        with connection.cursor() as cursor:
            if engine == "postgresql":
                cursor.execute("SET LOCAL enable_seqscan = off")
                cursor.execute(f"EXPLAIN {sql}", params)
            elif engine == "mysql":
                # MariaDB: a range of (status, completed_at) for each status, grouped in a
                # temporary table (the window's rows), never sorted or scanned.
                cursor.execute(f"EXPLAIN {sql}", params)
                columns = [column[0] for column in cursor.description]
                (step,) = [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]
                assert (step["table"], step["type"]) == ("sqlq_job", "range"), step
                assert step["key"] == "sqlq_job_finished_idx", step
                assert "Using filesort" not in step["Extra"], step
                continue
            else:
                cursor.execute(f"EXPLAIN QUERY PLAN {sql}", params)
            plan = " ".join(str(row) for row in cursor.fetchall())
        assert "sqlq_job_finished_idx" in plan, plan
        assert "SCAN sqlq_job" not in plan.replace("SCAN sqlq_job USING", ""), plan


def test_format_age() -> None:
    assert [dashboard.format_age(s) for s in (5, 125, 3 * 3600 + 300, 2 * 86400 + 3600)] == [
        "5 s", "2 min", "3 h 5 min", "2 d 1 h",
    ]  # fmt: skip


def test_throughput_counts_the_hour_that_straddles_the_minutes_window() -> None:
    now = timezone.now().replace(minute=20, second=0)
    make_job(status=JobStatus.COMPLETED, completed_at=now - timedelta(minutes=65))  # head
    make_job(status=JobStatus.COMPLETED, completed_at=now - timedelta(minutes=50))  # window
    flow = dashboard.throughput("default", now=now)
    assert flow.hours[-2].completed == 2
    assert totals(flow.minutes) == (1, 0)


def test_throughput_caches_hours_that_are_over() -> None:
    now = timezone.now()
    old = make_job(status=JobStatus.COMPLETED, completed_at=now - timedelta(hours=3))
    assert totals(dashboard.throughput("default", now=now, cache=True).hours) == (1, 0)
    old.delete()
    make_job(status=JobStatus.FAILED, completed_at=now)
    flow = dashboard.throughput("default", now=now, cache=True)
    assert totals(flow.hours) == (1, 1)  # the old hour: cached
    assert totals(dashboard.throughput("default", now=now).hours) == (0, 1)  # no cache


def test_task_queues_count_as_configured_on_the_dashboard_and_in_the_filter(login: Any) -> None:
    tasks = {"default": {"BACKEND": "django_sqlq.backend.SQLQBackend", "QUEUES": ["mail"]}}
    with override_settings(SQLQ={"QUEUES": ["default"]}, TASKS=tasks):
        client = login("viewer")
        response = client.get(url("job_changelist"))
        choices = {
            spec.title: [c["display"] for c in spec.choices(response.context["cl"])]
            for spec in response.context["cl"].filter_specs
        }["queue"]
        assert choices[1:3] == ["default", "mail"]
        make_job(queue="mail")
        make_job(queue="elsewhere")
        dashboard.clear_cache()
        page = text(client.get(url("job_dashboard_live")))
        assert "mail</strong> <span" not in page  # configured: no note
        assert "elsewhere</strong> <span" in page


# -- found by an adversarial operator (issue 11) ------------------------------------------


@pytest.mark.parametrize(
    "term", ["²", "#²", "١٢", "\U0001d7d8", "99999999999999999999999", "#9223372036854775808"]
)
def test_searching_digits_that_are_not_an_id_is_not_an_error(login: Any, term: str) -> None:
    job = make_job(type=f"tests.{term}")
    response = login("viewer").get(url("job_changelist"), {"q": term})
    assert response.status_code == 200
    shown = [j.pk for j in response.context["cl"].result_list]
    # Unicode digits search the type names; a number no id can be matches nothing.
    assert shown == ([] if term.lstrip("#").isascii() else [job.pk])


@pytest.mark.parametrize(
    ("page", "query"),
    [("job_changelist", {"status": "\x00"}), ("job_changelist", {"queue": "a\x00"}),
     ("job_changelist", {"type": "\x00", "status": "pending"}),
     ("failedjob_changelist", {"type": "\x00"}),
     ("workerprocess_changelist", {"hostname": "\x00"}),
     ("job_changelist", {"q": "\x00"})],
)  # fmt: skip
def test_a_nul_character_in_a_filter_is_an_invalid_lookup_not_an_error(
    login: Any, page: str, query: dict[str, str]
) -> None:
    # Before: PostgreSQL refused the query (DataError: text fields cannot contain NUL), a 500.
    make_job()
    response = login("superuser").get(url(page), query)
    assert response.status_code in (200, 302)
    if response.status_code == 302:  # Django's answer to an invalid lookup
        assert response["Location"].endswith("?e=1")


def test_the_job_page_shows_a_payload_and_result_nested_as_deep_as_enqueue_accepts(
    login: Any,
) -> None:
    # Before: the indented JSON of a payload nested 900 levels deep (enqueue accepts it)
    # overflowed the recursion limit: the job page was a 500.
    deep: Any = "the-deepest-value"
    for _ in range(min(900, json_depth_limit(MAX_DEPTH))):  # MariaDB: 31
        deep = [deep]
    job = enqueue("tests.echo", deep)
    Job.objects.filter(pk=job.pk).update(result=deep, status=JobStatus.COMPLETED)
    for client in (login("superuser"), login("viewer")):
        response = client.get(url("job_change", job.pk))
        assert response.status_code == 200
        assert text(response).count("the-deepest-value") == 2  # the payload and the result


def test_delete_of_a_running_job_checks_the_permission_first(login: Any) -> None:
    running = make_job(status=JobStatus.PROCESSING, locked_by="w1")
    client = login("viewer")  # may view jobs, not delete them
    for method in (client.get, client.post):
        response = method(url("job_delete", running.pk))
        assert response.status_code == 403  # not a redirect that says "is running"
    response = login("staff").get(url("job_delete", running.pk))
    assert response.status_code == 403


@pytest.mark.parametrize(
    ("status", "label"),
    [(JobStatus.FAILED, "Failed at"), (JobStatus.CANCELLED, "Cancelled at"),
     (JobStatus.COMPLETED, "Completed at")],
)  # fmt: skip
def test_the_job_page_names_the_final_time_after_the_final_status(
    login: Any, status: str, label: str
) -> None:
    job = failed_job(status=status)
    response = login("viewer").get(url("job_change", job.pk))
    assert response.status_code == 200
    text = response.content.decode()
    assert label in text
    for other in {"Failed at", "Cancelled at", "Completed at"} - {label}:
        assert other not in text


def test_the_failed_jobs_banner_does_not_link_to_the_page_it_is_on(login: Any) -> None:
    failed_job()
    client = login("viewer")
    page = client.get(url("failedjob_changelist")).content.decode()
    assert "here=failed" in page
    alerts = url("job_dashboard_alerts")
    on_failed_list = client.get(alerts, {"compact": "1", "here": "failed"}).content.decode()
    elsewhere = client.get(alerts, {"compact": "1"}).content.decode()
    failed_list = url("failedjob_changelist")
    assert f'href="{failed_list}"' in elsewhere
    assert f'href="{failed_list}"' not in on_failed_list


def test_type_names_wrap_at_dots_and_in_a_long_part_at_underscores() -> None:
    from django_sqlq.admin.display import breakable_name

    assert breakable_name("shop.send_receipt") == "shop.<wbr>send_receipt"
    assert breakable_name("reports.export_general_ledger_to_warehouse") == (
        "reports.<wbr>export_<wbr>general_<wbr>ledger_<wbr>to_<wbr>warehouse"
    )
    assert breakable_name("x.<b>") == "x.<wbr>&lt;b&gt;"  # still escaped
