"""Adversarial tests of schedules stored in the database (issue 26), from
docs/howto/recurring-jobs.md "Schedules in the database" and docs/howto/admin.md."""

from __future__ import annotations

import json
import logging
import signal
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.conf import settings
from django.core.exceptions import ValidationError
from django.test import override_settings
from django.urls import reverse
from django.utils import timezone

from django_sqlq import handler, registry
from django_sqlq.models import DatabaseSchedule, Job, ScheduleTick
from tests.conftest import WorkerProcess, wait_for
from tests.schedules import helpers
from tests.schedules.helpers import CODE, Clock, at, scheduler_at


@pytest.fixture(autouse=True)
def _code_schedule() -> Iterator[None]:
    with override_settings(SQLQ={**settings.SQLQ, "SCHEDULE": CODE}):
        yield


def stored(**fields: Any) -> DatabaseSchedule:
    return helpers.stored(**{"name": "adv-hourly", **fields})


def names(won: list[Any]) -> list[str]:
    return [name for name, _tick, _job in won]


# -- validation --------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"timezone": "../../etc/passwd"}, "timezone"),
        ({"timezone": "/usr/share/zoneinfo/UTC"}, "timezone"),
        ({"timezone": "Europe/Paris\x00"}, "timezone"),
        ({"timezone": ""}, "timezone"),
        ({"cron": ""}, "cron"),
        ({"cron": "* * * * * * *"}, "cron"),
        ({"cron": "0 0 31 2 *"}, "cron"),  # February 31st: never fires
        ({"cron": "* * * * *\x00"}, "cron"),
        ({"payload": {"a": "\ud800"}}, "payload"),
        ({"payload": {"a": "\x00"}}, "payload"),
        ({"payload": {"a": float("nan")}}, "payload"),
        ({"priority": -101}, "priority"),
        ({"name": "x" * 201}, "name"),
        ({"name": ""}, "name"),
        ({"missed": "catch_up"}, "missed"),
        ({"type": "tests.noop", "payload": {"a": 1}, "kwargs": {"b": 2}}, "args"),
    ],
)
def test_full_clean_refuses_on_the_field(fields: dict[str, Any], field: str) -> None:
    row = DatabaseSchedule(**{"name": "adv", "type": "tests.noop", "cron": "0 3 * * *", **fields})
    with pytest.raises(ValidationError) as caught:
        row.full_clean()
    assert field in caught.value.message_dict, caught.value.message_dict


@pytest.mark.django_db
def test_a_name_a_decorator_schedule_uses_is_refused() -> None:
    def job(payload: Any) -> None:  # noqa: ARG001
        return None

    handler("adv26.decorated", cron="0 4 * * *")(job)
    try:
        row = DatabaseSchedule(name="adv26.decorated", type="tests.noop", cron="0 3 * * *")
        with pytest.raises(ValidationError) as caught:
            row.full_clean()
        assert "name" in caught.value.message_dict
    finally:
        from django_sqlq import schedules

        registry.unregister("adv26.decorated")
        schedules.undeclare("adv26.decorated")


# -- the admin ---------------------------------------------------------------------------------

ADD = "admin:django_sqlq_databaseschedule_add"
CHANGE = "admin:django_sqlq_databaseschedule_change"
DELETE = "admin:django_sqlq_databaseschedule_delete"
CHANGELIST = "admin:django_sqlq_databaseschedule_changelist"
PAGE = "admin:django_sqlq_scheduletick_changelist"


def form(**fields: Any) -> dict[str, Any]:
    data = {"name": "adv-form", "enabled": "on", "type": "tests.echo", "task": "",
            "cron": "0 * * * *", "timezone": "UTC", "missed": "run_once",
            "payload": '{"a": 1}', "args": "[]", "kwargs": "{}", "queue": "",
            "priority": ""}  # fmt: skip
    data.update(fields)
    return {k: v for k, v in data.items() if v is not None}


