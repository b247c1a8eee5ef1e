"""Adversarial tests of recurring jobs (issue 14 part 2), written from the docs only
(docs/howto/recurring-jobs.md, docs/reference/settings.md#schedule, docs/reference/checks.md,
docs/howto/admin.md). Each test asserts what the docs promise; the ones marked "Found from
the docs (fixed)" in their docstring failed when written. Every test runs on SQLite and PostgreSQL
(``SQLQ_TEST_ENGINE``)."""

from __future__ import annotations

import json
import re
import signal
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import Permission
from django.db import connections
from django.test import Client, override_settings
from django.urls import reverse

from django_sqlq import handler, registry, schedules
from django_sqlq.checks import check_settings
from django_sqlq.exceptions import ConfigurationError
from django_sqlq.models import Job, ScheduleTick
from django_sqlq.worker import Worker
from tests.conftest import WorkerProcess, wait_for
from tests.schedules.helpers import Clock, at

db = pytest.mark.django_db(transaction=True)


@pytest.fixture
def with_sqlq() -> Iterator[Callable[..., None]]:
    overrides: list[Any] = []

    def apply(**keys: Any) -> None:
        override = override_settings(SQLQ={**settings.SQLQ, **keys})
        override.enable()
        overrides.append(override)

    yield apply
    for override in reversed(overrides):
        override.disable()


def started(clock: Clock) -> Worker:
    """A worker as the how-to's "Testing" section drives it: prepared, then one wake-up at
    its start."""
    registry.autodiscover()
    worker = Worker(clock=clock)
    worker.scheduler.prepare()
    worker.scheduler.enqueue_due()
    return worker


def ticks(worker: Worker) -> list[datetime]:
    return [tick for _, tick, _ in worker.scheduler.enqueue_due()]


# -- declarations -----------------------------------------------------------------------------


def test_a_payload_over_max_payload_bytes_is_an_e030(
    with_sqlq: Callable[..., None],
) -> None:
    """Found from the docs (fixed; medium).
    The how-to: "Everything is checked before anything runs ... that the
    payload (or args and kwargs) is JSON"; enqueue() refuses a payload over
    MAX_PAYLOAD_BYTES. A schedule whose payload is over the limit passes `manage.py check`
    and the worker's start, then every tick enqueues nothing (and the admin's "Run now" says
    "Could not enqueue big: The payload is ... over the limit"): a nightly job that never runs."""
    with_sqlq(
        MAX_PAYLOAD_BYTES=1024,
        SCHEDULE={
            "big": {"type": "tests.noop", "cron": "0 3 * * *", "payload": {"a": "x" * 2000}}
        },
    )
    errors = [error for error in check_settings(None) if error.id == "django_sqlq.E030"]
    assert errors, "a payload enqueue() refuses passed the checks"
    assert "['big']" in errors[0].msg
    with pytest.raises(ConfigurationError, match="big"):
        schedules.load()


@db
def test_a_payload_over_max_payload_bytes_stops_the_worker_not_each_tick(
    with_sqlq: Callable[..., None],
) -> None:
    """Found from the docs (fixed; medium),
    the worker's side: "the worker refuses to start, naming the schedule,
    if one is invalid". Today prepare() succeeds, and then each tick only logs
    "schedule big: cannot enqueue the tick of ...: The payload is 2008 bytes ..." at ERROR."""
    with_sqlq(
        MAX_PAYLOAD_BYTES=1024,
        SCHEDULE={
            "big": {"type": "tests.noop", "cron": "0 3 * * *", "payload": {"a": "x" * 2000}}
        },
    )
    registry.autodiscover()
    worker = Worker(clock=Clock(at("2026-01-10 02:59:30")))
    with pytest.raises(ConfigurationError, match="big"):
        worker.scheduler.prepare()  # "loads and checks the schedules"


