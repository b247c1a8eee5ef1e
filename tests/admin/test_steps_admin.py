"""The operator's view of durable steps (issue 25), through Django's test client: the job
page lists a job's steps and says what it sleeps until or waits for; the dashboard counts
the jobs asleep; Wake now and Emit event, their permission, and a payload that is not JSON.
Jobs are put to sleep by django_sqlq.testing.run_jobs() and tests/testapp/step_jobs.py."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connections
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils.html import strip_tags

from django_sqlq import dashboard, emit_event, enqueue
from django_sqlq.models import Event, Job, JobStatus, JobStep, StepState
from django_sqlq.testing import run_jobs
from tests.testapp import step_jobs  # noqa: F401 (registers the handlers)

pytestmark = pytest.mark.django_db(transaction=True)

OPERATOR = ("view_job", "change_job")


@pytest.fixture(autouse=True)
def _fresh_throughput_cache() -> Any:
    dashboard.clear_cache()
    yield
    dashboard.clear_cache()


def url(name: str, *args: Any) -> str:
    return reverse(f"admin:django_sqlq_{name}", args=args)


def page(client: Client, job: Job) -> str:
    response = client.get(url("job_change", job.pk))
    assert response.status_code == 200
    return str(response.content.decode())


def words(html: str) -> str:
    return " ".join(strip_tags(html).split())


def messages_of(response: Any) -> list[str]:
    return [str(m) for m in response.context["messages"]] if response.context else []


def asleep(seconds: float = 3600) -> Job:
    job = enqueue("steps.nap", {"seconds": seconds})
    assert run_jobs().slept == 1
    job.refresh_from_db()
    assert job.status == JobStatus.SCHEDULED
    return job


def waiting(tag: str = "w", key: str = "k", timeout: float | None = 60) -> Job:
    job = enqueue("steps.flow", {"tag": tag, "key": key, "timeout": timeout})
    assert run_jobs().slept == 1
    job.refresh_from_db()
    assert job.status == JobStatus.SCHEDULED
    return job


def step(job: Job, name: str) -> JobStep:
    return JobStep.objects.get(job_id=job.pk, name=name)


# -- what the job page shows ----------------------------------------------------------------


def test_the_page_of_a_sleeping_job_lists_its_step_and_says_until_when(staff_client: Any) -> None:
    job = asleep()
    html = page(staff_client("view_job"), job)
    text = words(html)
    assert "Durable steps" in text
    assert 'id="sqlq-steps"' in html
    assert 'data-step="nap" data-state="sleeping"' in html
    assert "Sleeps until" in text
    assert "durable sleep “nap”" in text
    # Run now would only put it back to sleep: not offered; a viewer gets no Wake either.
    assert "Run now" not in text
    assert "Wake now" not in text


def test_the_page_of_a_waiting_job_says_which_event_and_when_it_times_out(
    staff_client: Any,
) -> None:
    job = waiting(key="paid-42")
    html = page(staff_client("view_job"), job)
    text = words(html)
    assert "Waits for event “paid-42” (step “paid”)" in text
    assert "then times out" in text
    # The steps so far: the charge (its result, the Order's id), and the wait.
    assert 'data-step="charge" data-state="done"' in html
    assert 'data-step="paid" data-state="waiting"' in html
    assert f'<code class="sqlq-step-result">{step(job, "charge").result}</code>' in html
    assert "<code>paid-42</code>" in html
    # A viewer may not emit.
    assert 'id="sqlq-emit-event"' not in html


def test_a_wait_without_timeout_says_so(staff_client: Any) -> None:
    job = waiting(key="forever", timeout=None)
    text = words(page(staff_client("view_job"), job))
    assert "Waits for event “forever” (step “paid”), with no timeout" in text


def test_a_long_result_is_cut_to_200_characters_and_escaped(staff_client: Any) -> None:
    job = asleep()
    long = "<b>" + "x" * 500
    JobStep.objects.create(job_id=job.pk, name="big", result={"text": long})
    html = page(staff_client("view_job"), job)
    assert "<b>xxx" not in html
    assert "&lt;b&gt;" in html
    shown = html.split('data-step="big"', 1)[1].split('class="sqlq-step-result">', 1)[1]
    shown = shown.split("</code>", 1)[0]
    assert len(shown.replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", '"')) == 200
    assert shown.endswith("…")


def test_the_steps_of_a_job_are_read_in_one_query(staff_client: Any) -> None:
    job = asleep()
    JobStep.objects.bulk_create(
        [JobStep(job_id=job.pk, name=f"s{i}", result=i) for i in range(20)]
    )
    client = staff_client("view_job")
    with CaptureQueriesContext(connections["default"]) as queries:
        html = page(client, job)
    assert html.count('data-step="s') == 20
    step_reads = [q["sql"] for q in queries if "sqlq_job_step" in q["sql"]]
    assert len(step_reads) == 1, step_reads


def test_a_job_without_steps_has_no_steps_section(staff_client: Any) -> None:
    job = enqueue("tests.echo", {"n": 1})
    html = page(staff_client("view_job"), job)
    assert "Durable steps" not in html


def test_the_live_box_says_it_too(staff_client: Any) -> None:
    job = asleep()
    response = staff_client("view_job").get(url("job_summary", job.pk))
    assert response.status_code == 200
    assert "Sleeps until" in words(response.content.decode())


# -- the dashboard --------------------------------------------------------------------------


def test_the_dashboard_counts_the_sleeping_and_the_waiting_jobs(staff_client: Any) -> None:
    asleep()
    asleep()
    waiting(tag="a", key="ka")
    cancelled = waiting(tag="b", key="kb")
    Job.objects.filter(pk=cancelled.pk).update(status=JobStatus.CANCELLED)
    enqueue("tests.echo", {"n": 1})
    assert dashboard.asleep_counts("default") == {"sleeping": 2, "waiting": 1}
    html = staff_client("view_job").get(url("job_dashboard_live")).content.decode()
    assert 'id="sqlq-asleep" class="sqlq-quiet" data-sleeping="2" data-waiting="1"' in html
    text = words(html)
    assert "2 jobs asleep in a durable sleep, 1 job waiting for an event" in text


def test_the_dashboard_count_is_one_query_from_the_steps_table() -> None:
    asleep()
    with CaptureQueriesContext(connections["default"]) as queries:
        dashboard.asleep_counts("default")
    assert len(queries) == 1
    sql = queries[0]["sql"]
    if connections["default"].vendor == "mysql":  # names quoted with backticks
        assert "FROM `sqlq_job_step`" in sql
        assert "sqlq_job" in sql.split("FROM `sqlq_job_step`", 1)[1]
        return
    assert 'FROM "sqlq_job_step"' in sql
    assert "sqlq_job" in sql.split('FROM "sqlq_job_step"', 1)[1]


def test_the_dashboard_says_nothing_of_steps_when_no_job_sleeps(staff_client: Any) -> None:
    html = staff_client("view_job").get(url("job_dashboard_live")).content.decode()
    assert "sqlq-asleep" not in html


# -- wake -----------------------------------------------------------------------------------


def test_wake_ends_the_sleep_and_the_job_completes(staff_client: Any) -> None:
    job = asleep()
    client = staff_client(*OPERATOR)
    assert "Wake now" in page(client, job)
    response = client.post(url("job_wake", job.pk), follow=True)
    assert response.status_code == 200
    assert messages_of(response) == [
        "Woke 1 job: its sleep is over, it is pending again, runnable now."
    ]
    job.refresh_from_db()
    assert job.status == JobStatus.PENDING
    nap = step(job, "nap")
    assert nap.state == StepState.SLEEPING
    assert nap.wake_at is not None
    assert nap.wake_at <= job.scheduled_at or (job.scheduled_at - nap.wake_at).total_seconds() < 1
    result = run_jobs()
    job.refresh_from_db()
    assert (result.completed, result.slept) == (1, 0)
    assert (job.status, job.result) == (JobStatus.COMPLETED, "rested")
    assert step(job, "nap").state == StepState.DONE


def test_wake_needs_the_change_permission_and_a_post(staff_client: Any) -> None:
    job = asleep()
    before = step(job, "nap").wake_at
    assert staff_client("view_job").post(url("job_wake", job.pk)).status_code == 403
    assert staff_client(*OPERATOR).get(url("job_wake", job.pk)).status_code == 405
    job.refresh_from_db()
    assert job.status == JobStatus.SCHEDULED
    assert step(job, "nap").wake_at == before


def test_wake_leaves_a_job_that_is_no_longer_asleep(staff_client: Any) -> None:
    job = asleep()
    Job.objects.filter(pk=job.pk).update(status=JobStatus.CANCELLED)
    before = step(job, "nap").wake_at
    response = staff_client(*OPERATOR).post(url("job_wake", job.pk), follow=True)
    assert messages_of(response) == [
        f"Job #{job.pk} is not asleep in a durable sleep (it is cancelled): nothing was changed."
    ]
    job.refresh_from_db()
    assert job.status == JobStatus.CANCELLED
    assert step(job, "nap").wake_at == before


def test_wake_does_not_end_a_wait_for_an_event(staff_client: Any) -> None:
    job = waiting()
    response = staff_client(*OPERATOR).post(url("job_wake", job.pk), follow=True)
    assert messages_of(response) == [
        f"Job #{job.pk} is not asleep in a durable sleep (it is scheduled): nothing was "
        "changed. It waits for event “k”: emit it from the job's page."
    ]
    job.refresh_from_db()
    assert job.status == JobStatus.SCHEDULED


# -- emit an event --------------------------------------------------------------------------


def test_emit_event_from_the_page_wakes_the_job_and_it_completes(staff_client: Any) -> None:
    job = waiting(tag="e", key="k")
    client = staff_client(*OPERATOR)
    html = page(client, job)
    assert 'id="sqlq-emit-event"' in html
    assert url("job_emit_event", job.pk) in html
    response = client.post(url("job_emit_event", job.pk), {"payload": '{"paid": 12}'}, follow=True)
    assert response.status_code == 200
    assert messages_of(response)[0].startswith("Emitted event “k”")
    assert Event.objects.get(key="k").payload == {"paid": 12}
    job.refresh_from_db()
    assert job.status == JobStatus.PENDING
    assert run_jobs().completed == 1
    job.refresh_from_db()
    assert job.status == JobStatus.COMPLETED
    assert isinstance(job.result, dict)
    assert job.result["paid"] == {"paid": 12}


def test_an_empty_payload_is_null(staff_client: Any) -> None:
    job = waiting(key="empty")
    staff_client(*OPERATOR).post(url("job_emit_event", job.pk), {"payload": "  "})
    assert Event.objects.get(key="empty").payload is None


@pytest.mark.parametrize("bad", ["{paid: 1}", "{'paid': 1}", '{"paid": ', "NaN"])
def test_a_payload_that_is_not_json_is_a_form_error_and_nothing_is_written(
    staff_client: Any, bad: str
) -> None:
    job = waiting(key="bad")
    response = staff_client(*OPERATOR).post(url("job_emit_event", job.pk), {"payload": bad})
    assert response.status_code == 200
    text = words(response.content.decode())
    assert "Nothing was emitted" in text
    assert "JSON" in text
    # The operator's text is kept in the form, to fix.
    assert response.context["sqlq_emit_form"].data["payload"] == bad
    assert not Event.objects.filter(key="bad").exists()
    job.refresh_from_db()
    assert job.status == JobStatus.SCHEDULED


def test_emit_event_needs_the_change_permission(staff_client: Any) -> None:
    job = waiting(key="perm")
    client = staff_client("view_job")
    assert client.post(url("job_emit_event", job.pk), {"payload": "1"}).status_code == 403
    assert client.get(url("job_emit_event", job.pk)).status_code == 403
    assert not Event.objects.filter(key="perm").exists()
    job.refresh_from_db()
    assert job.status == JobStatus.SCHEDULED


def test_emit_event_is_csrf_protected(django_user_model: Any) -> None:
    job = waiting(key="csrf")
    user = django_user_model.objects.create_superuser("root", password="pw")
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    assert client.post(url("job_emit_event", job.pk), {"payload": "1"}).status_code == 403
    assert client.post(url("job_wake", job.pk)).status_code == 403
    assert not Event.objects.filter(key="csrf").exists()


def test_emit_event_for_a_job_that_waits_no_longer_writes_nothing(staff_client: Any) -> None:
    job = waiting(key="late")
    emit_event("late", "first")
    run_jobs()
    job.refresh_from_db()
    assert job.status == JobStatus.COMPLETED
    response = staff_client(*OPERATOR).post(
        url("job_emit_event", job.pk), {"payload": '"second"'}, follow=True
    )
    assert "waits for no event now" in messages_of(response)[0]
    assert Event.objects.get(key="late").payload == "first"


def test_wake_sleeping_changes_only_jobs_still_asleep_in_a_sleep() -> None:
    from django_sqlq.admin.job_steps import wake_sleeping

    sleeping, cancelled, waits = asleep(), asleep(), waiting()
    Job.objects.filter(pk=cancelled.pk).update(status=JobStatus.CANCELLED)
    before = step(cancelled, "nap").wake_at
    outcome = wake_sleeping([sleeping.pk, cancelled.pk, waits.pk])
    assert (outcome.changed, outcome.skipped) == (1, 2)
    statuses = dict(Job.objects.values_list("pk", "status"))
    assert statuses == {
        sleeping.pk: JobStatus.PENDING,
        cancelled.pk: JobStatus.CANCELLED,
        waits.pk: JobStatus.SCHEDULED,
    }
    assert step(cancelled, "nap").wake_at == before