@pytest.mark.django_db
@pytest.mark.parametrize(
    "fields",
    [
        {"payload": "{bad"}, {"payload": "NaN"}, {"payload": '{"a": NaN}'},
        {"payload": '{"a": "\\u0000"}'},
        {"args": "{bad"}, {"priority": "abc"}, {"priority": "1e2"}, {"priority": "99999999999"},
        {"timezone": "../../etc/passwd"}, {"timezone": "Nowhere/City"},
        {"cron": "*/0 * * * *"}, {"cron": "@reboot"}, {"queue": "emial"},
        {"queue": "x" * 300}, {"name": "nightly-report"}, {"type": "tests.ehco"},
        {"type": "", "task": ""}, {"name": "a\x00b"}, {"name": "é" * 300},
    ],
)  # fmt: skip
def test_the_admin_form_refuses_bad_input_without_a_server_error(
    staff_client: Any, fields: dict[str, str]
) -> None:
    client = staff_client("add_databaseschedule", "view_databaseschedule")
    response = client.post(reverse(ADD), form(**fields))
    assert response.status_code == 200, (fields, response.status_code)  # the form again
    assert b"errornote" in response.content or b"errorlist" in response.content
    assert not DatabaseSchedule.objects.exists()


@pytest.mark.django_db
def test_the_admin_form_refuses_a_lone_surrogate_in_the_payload(staff_client: Any) -> None:
    client = staff_client("add_databaseschedule", "view_databaseschedule")
    response = client.post(reverse(ADD), form(payload='{"a": "\\ud800"}'))
    assert response.status_code == 200
    assert b"errorlist" in response.content
    assert not DatabaseSchedule.objects.exists()


@pytest.mark.django_db
def test_the_admin_form_refuses_a_deeply_nested_payload(staff_client: Any) -> None:
    client = staff_client("add_databaseschedule", "view_databaseschedule")
    response = client.post(reverse(ADD), form(payload="[" * 5000 + "]" * 5000))
    assert response.status_code == 200
    assert not DatabaseSchedule.objects.exists()


@pytest.mark.django_db
def test_the_admin_refuses_renaming_a_stored_schedule_to_a_code_name(staff_client: Any) -> None:
    row = stored()
    client = staff_client("change_databaseschedule", "view_databaseschedule")
    response = client.post(
        reverse(CHANGE, args=[row.pk]),
        form(name="nightly-report", type="tests.noop", payload="{}"),
    )
    assert response.status_code == 200
    row.refresh_from_db()
    assert row.name == "adv-hourly"


@pytest.mark.django_db
def test_the_admin_refuses_a_duplicate_name_on_the_field(staff_client: Any) -> None:
    stored(name="adv-form")
    client = staff_client("add_databaseschedule", "view_databaseschedule")
    response = client.post(reverse(ADD), form())
    assert response.status_code == 200
    assert DatabaseSchedule.objects.count() == 1


@pytest.mark.django_db
def test_users_without_schedule_permissions(staff_client: Any) -> None:
    row = stored()
    nobody = staff_client()
    for url in (reverse(ADD), reverse(CHANGELIST), reverse(CHANGE, args=[row.pk]),
                reverse(DELETE, args=[row.pk])):  # fmt: skip
        assert nobody.get(url).status_code in (302, 403), url
    assert nobody.post(reverse(ADD), form()).status_code in (302, 403)
    assert nobody.post(reverse(DELETE, args=[row.pk]), {"post": "yes"}).status_code in (302, 403)

    viewer = staff_client("view_databaseschedule")
    assert viewer.get(reverse(CHANGE, args=[row.pk])).status_code == 200
    response = viewer.post(reverse(CHANGE, args=[row.pk]), form(name="adv-hourly", enabled=None))
    assert response.status_code == 403
    assert viewer.post(reverse(ADD), form()).status_code == 403
    assert viewer.post(reverse(DELETE, args=[row.pk]), {"post": "yes"}).status_code == 403
    # the list's inline enable/disable (list_editable) must not let a viewer change it
    viewer.post(
        reverse(CHANGELIST),
        {"form-TOTAL_FORMS": "1", "form-INITIAL_FORMS": "1", "form-0-id": str(row.pk),
         "_save": "Save"},
    )  # fmt: skip
    row.refresh_from_db()
    assert row.enabled is True
    assert DatabaseSchedule.objects.count() == 1

    # schedule permissions are not job permissions: the Schedules page and Run now need
    # view_job / change_job.
    changer = staff_client("change_databaseschedule", "view_databaseschedule")
    assert changer.get(reverse(PAGE)).status_code in (302, 403)