@pytest.mark.parametrize(
    "entry",
    [
        {"type": "tests.noop", "cron": "@reboot"},
        {"type": "tests.noop", "cron": "0 0 30 2 *"},  # 30 February: never
        {"type": "tests.noop", "cron": "0 * * * * * *"},  # seven fields
        {"type": "tests.noop", "cron": "hello"},
        {"type": "tests.noop", "cron": "0 3 * * *", "timezone": "local"},
        {"type": "tests.noop", "cron": "0 3 * * *", "timezone": None},
        {"type": "tests.noop", "cron": "0 3 * * *", "timezone": "../../etc/localtime"},
        {"type": "tests.noop", "cron": "0 3 * * *", "missed": None},
        {"type": "tests.noop", "cron": "0 3 * * *", "priority": True},
        {"type": "tests.noop", "cron": "0 3 * * *", "priority": "5"},
        {"type": "tests.noop", "cron": "0 3 * * *", "payload": {"a": "\x00"}},
        {"type": "tests.noop", "cron": "0 3 * * *", "name": "other"},  # name: decorators only
        {"task": "a.b", "cron": "0 3 * * *", "payload": {}},  # payload is for type
    ],
    ids=repr,
)
def test_junk_entries_are_e030_naming_the_schedule(
    with_sqlq: Callable[..., None], entry: dict[str, Any]
) -> None:
    """The checks reject each junk entry, naming it (all passed when written)."""
    with_sqlq(SCHEDULE={"junk": entry})
    messages = [e.msg for e in check_settings(None) if e.id == "django_sqlq.E030"]
    assert messages
    assert "['junk']" in messages[0]


def test_names_at_the_limits(with_sqlq: Callable[..., None]) -> None:
    """Names are 1 to 200 characters (characters, not bytes)."""
    with_sqlq(SCHEDULE={"é" * 200: {"type": "tests.noop", "cron": "0 3 * * *"}})
    assert not list(check_settings(None))
    with_sqlq(SCHEDULE={"é" * 201: {"type": "tests.noop", "cron": "0 3 * * *"}})
    assert [e.id for e in check_settings(None)] == ["django_sqlq.E030"]


@db
def test_a_200_character_name_gets_its_tick(with_sqlq: Callable[..., None]) -> None:
    name = "é" * 200
    with_sqlq(SCHEDULE={name: {"type": "tests.noop", "cron": "0 3 * * *"}})
    clock = Clock(at("2026-01-10 02:59:30"))
    worker = started(clock)
    clock.now = at("2026-01-10 03:00:01")
    assert ticks(worker) == [at("2026-01-10 03:00")]
    assert ScheduleTick.objects.get().name == name


@db
def test_a_handler_schedule_on_an_unknown_queue_is_refused() -> None:
    """Found from the docs (fixed; medium).
    checks.md: E030 covers `@handler(cron=)` with an unknown queue; the
    how-to: "Checked: ... the queue (one of SQLQ["QUEUES"])" and the worker refuses to start
    on an invalid schedule. `@handler("x", cron={"cron": ..., "queue": "nope"})` decorates
    without error, `manage.py check` is silent, schedules.load() returns it and the worker's
    scheduler prepares it; only each tick's enqueue then fails."""
    registry.autodiscover()
    refused_at_decoration = False
    try:

        @handler("adv.unknown_queue", cron={"cron": "0 3 * * *", "queue": "nope"})
        def unknown_queue(payload: Any) -> None:
            pass

    except ConfigurationError:
        refused_at_decoration = True
    try:
        if not refused_at_decoration:
            assert [e.id for e in check_settings(None)] == ["django_sqlq.E030"]
            with pytest.raises(ConfigurationError, match="nope"):
                Worker().scheduler.prepare()
    finally:
        registry.unregister("adv.unknown_queue")
        schedules.undeclare("adv.unknown_queue")


def test_a_handler_cron_of_the_wrong_type_is_a_configuration_error() -> None:
    """Found from the docs (fixed; low).
    api.md: "`cron`: a cron expression, or a dict ... A bad one raises
    `ConfigurationError` at decoration". A list raises a bare ValueError ("dictionary update
    sequence element #0 has length 9")."""
    bad: Any = ["0 3 * * *"]
    try:
        with pytest.raises(ConfigurationError, match=r"adv\.cron_list"):

            @handler("adv.cron_list", cron=bad)
            def cron_list(payload: Any) -> None:
                pass

    finally:
        registry.unregister("adv.cron_list")
        schedules.undeclare("adv.cron_list")


# -- edits between deploys --------------------------------------------------------------------


@db
def test_an_edited_payload_keeps_the_catch_up(with_sqlq: Callable[..., None]) -> None:
    """Only a change of cron or timezone forgets the history: a new payload (or queue) after
    a weekend of downtime still runs the missed tick once (run_once)."""
    ScheduleTick.objects.create(name="n", tick_at=at("2026-01-08 03:00"), spec="0 3 * * * @ UTC")
    with_sqlq(SCHEDULE={"n": {"type": "tests.noop", "cron": "0 3 * * *", "payload": {"v": 2}}})
    clock = Clock(at("2026-01-10 10:00"))
    registry.autodiscover()
    worker = Worker(clock=clock)
    worker.scheduler.prepare()
    assert ticks(worker) == [at("2026-01-10 03:00")]
    assert Job.objects.get().payload == {"v": 2}


