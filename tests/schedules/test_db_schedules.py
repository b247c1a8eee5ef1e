"""Schedules stored in the database (issue 26 item 5): the model's validation, the admin
(add, edit, disable, permissions; the Schedules page lists both kinds), the scheduler
ticking a stored schedule once with an injected clock and picking up changes without a
restart, and two real worker processes sharing each tick of a schedule added while they
run. Every test runs on both engines."""

from __future__ import annotations

import json
import logging
import signal
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from django.conf import settings
from django.core.exceptions import ValidationError
from django.test import override_settings
from django.urls import reverse
from django.utils.module_loading import import_string

from django_sqlq import compat
from django_sqlq.backend import SQLQBackend
from django_sqlq.models import DatabaseSchedule, Job, ScheduleTick
from django_sqlq.recurrence.definition import on_sqlq
from tests.conftest import WorkerProcess, wait_for
from tests.schedules.helpers import CODE, Clock, at, scheduler_at, stored

db = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _code_schedule() -> Iterator[None]:
    with override_settings(SQLQ={**settings.SQLQ, "SCHEDULE": CODE}):
        yield


# -- the model's validation -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"cron": "61 * * * *"}, "cron", "not a valid cron expression"),
        ({"cron": "hello"}, "cron", "not a valid cron expression"),
        ({"timezone": "Europe/Pari"}, "timezone", "not a known time zone"),
        ({"type": "tests.no_such_handler"}, "type", "tests.no_such_handler"),
        ({"type": "", "task": "tests.testapp.tasks.nope"}, "task", "is not a @task"),
        ({"type": ""}, "type", "a job type or a task"),
        ({"task": "tests.testapp.tasks.add"}, "type", "a job type or a task"),
        ({"queue": "nope"}, "queue", "Unknown queue 'nope'"),
        ({"queue": "a\x00b"}, "queue", "NUL"),
        ({"priority": 101}, "priority", "-100 to 100"),
        ({"payload": {"x": "y" * 2000}}, "payload", "1000"),  # MAX_PAYLOAD_BYTES below
        ({"args": [1]}, "args", "args and kwargs are for a task"),
        ({"name": "nightly-report"}, "name", "declared in code"),
        ({"name": "a\x00b"}, "name", "NUL"),
    ],
)
@pytest.mark.django_db
def test_clean_names_the_field_at_fault(fields: dict[str, Any], field: str, message: str) -> None:
    row = DatabaseSchedule(**{"name": "x", "type": "tests.noop", "cron": "0 3 * * *", **fields})
    with (
        override_settings(SQLQ={**settings.SQLQ, "MAX_PAYLOAD_BYTES": 1000}),
        pytest.raises(ValidationError) as caught,
    ):
        row.full_clean()
    assert message in " ".join(caught.value.message_dict[field]), caught.value.message_dict


@pytest.mark.django_db
def test_a_valid_row_passes_and_an_empty_json_field_is_its_default() -> None:
    row = DatabaseSchedule(name="ok", type="tests.noop", cron="*/5 * * * *", payload=None)
    row.full_clean()
    assert row.payload == {}
    assert DatabaseSchedule(name="n", type="tests.noop", cron="0 3 * * *").timezone == "UTC"


class _SubclassBackend(SQLQBackend):
    """A project's own subclass of the backend: still django_sqlq's."""


def test_a_task_runs_on_django_sqlq_when_its_backend_is_an_sqlq_backend_or_a_subclass() -> None:
    dummy = import_string(f"{compat.FRAMEWORK}.backends.dummy.DummyBackend")

    def on(backend: object) -> bool:
        return on_sqlq(SimpleNamespace(get_backend=lambda: backend))  # type: ignore[arg-type]

    assert on(SQLQBackend("a", {"OPTIONS": {}}))
    assert on(_SubclassBackend("b", {"OPTIONS": {}}))
    assert not on(dummy("c", {"OPTIONS": {}}))


@pytest.mark.django_db
def test_clean_refuses_a_task_of_another_tasks_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    dummy = import_string(f"{compat.FRAMEWORK}.backends.dummy.DummyBackend")("other", {})
    task = SimpleNamespace(get_backend=lambda: dummy, backend="other")
    monkeypatch.setattr("django_sqlq.recurrence.rows.find_task", lambda _path: task)
    row = DatabaseSchedule(name="t", task="tests.testapp.tasks.add", cron="0 3 * * *")
    with pytest.raises(ValidationError) as caught:
        row.full_clean()
    assert "which is not django_sqlq's" in " ".join(caught.value.message_dict["task"])


# -- the admin --------------------------------------------------------------------------------


ADD = "admin:django_sqlq_databaseschedule_add"
CHANGELIST = "admin:django_sqlq_databaseschedule_changelist"
PAGE = "admin:django_sqlq_scheduletick_changelist"


