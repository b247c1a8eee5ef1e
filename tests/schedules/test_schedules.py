"""Recurring jobs (issue 14 part 2): declaration and validation, which tick is due, each tick
enqueued once (also by 3 worker processes racing for it), missed ticks after downtime,
DST, run now, @handler(cron=) and @task schedules. Every test that touches the database
runs on both engines."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from cronsim import CronSim
from django.conf import settings
from django.test import override_settings

from django_sqlq import handler, registry, schedules
from django_sqlq.checks import check_settings
from django_sqlq.exceptions import ConfigurationError
from django_sqlq.models import Job, ScheduleTick
from django_sqlq.schedules import LastTick, Schedule, due_tick
from django_sqlq.worker import Worker
from tests.conftest import WorkerProcess, run_burst, wait_for
from tests.schedules.helpers import Clock, at, scheduler_at

db = pytest.mark.django_db(transaction=True)


@pytest.fixture
def with_schedule() -> Iterator[Callable[[dict[str, Any]], None]]:
    overrides: list[Any] = []

    def apply(schedule: dict[str, Any]) -> None:
        override = override_settings(SQLQ={**settings.SQLQ, "SCHEDULE": schedule})
        override.enable()
        overrides.append(override)

    yield apply
    for override in reversed(overrides):
        override.disable()


NIGHTLY = {"nightly": {"type": "tests.noop", "cron": "0 3 * * *", "payload": {"n": 1}}}


# -- validation -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"type": "tests.noop", "cron": "61 * * * *"}, "not a valid cron expression"),
        ({"type": "tests.noop", "cron": "* * *"}, "not a valid cron expression"),
        ({"type": "tests.noop", "cron": 5}, "must be a cron expression"),
        ({"type": "tests.noop", "cron": "* * * * *", "timezone": "Europe/Pari"}, "time zone"),
        ({"type": "tests.noop", "cron": "* * * * *", "missed": "all"}, "'missed'"),
        ({"cron": "* * * * *"}, "needs 'type'"),
        ({"type": "a", "task": "b", "cron": "* * * * *"}, "needs 'type'"),
        ({"type": "tests.noop", "cron": "* * * * *", "every": 5}, "unknown key(s) every"),
        ({"type": "tests.noop", "cron": "* * * * *", "priority": 101}, "'priority'"),
        ({"type": "tests.noop", "cron": "* * * * *", "payload": {1j}}, "payload"),
        ({"type": "tests.noop", "cron": "* * * * *", "queue": "nope"}, "unknown queue 'nope'"),
        ("0 3 * * *", "must be a dict"),
    ],
)
def test_bad_entries_are_named_in_the_error(
    with_schedule: Callable[[dict[str, Any]], None], entry: Any, message: str
) -> None:
    with_schedule({"broken-one": entry})
    with pytest.raises(ConfigurationError, match="broken-one") as info:
        schedules.load()
    assert message in str(info.value)
    errors = [m for m in check_settings() if m.id == "django_sqlq.E030"]
    assert len(errors) == 1
    assert "broken-one" in errors[0].msg


def test_schedule_setting_must_be_a_dict(with_schedule: Callable[[dict[str, Any]], None]) -> None:
    with_schedule(["nightly"])  # type: ignore[arg-type]
    assert [m.id for m in check_settings() if str(m.id).startswith("django_sqlq.E")] == [
        "django_sqlq.E001"
    ]


def test_a_good_schedule_passes_the_checks(
    with_schedule: Callable[[dict[str, Any]], None],
) -> None:
    with_schedule(NIGHTLY)
    assert not [m for m in check_settings() if m.id == "django_sqlq.E030"]
    assert schedules.load()["nightly"].cron == "0 3 * * *"


def test_handler_cron_declares_a_schedule_named_after_the_type(
    with_schedule: Callable[[dict[str, Any]], None],
) -> None:
    @handler("tests.every_five", cron="*/5 * * * *")
    def every_five(payload: Any) -> None:
        pass

    try:
        loaded = schedules.load()["tests.every_five"]
        assert (loaded.type, loaded.cron, loaded.source) == (
            "tests.every_five",
            "*/5 * * * *",
            "@handler",
        )
        with_schedule({"tests.every_five": {"type": "tests.noop", "cron": "* * * * *"}})
        with pytest.raises(
            ConfigurationError, match=r"Two schedules are named 'tests\.every_five'"
        ):
            schedules.load()
    finally:
        registry.unregister("tests.every_five")
        schedules.undeclare("tests.every_five")


def test_handler_cron_with_a_bad_expression_raises_at_once() -> None:
    with pytest.raises(ConfigurationError, match=r"@handler schedule 'tests.bad_cron'.*cron"):

        @handler("tests.bad_cron", cron="*/5 * *")
        def bad(payload: Any) -> None:
            pass

    registry.unregister("tests.bad_cron")


def test_two_decorators_cannot_share_a_schedule_name() -> None:
    first = schedules.from_decorator(
        "a.one", {"cron": "* * * * *", "name": "shared"}, source="@handler"
    )
    second = schedules.from_decorator(
        "a.two", {"cron": "* * * * *", "name": "shared"}, source="@handler"
    )
    schedules.declare(first)
    try:
        with pytest.raises(ConfigurationError, match="already declared"):
            schedules.declare(second)
    finally:
        schedules.undeclare("shared")


# -- which tick is due (no database) ----------------------------------------------------------

DAILY = Schedule(name="d", cron="0 3 * * *", type="tests.noop")
DAILY_SKIP = Schedule(name="d", cron="0 3 * * *", type="tests.noop", missed="skip")


def test_due_tick_rules() -> None:
    now = at("2026-01-10 10:00:30")
    # A worker that started mid-minute does not run a tick from before it first saw a
    # schedule with no history, whatever the policy.
    assert due_tick(DAILY, now=now, last=None, watching_since=now) is None
    # Downtime: yesterday's tick recorded, today's 03:00 missed: run_once runs it, skip not.
    yesterday = LastTick(at("2026-01-09 03:00"), DAILY.spec)
    assert due_tick(DAILY, now=now, last=yesterday, watching_since=now) == at("2026-01-10 03:00")
    assert due_tick(DAILY_SKIP, now=now, last=yesterday, watching_since=now) is None
    # Several days down: still only the latest tick, once.
    old = LastTick(at("2025-12-01 03:00"), DAILY.spec)
    assert due_tick(DAILY, now=now, last=old, watching_since=now) == at("2026-01-10 03:00")
    # The cron (or time zone) changed since the last tick (a deploy): a new schedule, no
    # catch-up of a tick the new definition "missed".
    changed = LastTick(at("2026-01-09 04:00"), "0 4 * * * @ UTC")
    assert due_tick(DAILY, now=now, last=changed, watching_since=now) is None
    # On time: a tick that fell while watching runs under both policies.
    since = at("2026-01-10 02:00")
    for schedule in (DAILY, DAILY_SKIP):
        assert due_tick(schedule, now=now, last=None, watching_since=since) == at(
            "2026-01-10 03:00"
        )
    # Already recorded (by any worker): nothing.
    done = LastTick(at("2026-01-10 03:00"), DAILY.spec)
    assert due_tick(DAILY, now=now, last=done, watching_since=since) is None


def test_next_and_latest_tick_use_the_time_zone() -> None:
    paris = Schedule(name="p", cron="0 3 * * *", type="t", timezone="Europe/Paris")
    assert paris.next_tick(at("2026-01-10 10:00")) == at("2026-01-11 02:00")  # CET, UTC+1
    assert paris.latest_tick(at("2026-07-10 01:00")) == at("2026-07-10 01:00")  # CEST, at now


# -- enqueueing ticks (database, both engines) ------------------------------------------------


@db
def test_a_tick_is_enqueued_once_at_its_time(
    with_schedule: Callable[[dict[str, Any]], None],
) -> None:
    with_schedule(NIGHTLY)
    clock = Clock(at("2026-01-10 02:59:30"))
    first, second = scheduler_at(clock), scheduler_at(clock)
    assert first.scheduler.enqueue_due() == []
    assert second.scheduler.enqueue_due() == []
    assert first.scheduler.seconds_to_next() == 30.0
    clock.now = at("2026-01-10 03:00:00.4")
    won = first.scheduler.enqueue_due() + second.scheduler.enqueue_due()
    assert len(won) == 1
    job = Job.objects.get()
    assert (job.type, job.payload, job.scheduled_at) == (
        "tests.noop",
        {"n": 1},
        at("2026-01-10 03:00"),
    )
    tick = ScheduleTick.objects.get()
    assert (tick.name, tick.tick_at, tick.job_id) == ("nightly", at("2026-01-10 03:00"), job.pk)
    # Calling it again (both workers) changes nothing.
    assert first.scheduler.enqueue_due() + second.scheduler.enqueue_due() == []
    assert Job.objects.count() == 1


@db
@pytest.mark.parametrize(("missed", "expected"), [("run_once", 1), ("skip", 0)])
def test_missed_ticks_after_downtime(
    with_schedule: Callable[[dict[str, Any]], None], missed: str, expected: int
) -> None:
    with_schedule({"nightly": {**NIGHTLY["nightly"], "missed": missed}})
    spec = "0 3 * * * @ UTC"
    ScheduleTick.objects.create(name="nightly", tick_at=at("2026-01-01 03:00"), spec=spec)
    clock = Clock(at("2026-01-10 10:00"))  # nine days later
    workers = [scheduler_at(clock) for _ in range(3)]
    for worker in workers:
        worker.scheduler.enqueue_due()
    jobs = list(Job.objects.all())
    assert len(jobs) == expected
    if expected:
        assert jobs[0].scheduled_at == at("2026-01-10 03:00")  # the last one, once
    # And the next night, on time, under both policies.
    clock.now = at("2026-01-11 03:00:01")
    for worker in workers:
        worker.scheduler.enqueue_due()
    assert Job.objects.filter(scheduled_at=at("2026-01-11 03:00")).count() == 1


@db
def test_ticks_survive_pruned_jobs_and_are_trimmed(
    with_schedule: Callable[[dict[str, Any]], None],
) -> None:
    with_schedule({"minutely": {"type": "tests.noop", "cron": "* * * * *"}})
    clock = Clock(at("2026-01-10 00:00:30"))
    worker = scheduler_at(clock)
    worker.scheduler.enqueue_due()
    for minute in range(1, 16):
        clock.now = at("2026-01-10 00:00:30") + timedelta(minutes=minute)
        assert len(worker.scheduler.enqueue_due()) == 1
    assert ScheduleTick.objects.count() == schedules.KEEP_TICKS
    assert Job.objects.count() == 15
    Job.objects.all().delete()  # the retention pruner removed the jobs
    other = scheduler_at(clock)  # a worker started later: nothing runs twice
    assert other.scheduler.enqueue_due() == []
    assert worker.scheduler.enqueue_due() == []
    assert Job.objects.count() == 0


@db
def test_dst_in_europe_paris_follows_cronsim(
    with_schedule: Callable[[dict[str, Any]], None],
) -> None:
    with_schedule(
        {"half-two": {"type": "tests.noop", "cron": "30 2 * * *", "timezone": "Europe/Paris"}}
    )
    enqueued: list[datetime] = []
    for start, end in (
        (at("2026-03-28 20:00"), at("2026-03-30 04:00")),  # spring forward, 29 March
        (at("2026-10-24 20:00"), at("2026-10-26 04:00")),  # fall back, 25 October
    ):
        ScheduleTick.objects.all().delete()  # no history: no catch-up at the window's start
        clock = Clock(start)
        worker = scheduler_at(clock)
        worker.scheduler.enqueue_due()
        while clock.now < end:
            clock.now += timedelta(minutes=5)
            enqueued += [tick for _, tick, _ in worker.scheduler.enqueue_due()]
    paris = schedules.load()["half-two"].tz
    expected = [
        # 02:30 does not exist on 29 March: cron (and cronsim) run at 03:00 CEST.
        at("2026-03-29 01:00"),
        at("2026-03-30 00:30"),
        # 02:30 happens twice on 25 October: once, at the first (CEST).
        at("2026-10-25 00:30"),
        at("2026-10-26 01:30"),
    ]
    assert enqueued == expected
    cron = [
        next(CronSim("30 2 * * *", start.astimezone(paris))).astimezone(UTC)
        for start in (at("2026-03-28 20:00"), at("2026-03-29 02:00"), at("2026-10-24 20:00"),
                      at("2026-10-25 02:00"))
    ]  # fmt: skip
    assert enqueued == cron
    assert sorted(Job.objects.values_list("scheduled_at", flat=True)) == expected


@db
def test_run_now_enqueues_without_a_tick(with_schedule: Callable[[dict[str, Any]], None]) -> None:
    with_schedule(NIGHTLY)
    schedule = schedules.load()["nightly"]
    job_id = schedules.enqueue_job(schedule, run_at=None, database="default")
    assert Job.objects.get(pk=job_id).type == "tests.noop"
    assert not ScheduleTick.objects.exists()
    run_burst()
    assert Job.objects.get(pk=job_id).status == "completed"


@db
def test_task_schedules_from_settings_and_recurring(
    with_schedule: Callable[[dict[str, Any]], None],
) -> None:
    from tests.testapp import tasks

    with_schedule(
        {"adder": {"task": "tests.testapp.tasks.add", "cron": "0 * * * *", "args": [2, 3]}}
    )
    schedules.recurring("30 * * * *", name="echo", kwargs={"x": 1}, queue="reports")(tasks.echo)
    try:
        clock = Clock(at("2026-01-10 10:00:01"))  # just after the 10:00 tick: not run
        worker = scheduler_at(clock)
        worker.scheduler.enqueue_due()
        clock.now = at("2026-01-10 10:30:00")
        won = worker.scheduler.enqueue_due()
        assert [name for name, _, _ in won] == ["echo"]
        clock.now = at("2026-01-10 11:00:00")
        assert [name for name, _, _ in worker.scheduler.enqueue_due()] == ["adder"]
    finally:
        schedules.undeclare("echo")
    run_burst(queues=["default", "reports"])
    adder = Job.objects.get(type="tests.testapp.tasks.add")
    echo = Job.objects.get(type="tests.testapp.tasks.echo")
    assert (adder.status, adder.result, adder.scheduled_at) == (
        "completed",
        5,
        at("2026-01-10 11:00"),
    )
    assert (echo.queue, echo.result) == ("reports", {"args": [], "kwargs": {"x": 1}})


def test_importing_the_schedules_before_the_apps_load_imports_no_model() -> None:
    """@recurring sits in a tasks.py that may be imported while apps still load; the names
    that need the models (enqueue_job...) load on first use."""
    code = (
        "import sys; import django_sqlq.schedules as s; "
        "assert callable(s.recurring) and callable(s.stored_errors); "
        "assert 'django_sqlq.models' not in sys.modules, 'models imported'"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings"}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr


@db
def test_a_recurring_task_in_an_apps_tasks_py_is_found_by_the_worker() -> None:
    """``@recurring`` above a ``@task`` in ``tasks.py`` (where Django's docs put tasks) of
    an app with no ``jobs.py``: the scheduler imports it as it imports ``jobs.py``, with
    nothing imported by the test (docs/howto/recurring-jobs.md#testing), and runs its
    ticks."""
    installed = [*settings.INSTALLED_APPS, "tests.recurringapp"]
    try:
        with override_settings(INSTALLED_APPS=installed):
            clock = Clock(at("2026-01-10 04:14:30"))
            worker = Worker(clock=clock)
            worker.scheduler.prepare()
            assert "recurringapp-nightly" in worker.scheduler.schedules
            assert worker.scheduler.enqueue_due() == []
            clock.now = at("2026-01-10 04:15:00")
            won = worker.scheduler.enqueue_due()
            assert [name for name, _, _ in won] == ["recurringapp-nightly"]
        run_burst()
    finally:
        schedules.undeclare("recurringapp-nightly")
    job = Job.objects.get(type="tests.recurringapp.tasks.nightly")
    assert (job.status, job.result) == ("completed", "done")


@db
def test_a_schedule_for_an_unknown_type_stops_the_worker(
    with_schedule: Callable[[dict[str, Any]], None],
) -> None:
    with_schedule({"ghost": {"type": "tests.no_such_handler", "cron": "* * * * *"}})
    with pytest.raises(ConfigurationError, match=r"SQLQ\['SCHEDULE'\]\['ghost'\]"):
        run_burst()


# -- worker processes -------------------------------------------------------------------------


def _stop(workers: list[WorkerProcess]) -> None:
    for worker in workers:
        worker.signal(signal.SIGTERM)
    for worker in workers:
        assert worker.wait() == 0, worker.output()


@db
def test_three_worker_processes_enqueue_each_tick_once(
    spawn_worker: Callable[..., WorkerProcess],
) -> None:
    env = {
        "SQLQ_TEST_SCHEDULE": json.dumps(
            {"every-second": {"type": "tests.noop", "cron": "* * * * * *"}}
        )
    }
    workers = [spawn_worker("--worker-id", f"sched-{n}", env=env) for n in range(3)]
    for worker in workers:
        worker.wait_ready()
    wait_for(lambda: ScheduleTick.objects.count() >= 4, timeout=30)
    _stop(workers)
    ticks = list(ScheduleTick.objects.values_list("tick_at", "job_id"))
    jobs = list(Job.objects.filter(type="tests.noop").values_list("scheduled_at", "pk"))
    assert sorted(ticks) == sorted(jobs)  # one job per tick, the tick's own
    assert len({scheduled for scheduled, _ in jobs}) == len(jobs)
    for worker in workers:
        assert "Schedule every-second: tests.noop cron='* * * * * *' tz=UTC" in worker.output()


@db
def test_three_worker_processes_after_downtime_run_one_catch_up(
    spawn_worker: Callable[..., WorkerProcess],
) -> None:
    ScheduleTick.objects.create(
        name="nightly", tick_at=datetime.now(UTC) - timedelta(days=3), spec="0 3 * * * @ UTC"
    )
    env = {
        "SQLQ_TEST_SCHEDULE": json.dumps({"nightly": {"type": "tests.noop", "cron": "0 3 * * *"}})
    }
    workers = [spawn_worker("--worker-id", f"sched-{n}", env=env) for n in range(3)]
    for worker in workers:
        worker.wait_ready()
    wait_for(lambda: Job.objects.filter(status="completed").exists())
    _stop(workers)
    assert Job.objects.count() == 1
    assert ScheduleTick.objects.count() == 2


@db
def test_a_schedule_that_cannot_enqueue_does_not_stop_the_others(
    with_schedule: Callable[[dict[str, Any]], None], caplog: pytest.LogCaptureFixture
) -> None:
    with_schedule(
        {
            "too-big": {"type": "tests.noop", "cron": "* * * * *", "payload": {"x": "y" * 500}},
            "fine": {"type": "tests.noop", "cron": "* * * * *"},
        }
    )
    clock = Clock(at("2026-01-10 00:00:30"))
    worker = scheduler_at(clock)
    worker.scheduler.enqueue_due()
    clock.now = at("2026-01-10 00:01:00")
    with override_settings(SQLQ={**settings.SQLQ, "SCHEDULE": settings.SQLQ["SCHEDULE"],
                                 "MAX_PAYLOAD_BYTES": 100}):  # fmt: skip
        won = worker.scheduler.enqueue_due()
    assert [name for name, _, _ in won] == ["fine"]
    assert "schedule too-big: cannot enqueue the tick of 2026-01-10T00:01:00+00:00" in caplog.text
    assert list(ScheduleTick.objects.values_list("name", flat=True)) == ["fine"]  # retried later


@db
def test_a_worker_on_naive_local_time_enqueues_ticks_once(
    spawn_worker: Callable[..., WorkerProcess],
) -> None:
    env = {
        "SQLQ_TEST_SCHEDULE": json.dumps(
            {"every-second": {"type": "tests.noop", "cron": "* * * * * *"}}
        ),
        "SQLQ_TEST_LOCAL_TIME_ZONE": "America/New_York",
    }
    workers = [spawn_worker("--worker-id", f"naive-{n}", env=env) for n in range(2)]
    for worker in workers:
        worker.wait_ready()
    wait_for(lambda: ScheduleTick.objects.count() >= 3, timeout=30)
    _stop(workers)
    ticks = list(ScheduleTick.objects.values_list("tick_at", flat=True))
    assert len(set(ticks)) == len(ticks) == Job.objects.filter(type="tests.noop").count()
    for worker in workers:
        assert "Traceback" not in worker.output()


@db
@pytest.mark.parametrize("processes", ["1", "2"])
def test_sqlq_worker_refuses_to_start_on_a_bad_schedule(
    spawn_worker: Callable[..., WorkerProcess], processes: str
) -> None:
    env = {
        "SQLQ_TEST_SCHEDULE": json.dumps({"ghost": {"type": "tests.nope", "cron": "0 3 * * *"}})
    }
    worker = spawn_worker("--processes", processes, env=env)
    assert worker.wait() != 0
    output = worker.output()
    assert (
        "SQLQ['SCHEDULE']['ghost']: No handler is registered for job type 'tests.nope'" in output
    )
    assert "Traceback" not in output


@pytest.mark.django_db(transaction=True, databases=["default", "other"])
def test_ticks_and_jobs_share_the_queue_database(
    with_schedule: Callable[[dict[str, Any]], None],
) -> None:
    with_schedule(NIGHTLY)
    with override_settings(SQLQ={**settings.SQLQ, "DATABASE": "other"}):
        clock = Clock(at("2026-01-10 02:59:30"))
        worker = scheduler_at(clock)
        worker.scheduler.enqueue_due()
        clock.now = at("2026-01-10 03:00:00")
        assert len(worker.scheduler.enqueue_due()) == 1
        assert Job.objects.using("other").count() == 1
        assert ScheduleTick.objects.using("other").count() == 1
    assert not Job.objects.using("default").exists()
    assert not ScheduleTick.objects.using("default").exists()


def test_the_scheduler_sleeps_until_the_next_tick_at_most_a_minute(
    with_schedule: Callable[[dict[str, Any]], None],
) -> None:
    from django_sqlq.worker.maintenance.ticks import MAX_SLEEP

    with_schedule(NIGHTLY)
    clock = Clock(at("2026-01-10 02:59:58.5"))
    worker = Worker(clock=clock)
    worker.scheduler.schedules = schedules.load()
    assert worker.scheduler.seconds_to_next() == 1.5
    clock.now = at("2026-01-10 03:00:00")
    assert worker.scheduler.seconds_to_next() == MAX_SLEEP  # next: tomorrow, re-checked