@pytest.mark.parametrize(
    ("recorded", "respelled"),
    [
        ("0 3 * * *", "0  3 * * *"),
        ("0 3 * * *", " 0 3 * * *"),
        ("0 3 * * MON-FRI", "0 3 * * mon-fri"),
    ],
)
@db
def test_a_respelled_cron_keeps_the_catch_up(
    with_sqlq: Callable[..., None], recorded: str, respelled: str
) -> None:
    """Found from the docs (fixed; low).
    The how-to: history is forgotten "when its cron or timezone changed".
    The tick row stores the expression as typed, so a reformatted but identical expression
    (an extra space, day names in lower case) counts as a change and the missed run_once
    tick after downtime is silently dropped. Compare normalised expressions (or the ticks)."""
    ScheduleTick.objects.create(name="n", tick_at=at("2026-01-08 03:00"), spec=f"{recorded} @ UTC")
    with_sqlq(SCHEDULE={"n": {"type": "tests.noop", "cron": respelled}})
    clock = Clock(at("2026-01-09 10:00"))  # a Friday
    registry.autodiscover()
    worker = Worker(clock=clock)
    worker.scheduler.prepare()
    assert ticks(worker) == [at("2026-01-09 03:00")]


@db
def test_a_cron_change_runs_the_new_ticks_once(with_sqlq: Callable[..., None]) -> None:
    """A deploy moves 03:00 to 04:00 at 03:30: nothing at once, the 04:00 tick once."""
    ScheduleTick.objects.create(name="n", tick_at=at("2026-01-10 03:00"), spec="0 3 * * * @ UTC")
    with_sqlq(SCHEDULE={"n": {"type": "tests.noop", "cron": "0 4 * * *"}})
    clock = Clock(at("2026-01-10 03:30"))
    first = started(clock)
    assert not Job.objects.exists()
    clock.now = at("2026-01-10 04:00:01")
    assert ticks(first) == [at("2026-01-10 04:00")]
    assert ticks(started(clock)) == []
    assert Job.objects.count() == 1


# -- clocks -----------------------------------------------------------------------------------


@db
def test_a_forward_clock_jump_runs_only_the_latest_tick(
    with_sqlq: Callable[..., None],
) -> None:
    """A running worker whose clock jumps two days ahead: never a burst, the latest tick once,
    whatever the policy (it fell while the worker ran)."""
    with_sqlq(SCHEDULE={"n": {"type": "tests.noop", "cron": "0 3 * * *", "missed": "skip"}})
    clock = Clock(at("2026-01-10 01:00"))
    worker = started(clock)
    clock.now = at("2026-01-12 05:00")
    assert ticks(worker) == [at("2026-01-12 03:00")]
    assert ticks(worker) == []


@db
def test_a_tick_after_the_clock_stepped_back_is_enqueued_with_skip(
    with_sqlq: Callable[..., None],
) -> None:
    """Found from the docs (fixed; low).
    Rule 2: "If the tick fell while this worker was running, it is enqueued
    (whatever the policy)". A host that boots with its clock a minute fast (VMs, containers)
    starts the worker at 03:00:30 by that clock; chrony steps it back to 02:59:30; the 03:00
    tick then falls while the worker runs, yet with "skip" it is treated as missed (it is
    before the worker's recorded start) and the nightly job does not run that day."""
    ScheduleTick.objects.create(name="n", tick_at=at("2026-01-09 03:00"), spec="0 3 * * * @ UTC")
    with_sqlq(SCHEDULE={"n": {"type": "tests.noop", "cron": "0 3 * * *", "missed": "skip"}})
    clock = Clock(at("2026-01-10 03:00:30"))  # the worker starts on a clock 60 s fast
    worker = started(clock)  # the 03:00 tick is in its past: it waits
    clock.now = at("2026-01-10 02:59:30")  # the clock is stepped back
    assert ticks(worker) == []
    clock.now = at("2026-01-10 03:00:01")  # 03:00 comes while the worker runs
    assert ticks(worker) == [at("2026-01-10 03:00")]