def form(**fields: Any) -> dict[str, Any]:
    data = {"name": "db-hourly", "enabled": "on", "type": "tests.echo", "task": "",
            "cron": "0 * * * *", "timezone": "Europe/Paris", "missed": "run_once",
            "payload": '{"a": 1}', "args": "[]", "kwargs": "{}", "queue": "",
            "priority": ""}  # fmt: skip
    data.update(fields)
    return {k: v for k, v in data.items() if v is not None}


@pytest.mark.django_db
def test_the_admin_adds_edits_and_disables_a_schedule(staff_client: Any) -> None:
    client = staff_client(
        "add_databaseschedule", "change_databaseschedule", "view_databaseschedule"
    )
    response = client.post(reverse(ADD), form())
    assert response.status_code == 302, response.content.decode()[:3000]
    row = DatabaseSchedule.objects.get()
    assert (row.type, row.payload, row.timezone, row.enabled) == (
        "tests.echo", {"a": 1}, "Europe/Paris", True
    )  # fmt: skip
    change = reverse("admin:django_sqlq_databaseschedule_change", args=[row.pk])
    assert client.post(change, form(cron="30 * * * *")).status_code == 302
    row.refresh_from_db()
    assert row.cron == "30 * * * *"
    assert client.post(change, form(cron="30 * * * *", enabled=None)).status_code == 302
    row.refresh_from_db()
    assert not row.enabled


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"cron": "* * *"}, "not a valid cron expression"),
        ({"timezone": "Mars/Olympus"}, "not a known time zone"),
        ({"type": "tests.typo"}, "tests.typo"),
        ({"payload": "{not json"}, "Enter a valid JSON"),
        ({"queue": "nope"}, "Unknown queue"),
        ({"name": "nightly-report"}, "declared in code"),
    ],
)
def test_the_admin_form_refuses_a_bad_schedule(
    staff_client: Any, fields: dict[str, Any], message: str
) -> None:
    response = staff_client(superuser=True).post(reverse(ADD), form(**fields))
    assert response.status_code == 200  # the form again, with its errors
    assert message in response.content.decode()
    assert not DatabaseSchedule.objects.exists()


@pytest.mark.django_db
def test_a_user_without_the_permission_is_refused(staff_client: Any) -> None:
    row = stored()
    change = reverse("admin:django_sqlq_databaseschedule_change", args=[row.pk])
    viewer = staff_client("view_job")  # may see the Schedules page, not edit schedules
    assert viewer.get(reverse(CHANGELIST)).status_code == 403
    assert viewer.post(reverse(ADD), form(name="other")).status_code == 403
    assert viewer.post(change, form(cron="5 * * * *")).status_code == 403
    only_view = staff_client("view_databaseschedule")
    assert only_view.get(change).status_code == 200
    assert only_view.post(change, form(cron="5 * * * *")).status_code == 403
    row.refresh_from_db()
    assert row.cron == "0 * * * *"
    assert DatabaseSchedule.objects.count() == 1


@pytest.mark.django_db
def test_the_schedules_page_lists_both_kinds(staff_client: Any) -> None:
    row = stored(payload={"n": 1})
    stored(name="db-off", enabled=False)
    page = staff_client(superuser=True).get(reverse(PAGE)).content.decode()
    assert 'data-schedule="nightly-report" data-source="settings"' in page
    assert 'data-schedule="db-hourly" data-source="database"' in page
    assert 'class="sqlq-schedule sqlq-schedule-disabled" data-schedule="db-off"' in page
    edit = reverse("admin:django_sqlq_databaseschedule_change", args=[row.pk])
    assert f'href="{edit}" class="sqlq-edit-schedule"' in page
    assert page.count("sqlq-edit-schedule") == 2  # the code schedule is read-only
    assert "sqlq-add-schedule" in page
    viewer = staff_client("view_job").get(reverse(PAGE)).content.decode()
    assert "sqlq-edit-schedule" not in viewer  # no permission on stored schedules
    assert "sqlq-add-schedule" not in viewer


@pytest.mark.django_db
def test_run_now_enqueues_a_stored_schedule(staff_client: Any) -> None:
    stored(type="tests.echo", payload={"n": 7})
    response = staff_client(superuser=True).post(
        reverse("admin:django_sqlq_scheduletick_run_now"), {"name": "db-hourly"}
    )
    assert response.status_code == 302
    job = Job.objects.get()
    assert (job.type, job.payload) == ("tests.echo", {"n": 7})
    assert not ScheduleTick.objects.exists()  # not a tick


# -- the scheduler, in this process -----------------------------------------------------------