@pytest.mark.django_db
def test_the_changelist_lists_hundreds_of_schedules(staff_client: Any) -> None:
    DatabaseSchedule.objects.bulk_create(
        DatabaseSchedule(name=f"adv-{n:04d}", type="tests.noop", cron=f"{n % 60} * * * *")
        for n in range(400)
    )
    client = staff_client(superuser=True)
    assert client.get(reverse(CHANGELIST)).status_code == 200
    started = time.monotonic()
    assert client.get(reverse(PAGE)).status_code == 200
    assert time.monotonic() - started < 10


# -- the scheduler, on an injected clock ---------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_hundreds_of_schedules_tick_once_each_across_two_workers() -> None:
    DatabaseSchedule.objects.bulk_create(
        DatabaseSchedule(name=f"adv-{n:04d}", type="tests.noop", cron="0 * * * *")
        for n in range(300)
    )
    clock = Clock(at("2026-01-10 00:59:30"))
    first, second = scheduler_at(clock), scheduler_at(clock)
    assert first.scheduler.enqueue_due() == []
    assert second.scheduler.enqueue_due() == []
    clock.now = at("2026-01-10 01:00:01")
    started = time.monotonic()
    won = first.scheduler.enqueue_due() + second.scheduler.enqueue_due()
    assert time.monotonic() - started < 20
    assert sorted(names(won)) == [f"adv-{n:04d}" for n in range(300)]
    assert Job.objects.count() == 300
    clock.now = at("2026-01-10 01:30:00")
    assert second.scheduler.enqueue_due() + first.scheduler.enqueue_due() == []


@pytest.mark.django_db(transaction=True)
def test_deleted_then_added_again_is_a_new_schedule() -> None:
    clock = Clock(at("2026-01-10 00:59:30"))
    worker = scheduler_at(clock)
    row = stored(missed="run_once")
    worker.scheduler.enqueue_due()
    clock.now = at("2026-01-10 01:00:01")
    assert names(worker.scheduler.enqueue_due()) == ["adv-hourly"]
    row.delete()
    clock.now = at("2026-01-10 01:30:00")
    worker.scheduler.enqueue_due()
    clock.now = at("2026-01-10 03:30:00")  # 02:00 and 03:00 fell while it did not exist
    stored(missed="run_once")
    # (nightly-report, the code schedule, is due at 03:00: only the stored one's is not)
    assert "adv-hourly" not in names(worker.scheduler.enqueue_due())
    clock.now = at("2026-01-10 04:00:00")
    assert names(worker.scheduler.enqueue_due()) == ["adv-hourly"]


@pytest.mark.django_db(transaction=True)
def test_renamed_is_a_new_history_and_renamed_back_is_not_a_burst() -> None:
    clock = Clock(at("2026-01-10 00:59:30"))
    worker = scheduler_at(clock)
    row = stored(missed="run_once")
    worker.scheduler.enqueue_due()
    clock.now = at("2026-01-10 01:00:01")
    assert names(worker.scheduler.enqueue_due()) == ["adv-hourly"]
    row.name = "adv-renamed"
    row.save()
    clock.now = at("2026-01-10 01:30:00")
    assert worker.scheduler.enqueue_due() == []  # new history: no catch-up
    clock.now = at("2026-01-10 02:00:00")
    assert names(worker.scheduler.enqueue_due()) == ["adv-renamed"]
    assert Job.objects.count() == 2


@pytest.mark.django_db(transaction=True)
def test_a_broken_row_fixed_runs_again(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="django_sqlq")
    clock = Clock(at("2026-01-10 00:59:30"))
    worker = scheduler_at(clock)
    row = stored(missed="skip")
    other = stored(name="adv-other", missed="skip")
    worker.scheduler.enqueue_due()
    row.cron = "not a cron"
    row.save()  # around clean(), as from a shell
    clock.now = at("2026-01-10 01:00:01")
    assert names(worker.scheduler.enqueue_due()) == ["adv-other"]
    clock.now = at("2026-01-10 01:10:00")
    worker.scheduler.enqueue_due()
    assert caplog.text.count("not run") == 1  # logged once
    row.cron = "0 * * * *"
    row.save()
    clock.now = at("2026-01-10 01:20:00")
    worker.scheduler.enqueue_due()
    clock.now = at("2026-01-10 02:00:00")
    assert sorted(names(worker.scheduler.enqueue_due())) == ["adv-hourly", "adv-other"]
    del other