@db
def test_a_backward_clock_jump_does_not_run_a_tick_twice(
    with_sqlq: Callable[..., None],
) -> None:
    with_sqlq(SCHEDULE={"n": {"type": "tests.noop", "cron": "* * * * *"}})
    clock = Clock(at("2026-01-10 02:59:30"))
    worker = started(clock)
    clock.now = at("2026-01-10 03:00:01")
    assert ticks(worker) == [at("2026-01-10 03:00")]
    clock.now = at("2026-01-10 02:59:59")  # an hour of NTP correction backwards
    assert ticks(worker) == []
    clock.now = at("2026-01-10 03:00:02")
    assert ticks(worker) == []
    assert ticks(started(clock)) == []
    assert Job.objects.count() == 1


# -- DST --------------------------------------------------------------------------------------


@db
def test_downtime_ending_in_the_repeated_hour_runs_one_catch_up(
    with_sqlq: Callable[..., None],
) -> None:
    """Fall back in Paris (25 Oct 2026): every worker was down over the first 02:30 (00:30
    UTC) and they start at 02:35 CET (01:35 UTC), after it and after the second 02:30 that
    cron skips. One catch-up (the first 02:30), then the next day's 02:30 only."""
    ScheduleTick.objects.create(
        name="n", tick_at=at("2026-10-24 00:30"), spec="30 2 * * * @ Europe/Paris"
    )
    with_sqlq(
        SCHEDULE={"n": {"type": "tests.noop", "cron": "30 2 * * *", "timezone": "Europe/Paris"}}
    )
    clock = Clock(at("2026-10-25 01:35"))
    registry.autodiscover()
    workers = []
    for _ in range(3):
        worker = Worker(clock=clock)
        worker.scheduler.prepare()
        workers.append(worker)
    enqueued = [tick for worker in workers for tick in ticks(worker)]
    assert enqueued == [at("2026-10-25 00:30")]
    clock.now = at("2026-10-26 01:30:01")
    assert [tick for worker in workers for tick in ticks(worker)] == [at("2026-10-26 01:30")]


# -- real processes ---------------------------------------------------------------------------


def _stop(workers: list[WorkerProcess]) -> None:
    for worker in workers:
        worker.signal(signal.SIGTERM)
    for worker in workers:
        assert worker.wait() == 0, worker.output()


def _one_job_per_tick() -> None:
    for name, job_type in (("slow", "faults.sleep"), ("boom", "tests.boom")):
        rows = list(ScheduleTick.objects.filter(name=name).values_list("tick_at", "job_id"))
        job_ids = [job_id for _, job_id in rows]
        assert len(set(job_ids)) == len(job_ids)
        assert set(Job.objects.filter(pk__in=job_ids).values_list("type", flat=True)) == {job_type}
        # every tick since the first one makes at most one job (retries move a failed
        # job's scheduled_at, so count jobs against the ticks' span, in whole seconds)
        first = Job.objects.filter(type=job_type).order_by("pk").first()
        assert first is not None
        span = max(tick for tick, _ in rows) - first.created_at.replace(microsecond=0)
        assert Job.objects.filter(type=job_type).count() <= span.total_seconds() + 2
    slow = list(Job.objects.filter(type="faults.sleep").values_list("scheduled_at", flat=True))
    assert len(set(slow)) == len(slow), "a tick was enqueued twice"
    ticked = dict(ScheduleTick.objects.filter(name="slow").values_list("job_id", "tick_at"))
    for pk, scheduled_at in Job.objects.filter(pk__in=ticked).values_list("pk", "scheduled_at"):
        assert scheduled_at == ticked[pk]