@db
def test_a_stored_schedule_ticks_once_and_changes_need_no_restart(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="django_sqlq")
    clock = Clock(at("2026-01-10 00:59:30"))
    first, second = scheduler_at(clock), scheduler_at(clock)
    row = stored(payload={"v": 1})
    assert first.scheduler.enqueue_due() == []
    assert second.scheduler.enqueue_due() == []
    clock.now = at("2026-01-10 01:00:01")
    won = first.scheduler.enqueue_due() + second.scheduler.enqueue_due()
    assert [(name, tick) for name, tick, _ in won] == [("db-hourly", at("2026-01-10 01:00"))]
    assert Job.objects.get().payload == {"v": 1}
    assert "Schedule db-hourly: tests.noop cron='0 * * * *'" in caplog.text

    # An edit is read at the next pass: the same workers, no restart.
    row.payload, row.cron = {"v": 2}, "30 * * * *"
    row.save()
    clock.now = at("2026-01-10 01:30:00")
    won = second.scheduler.enqueue_due() + first.scheduler.enqueue_due()
    assert [tick for _, tick, _ in won] == [at("2026-01-10 01:30")]
    assert Job.objects.order_by("-pk")[0].payload == {"v": 2}

    # Disabled: no tick. Deleted: the jobs of its past ticks stay.
    row.enabled = False
    row.save()
    clock.now = at("2026-01-10 02:30:00")
    assert first.scheduler.enqueue_due() == []
    assert "schedule db-hourly was disabled or removed" in caplog.text
    row.delete()
    assert Job.objects.count() == 2
    assert ScheduleTick.objects.filter(name="db-hourly").count() == 2


@db
@pytest.mark.parametrize(("missed", "runs"), [("skip", 0), ("run_once", 1)])
def test_enabling_again_follows_the_missed_tick_policy(missed: str, runs: int) -> None:
    clock = Clock(at("2026-01-10 00:59:30"))
    worker = scheduler_at(clock)
    row = stored(missed=missed)
    worker.scheduler.enqueue_due()
    clock.now = at("2026-01-10 01:00:00")
    assert len(worker.scheduler.enqueue_due()) == 1
    row.enabled = False
    row.save()
    clock.now = at("2026-01-10 01:30:00")
    worker.scheduler.enqueue_due()
    row.enabled = True
    row.save()
    clock.now = at("2026-01-10 02:10:00")  # 02:00 fell while it was disabled
    assert len(worker.scheduler.enqueue_due()) == runs
    clock.now = at("2026-01-10 03:00:00")
    won = worker.scheduler.enqueue_due()
    assert [name for name, _, _ in won].count("db-hourly") == 1  # and it goes on


@db
def test_a_new_stored_schedule_does_not_run_a_tick_from_before_it_existed() -> None:
    clock = Clock(at("2026-01-10 01:00:30"))
    worker = scheduler_at(clock)
    worker.scheduler.enqueue_due()
    stored(missed="run_once")
    clock.now = at("2026-01-10 01:10:00")
    assert worker.scheduler.enqueue_due() == []  # 01:00 came before it was read
    clock.now = at("2026-01-10 02:00:00")
    assert len(worker.scheduler.enqueue_due()) == 1


@db
def test_a_row_that_cannot_run_is_logged_once_and_the_others_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock(at("2026-01-10 00:59:30"))
    worker = scheduler_at(clock)
    stored()
    # Rows written around clean(): a settings change, a shell, a fixture.
    DatabaseSchedule.objects.create(name="nightly-report", type="tests.noop", cron="* * * * *")
    DatabaseSchedule.objects.create(name="gone", type="tests.was_removed", cron="* * * * *")
    worker.scheduler.enqueue_due()
    clock.now = at("2026-01-10 01:00:00")
    won = worker.scheduler.enqueue_due()
    assert [name for name, _, _ in won] == ["db-hourly"]
    assert caplog.text.count("database schedule 'gone'") == 1
    assert caplog.text.count("the name is taken by settings") == 1
    assert "not run" in caplog.text


# -- worker processes -------------------------------------------------------------------------


@db
def test_two_worker_processes_pick_up_a_new_schedule_and_enqueue_each_tick_once(
    spawn_worker: Callable[..., WorkerProcess],
) -> None:
    env = {"SQLQ_TEST_SCHEDULE": json.dumps({})}
    workers = [spawn_worker("--worker-id", f"dbsched-{n}", env=env) for n in range(2)]
    for worker in workers:
        worker.wait_ready()
    stored(name="every-second", cron="* * * * * *")  # added while they run
    wait_for(lambda: all("Schedule every-second" in w.output() for w in workers), timeout=30)
    wait_for(lambda: ScheduleTick.objects.filter(name="every-second").count() >= 4, timeout=30)

    DatabaseSchedule.objects.filter(name="every-second").update(enabled=False)
    wait_for(lambda: all("every-second was disabled" in w.output() for w in workers), timeout=30)
    stopped_at = ScheduleTick.objects.filter(name="every-second").count()
    for worker in workers:
        worker.signal(signal.SIGTERM)
    for worker in workers:
        assert worker.wait() == 0, worker.output()

    ticks = list(ScheduleTick.objects.values_list("tick_at", "job_id"))
    jobs = list(Job.objects.filter(type="tests.noop").values_list("scheduled_at", "pk"))
    assert sorted(ticks) == sorted(jobs)  # one job per tick, the tick's own
    assert len({scheduled for scheduled, _ in jobs}) == len(jobs)
    assert ScheduleTick.objects.count() == stopped_at  # nothing after it was disabled