@pytest.mark.django_db(transaction=True)
def test_a_row_whose_handler_disappears_is_skipped_and_others_run() -> None:
    def job(payload: Any) -> None:  # noqa: ARG001
        return None

    handler("adv26.temporary")(job)
    try:
        clock = Clock(at("2026-01-10 00:59:30"))
        worker = scheduler_at(clock)
        stored(name="adv-temp", type="adv26.temporary")
        stored(name="adv-stays")
        worker.scheduler.enqueue_due()
    finally:
        registry.unregister("adv26.temporary")
    # a worker started after the deploy that removed the handler
    fresh = scheduler_at(clock)
    fresh.scheduler.enqueue_due()
    clock.now = at("2026-01-10 01:00:01")
    won = fresh.scheduler.enqueue_due()
    assert "adv-stays" in names(won)
    assert "adv-temp" not in names(won)


@pytest.mark.django_db(transaction=True)
def test_an_edit_made_with_update_is_followed_by_running_workers() -> None:
    clock = Clock(at("2026-01-10 00:59:30"))
    worker = scheduler_at(clock)
    row = stored(missed="skip", payload={"v": 1})
    worker.scheduler.enqueue_due()
    clock.now = at("2026-01-10 01:00:01")
    assert names(worker.scheduler.enqueue_due()) == ["adv-hourly"]
    DatabaseSchedule.objects.filter(pk=row.pk).update(payload={"v": 2})
    clock.now = at("2026-01-10 01:10:00")
    worker.scheduler.enqueue_due()
    clock.now = at("2026-01-10 02:00:01")
    assert names(worker.scheduler.enqueue_due()) == ["adv-hourly"]
    assert Job.objects.order_by("-pk")[0].payload == {"v": 2}


@pytest.mark.django_db(transaction=True)
def test_disabled_then_enabled_with_a_new_cron_in_between() -> None:
    clock = Clock(at("2026-01-10 00:59:30"))
    worker = scheduler_at(clock)
    row = stored(missed="run_once")
    worker.scheduler.enqueue_due()
    clock.now = at("2026-01-10 01:00:01")
    assert len(worker.scheduler.enqueue_due()) == 1
    row.enabled = False
    row.save()
    clock.now = at("2026-01-10 01:10:00")
    worker.scheduler.enqueue_due()
    row.enabled, row.cron = True, "30 * * * *"  # a new cron: a new schedule for catch-up
    row.save()
    clock.now = at("2026-01-10 03:40:00")
    won = worker.scheduler.enqueue_due()
    assert len(won) <= 1  # never a burst of the missed 01:30, 02:30, 03:30
    clock.now = at("2026-01-10 04:30:00")
    assert len(worker.scheduler.enqueue_due()) == 1


# -- real workers ------------------------------------------------------------------------------


def _wait_for_the_new_payload(workers: list[WorkerProcess]) -> None:
    """Wait until a job with adv-a's changed payload ran; print what there is if none did."""

    def new_payload() -> bool:
        return any(
            p == {"v": 2}
            for p in Job.objects.filter(type="tests.echo").values_list("payload", flat=True)
        )

    try:
        wait_for(new_payload, 30)
    except AssertionError:
        print(
            list(
                Job.objects.filter(type="tests.echo")
                .order_by("-pk")
                .values_list("payload", "created_at")[:5]
            )
        )
        print(list(DatabaseSchedule.objects.values("name", "payload", "updated_at")))
        print(workers[0].output()[-3000:])
        raise


def _all_logged(workers: list[WorkerProcess], text: str) -> None:
    """Wait until every worker logged ``text``; fail with what they logged if one did not."""
    try:
        wait_for(lambda: all(text in worker.output() for worker in workers), 30)
    except AssertionError:
        said = "\n\n".join(worker.output()[-4000:] for worker in workers)
        raise AssertionError(f"not every worker logged {text!r}:\n{said}") from None


def _stop_workers(workers: list[WorkerProcess]) -> None:
    for worker in workers:
        worker.signal(signal.SIGTERM)
    for worker in workers:
        assert worker.wait() == 0, worker.output()[-3000:]