@db
def test_slow_and_failing_every_second_jobs_with_a_killed_worker(
    spawn_worker: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    """Three workers, two every-second schedules: one whose job takes longer than the interval,
    one whose job fails. One worker is SIGKILLed (possibly mid-tick) and replaced. Each tick
    still has one job, its own, and failing jobs do not stop the next ticks."""
    env = {
        "SQLQ_TEST_SCHEDULE": json.dumps(
            {
                "slow": {
                    "type": "faults.sleep",
                    "cron": "* * * * * *",
                    "payload": {
                        "seconds": 1.5,
                        "n": 0,
                        "started": str(tmp_path / "started"),
                        "path": str(tmp_path / "done"),
                    },
                },
                "boom": {"type": "tests.boom", "cron": "* * * * * *", "payload": {"why": "x"}},
            }
        )
    }
    workers = [spawn_worker("--worker-id", f"adv-{n}", env=env) for n in range(3)]
    for worker in workers:
        worker.wait_ready()
    wait_for(lambda: ScheduleTick.objects.filter(name="boom").count() >= 3, timeout=30)
    workers[0].stop()  # SIGKILL, whatever it was doing
    workers[0] = spawn_worker("--worker-id", "adv-3", env=env)
    workers[0].wait_ready()
    seen = ScheduleTick.objects.filter(name="boom").latest("tick_at").tick_at
    wait_for(lambda: ScheduleTick.objects.filter(name="boom", tick_at__gt=seen).count() >= 3)
    wait_for(lambda: Job.objects.filter(type="tests.boom", status="failed").exists())
    _stop(workers[1:])
    _stop(workers[:1])
    _one_job_per_tick()


@db
def test_start_lines_and_burst_enqueue_no_tick(
    spawn_worker: Callable[..., WorkerProcess],
) -> None:
    """`sqlq_worker --burst` "checks and logs the schedules but enqueues no tick", with the
    start line of the how-to, `next=` in the schedule's time zone."""
    env = {
        "SQLQ_TEST_SCHEDULE": json.dumps(
            {
                "every-second": {"type": "tests.noop", "cron": "* * * * * *", "missed": "skip"},
                "nightly-report": {
                    "type": "tests.noop",
                    "cron": "0 3 * * *",
                    "timezone": "Europe/Paris",
                },
            }
        )
    }
    worker = spawn_worker("--burst", env=env)
    assert worker.wait() == 0, worker.output()
    output = worker.output()
    assert re.search(
        r"Schedule nightly-report: tests\.noop cron='0 3 \* \* \*' tz=Europe/Paris "
        r"missed=run_once next=\d{4}-\d\d-\d\dT03:00:00\+0[12]:00",
        output,
    ), output
    assert "Schedule every-second: tests.noop cron='* * * * * *' tz=UTC missed=skip" in output
    assert not ScheduleTick.objects.exists()
    assert not Job.objects.exists()


@db
def test_jobs_deleted_by_hand_in_sql_leave_their_ticks(
    with_sqlq: Callable[..., None], django_user_model: Any
) -> None:
    """An operator empties the jobs table in dbshell: the tick rows stay, the tick is not run
    again (by this worker or a new one), and the schedules page says "deleted"."""
    with_sqlq(SCHEDULE={"n": {"type": "tests.noop", "cron": "0 3 * * *"}})
    clock = Clock(at("2026-01-10 02:59"))
    worker = started(clock)
    clock.now = at("2026-01-10 03:00:01")
    assert ticks(worker) == [at("2026-01-10 03:00")]
    with connections[Job.objects.db].cursor() as cursor:
        cursor.execute(f"DELETE FROM {Job._meta.db_table}")
    assert ScheduleTick.objects.count() == 1
    assert ticks(worker) == []
    assert ticks(started(clock)) == []
    assert not Job.objects.exists()
    user = django_user_model.objects.create_user("a", password="pw", is_staff=True)
    user.user_permissions.add(
        Permission.objects.get(content_type__app_label="django_sqlq", codename="view_job")
    )
    client = Client()
    client.force_login(user)
    page = client.get(reverse("admin:django_sqlq_scheduletick_changelist"))
    assert page.status_code == 200
    assert "deleted" in page.content.decode()


# -- the admin --------------------------------------------------------------------------------


@pytest.fixture
def change_client(django_user_model: Any) -> Client:
    user = django_user_model.objects.create_user("ops", password="pw", is_staff=True)
    for codename in ("view_job", "change_job"):
        user.user_permissions.add(
            Permission.objects.get(content_type__app_label="django_sqlq", codename=codename)
        )
    client = Client()
    client.force_login(user)
    return client


@db
def test_run_now_of_a_schedule_enqueue_refuses_says_so(
    with_sqlq: Callable[..., None], change_client: Client
) -> None:
    with_sqlq(
        MAX_PAYLOAD_BYTES=1024,
        SCHEDULE={
            "big": {"type": "tests.noop", "cron": "0 3 * * *", "payload": {"a": "x" * 2000}},
            "ok": {"type": "tests.noop", "cron": "0 3 * * *"},
        },
    )
    list_url = reverse("admin:django_sqlq_scheduletick_changelist")
    run_now = reverse("admin:django_sqlq_scheduletick_run_now")
    assert change_client.get(list_url).status_code == 200
    response = change_client.post(run_now, {"name": "big"}, follow=True)
    assert response.status_code == 200
    assert not Job.objects.exists()
    for junk in ({}, {"name": "x" * 100_000}, {"name": "\x00"}):
        assert change_client.post(run_now, junk).status_code == 302
    assert not Job.objects.exists()
    assert change_client.get(run_now).status_code == 405
    assert not Job.objects.exists()