def _ticks_and_jobs_by_schedule() -> tuple[
    list[tuple[str, datetime, int | None]], dict[str, list[datetime]]
]:
    """The adv- tick rows and the scheduled times of the jobs per schedule, checking that
    each tick row names its own job and that no tick was enqueued twice."""
    # each tick row names its own job, each job has exactly one tick row
    rows = list(ScheduleTick.objects.filter(name__startswith="adv-").values_list(
        "name", "tick_at", "job_id"))  # fmt: skip
    job_ids = [job_id for _, _, job_id in rows if job_id is not None]
    assert len(job_ids) == len(set(job_ids))
    scheduled = dict(Job.objects.filter(pk__in=job_ids).values_list("pk", "scheduled_at"))
    for _name, tick_at, job_id in rows:
        assert scheduled[job_id] == tick_at
    # (tick rows may be trimmed: check the jobs themselves) no tick enqueued twice
    by_schedule: dict[str, list[datetime]] = {}
    for payload, scheduled_at in Job.objects.values_list("payload", "scheduled_at"):
        key = payload.get("s") or "a"
        by_schedule.setdefault(key, []).append(scheduled_at)
    for key, times in by_schedule.items():
        assert len(times) == len(set(times)), (key, sorted(times))
    return rows, by_schedule


@pytest.mark.django_db(transaction=True)
def test_two_workers_under_add_change_disable_enable_delete(
    spawn_worker: Callable[..., WorkerProcess],
) -> None:
    """Every-second schedules changed under two running workers: each tick at most one job
    (the job its tick row names), nothing after a delete once both logged it, a disabled
    schedule stops, a re-enabled one resumes with at most one catch-up, a new payload used."""
    env = {"SQLQ_TEST_SCHEDULE": json.dumps({})}
    workers = [spawn_worker("--worker-id", f"adv26-{n}", env=env) for n in range(2)]
    for worker in workers:
        worker.wait_ready()
    stored(name="adv-a", cron="* * * * * *", type="tests.echo", payload={"v": 1})
    stored(name="adv-b", cron="*/2 * * * * *", missed="skip", payload={"s": "b"})
    stored(name="adv-c", cron="* * * * * *", payload={"s": "c"})

    def ticks(name: str) -> int:
        # The jobs the schedule's ticks enqueued (one each): its tick rows are trimmed to
        # the newest KEEP_TICKS (10), so their count stops growing on a slow machine.
        if name == "adv-a":
            return Job.objects.filter(type="tests.echo").count()
        return Job.objects.filter(payload__s=name.removeprefix("adv-")).count()

    wait_for(lambda: ticks("adv-a") >= 3 and ticks("adv-b") >= 2 and ticks("adv-c") >= 3, 30)
    # Both workers read the three rows before they change (one worker can make every tick
    # while the other, between two reads of the table, has not seen them yet: it would then
    # never see them enabled, and never log them disabled).
    for name in ("adv-a", "adv-b", "adv-c"):
        _all_logged(workers, f"Schedule {name}: ")
    row_a = DatabaseSchedule.objects.get(name="adv-a")
    row_a.payload = {"v": 2}
    row_a.save()
    row_b = DatabaseSchedule.objects.get(name="adv-b")
    row_b.enabled = False
    row_b.save()
    DatabaseSchedule.objects.filter(name="adv-c").delete()
    _all_logged(workers, "adv-b was disabled")
    _all_logged(workers, "adv-c was disabled")

    _wait_for_the_new_payload(workers)
    b_stopped, c_stopped = ticks("adv-b"), ticks("adv-c")
    c_jobs = Job.objects.filter(payload__s="c").count()
    disabled_seen = timezone.now()
    a_now = ticks("adv-a")
    wait_for(lambda: ticks("adv-a") >= a_now + 4, 30)
    assert ticks("adv-b") == b_stopped
    assert ticks("adv-c") == c_stopped
    enable_time = timezone.now()
    row_b.enabled = True
    row_b.save()
    wait_for(lambda: ticks("adv-b") >= b_stopped + 2, 30)
    _stop_workers(workers)
    _rows, by_schedule = _ticks_and_jobs_by_schedule()
    c_times = sorted(by_schedule["c"])
    assert len(c_times) == c_jobs  # none after the delete
    assert max(c_times) < enable_time
    # re-enabled with 'skip': no tick from the disabled window is run on re-enabling
    new = [t for t in sorted(by_schedule["b"]) if t > disabled_seen]
    assert all(t >= enable_time - timedelta(seconds=1) for t in new), (enable_time, new[:3])
    for worker in workers:
        text = worker.output()
        assert "Traceback" not in text, text[-3000:]
