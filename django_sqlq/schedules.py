"""Recurring jobs: what is declared, when each schedule ticks, and enqueueing one tick.

Three ways to declare a schedule, all read here and validated the same way:

- ``SQLQ["SCHEDULE"] = {"nightly-report": {"type": "reports.nightly", "cron": "0 3 * * *",
  ...}}``, or with ``"task": "myapp.tasks.nightly"`` (a ``@task`` of Django's tasks
  framework, by dotted path) instead of ``"type"``;
- ``@handler("x", cron="*/5 * * * *")`` (or ``cron={...}``, the same keys as a settings
  entry): a schedule named after the job type unless ``"name"`` is given;
- ``@recurring("0 3 * * *", ...)`` above a ``@task``;

and a fourth, edited at run time: rows of ``models.DatabaseSchedule`` (the admin), read by
:func:`stored` into the same ``Schedule`` through the same validation, their names unique
across all four (:func:`stored_errors` is what the model's ``clean()`` reports).

Cron expressions, time zones and DST are cronsim's (5 fields, or 6 with seconds first).

Each tick is enqueued once, whatever the number of workers: :func:`enqueue_tick` writes a
``ScheduleTick`` row (unique on name and tick time) and the job in one transaction; a
worker that loses the race to the row writes nothing. Which tick is due is decided by
:func:`due_tick` (see its docstring, and docs/howto/recurring-jobs.md).
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Final, TypeVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError
from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone as dj_timezone

from django_sqlq import validation
from django_sqlq.exceptions import ConfigurationError, InvalidJobError, SQLQError

if TYPE_CHECKING:
    from django_sqlq.conf import Settings
    from django_sqlq.models import DatabaseSchedule

RUN_ONCE: Final = "run_once"
SKIP: Final = "skip"
POLICIES: Final = (RUN_ONCE, SKIP)

MAX_NAME_LENGTH: Final = 200

# Tick rows kept per schedule: the newest is what every worker compares with; the others
# are history for the admin. Older ones are deleted by the worker that wrote a new one.
KEEP_TICKS: Final = 10

COMMON_KEYS: Final = frozenset({"cron", "timezone", "missed", "queue", "priority"})
TYPE_KEYS: Final = COMMON_KEYS | {"type", "payload"}
TASK_KEYS: Final = COMMON_KEYS | {"task", "args", "kwargs"}
DECORATOR_KEYS: Final = COMMON_KEYS | {"name", "payload"}
TASK_DECORATOR_KEYS: Final = COMMON_KEYS | {"name", "args", "kwargs"}

T = TypeVar("T")


@dataclass(frozen=True)
class Schedule:
    """One recurring job: enqueue ``type`` (or the ``task``) at each tick of ``cron`` in
    ``timezone``."""

    name: str
    cron: str
    timezone: str = "UTC"
    missed: str = RUN_ONCE
    type: str | None = None  # a job type (a @handler's name or a dotted path)
    task: str | None = None  # or a @task's dotted path
    payload: Any = field(default_factory=dict)
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    queue: str | None = None  # None: "default" (type), the task's own queue (task)
    priority: int | None = None
    source: str = "settings"  # where it was declared, for error messages and the admin
    # A stored schedule's row's: the ticks recorded before it was saved are those of another
    # schedule of that name, deleted since (see due_tick).
    created_at: datetime | None = None

    @property
    def tz(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)

    @property
    def spec(self) -> str:
        """What decides its ticks (stored with each tick): the cron and the time zone."""
        # Spelling aside: "0  3 * * mon" and "0 3 * * MON" are one cron.
        return f"{' '.join(self.cron.split()).upper()} @ {self.timezone}"

    @property
    def target(self) -> str:
        """What it enqueues: the job type, or the task's path."""
        return self.type or self.task or ""

    def next_tick(self, now: datetime) -> datetime | None:
        """The first tick strictly after ``now``, in UTC (None: none in 50 years)."""
        local = now.astimezone(self.tz)
        try:
            return next(CronSim(self.cron, local)).astimezone(UTC)
        except StopIteration:
            return None

    def latest_tick(self, now: datetime) -> datetime | None:
        """The last tick at or before ``now``, in UTC (None: none in 50 years)."""
        # cronsim's reverse iteration takes a datetime with microseconds as its own first
        # candidate: the whole second at or before now.
        local = now.astimezone(self.tz).replace(microsecond=0) + timedelta(microseconds=1)
        try:
            return next(CronSim(self.cron, local, reverse=True)).astimezone(UTC)
        except StopIteration:
            return None


# -- declarations -------------------------------------------------------------------------

_declared: dict[str, Schedule] = {}  # by @handler(cron=) and @recurring
_lock = threading.Lock()


def _where(source: str, name: object) -> str:
    return f"SQLQ['SCHEDULE'][{name!r}]" if source == "settings" else f"{source} schedule {name!r}"


def parse(name: object, entry: object, *, source: str = "settings") -> Schedule:
    """A validated Schedule from a settings entry (or a decorator's options). Raises
    ConfigurationError naming the entry."""
    where = _where(source, name)
    try:
        validation.check_name("schedule name", name, max_length=MAX_NAME_LENGTH)
    except InvalidJobError as exc:
        raise ConfigurationError(f"{where}: {exc}") from None
    assert isinstance(name, str)
    if not isinstance(entry, Mapping):
        raise ConfigurationError(f"{where} must be a dict with 'cron' and 'type' (or 'task').")
    is_task = "task" in entry
    if is_task == ("type" in entry):
        raise ConfigurationError(f"{where} needs 'type' (a job type) or 'task' (a @task's path).")
    allowed = TASK_KEYS if is_task else TYPE_KEYS
    unknown = set(entry) - allowed
    if unknown:
        raise ConfigurationError(
            f"{where}: unknown key(s) {', '.join(sorted(map(str, unknown)))}; "
            f"known: {', '.join(sorted(allowed))}."
        )
    try:
        return _build(name, entry, is_task=is_task, source=source)
    except (InvalidJobError, TypeError) as exc:
        raise ConfigurationError(f"{where}: {exc}") from None


def _build(name: str, entry: Mapping[str, Any], *, is_task: bool, source: str) -> Schedule:
    cron = check_cron(entry.get("cron"))
    tz = check_timezone(entry.get("timezone", "UTC"))
    missed = entry.get("missed", RUN_ONCE)
    if missed not in POLICIES:
        raise InvalidJobError(f"'missed' must be 'run_once' or 'skip', got {missed!r}.")
    queue = entry.get("queue")
    if queue is not None:
        validation.check_name("queue name", queue, max_length=100)
    priority = entry.get("priority")
    if priority is not None and (
        isinstance(priority, bool) or not isinstance(priority, int) or not -100 <= priority <= 100
    ):
        raise InvalidJobError(f"'priority' must be an integer from -100 to 100, got {priority!r}.")
    target = validation.check_name(
        "task path" if is_task else "job type",
        entry["task" if is_task else "type"],
        max_length=255,
    )
    from django_sqlq.jsoncodec import encode_json

    if is_task:
        args, kwargs = entry.get("args", []), entry.get("kwargs", {})
        if not isinstance(args, (list, tuple)) or not isinstance(kwargs, Mapping):
            raise InvalidJobError("'args' must be a list and 'kwargs' a dict.")
        encode_json({"args": list(args), "kwargs": dict(kwargs)}, what="schedule's arguments")
        return Schedule(
            name=name, cron=cron, timezone=tz, missed=missed, task=target, args=tuple(args),
            kwargs=dict(kwargs), queue=queue, priority=priority, source=source,
        )  # fmt: skip
    payload = entry.get("payload", {})
    encode_json(payload, what="schedule's payload")
    return Schedule(
        name=name, cron=cron, timezone=tz, missed=missed, type=target, payload=payload,
        queue=queue, priority=priority, source=source,
    )  # fmt: skip


def check_cron(cron: object) -> str:
    if not isinstance(cron, str) or not cron.strip():
        raise InvalidJobError(f"'cron' must be a cron expression (a string), got {cron!r}.")
    try:
        CronSim(cron, datetime(2000, 1, 1, tzinfo=UTC))
    except CronSimError as exc:
        raise InvalidJobError(
            f"'cron' {cron!r} is not a valid cron expression ({exc}): five fields "
            "(minute hour day-of-month month day-of-week), or six with seconds first."
        ) from None
    return cron


def check_timezone(name: object) -> str:
    if not isinstance(name, str) or not name:
        raise InvalidJobError(f"'timezone' must be an IANA time zone name, got {name!r}.")
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidJobError(
            f"'timezone' {name!r} is not a known time zone (an IANA name such as "
            "'Europe/Paris' or 'UTC')."
        ) from None
    return name


def declare(schedule: Schedule) -> None:
    """Add a decorator's schedule. The same name twice from another target is an error."""
    with _lock:
        existing = _declared.get(schedule.name)
        if existing is not None and existing != schedule:
            raise ConfigurationError(
                f"{_where(schedule.source, schedule.name)} is already declared by "
                f"{existing.source} for {existing.target!r}: give one of them "
                "another 'name'."
            )
        _declared[schedule.name] = schedule


def undeclare(name: str) -> None:
    """Remove a decorator's schedule (for tests)."""
    with _lock:
        _declared.pop(name, None)


def from_decorator(
    target: str, cron: str | Mapping[str, Any], *, source: str, task: bool = False
) -> Schedule:
    """The Schedule of ``@handler(..., cron=...)`` or ``@recurring``."""
    if not isinstance(cron, (str, Mapping)):
        raise ConfigurationError(
            f"{_where(source, target)}: cron= takes a cron expression (a string) or a dict "
            f"of schedule options, got {type(cron).__name__} {cron!r}."
        )
    options: dict[str, Any] = {"cron": cron} if isinstance(cron, str) else dict(cron)
    allowed = TASK_DECORATOR_KEYS if task else DECORATOR_KEYS
    unknown = set(options) - allowed
    name = options.pop("name", target)
    if unknown:
        raise ConfigurationError(
            f"{_where(source, name)}: unknown key(s) {', '.join(sorted(map(str, unknown)))}; "
            f"known: {', '.join(sorted(allowed))}."
        )
    options["task" if task else "type"] = target
    return parse(name, options, source=source)


def recurring(cron: str, **options: Any) -> Callable[[T], T]:
    """Run a ``@task`` of Django's tasks framework on a schedule. Put it above ``@task``::

        @recurring("0 3 * * *", timezone="Europe/Paris")
        @task
        def nightly_report(): ...

    ``options``: ``name`` (default: the task's path), ``args``, ``kwargs``, ``queue``,
    ``priority``, ``timezone``, ``missed``, as in a settings entry.
    """

    def decorator(task: T) -> T:
        path = getattr(task, "module_path", None)
        if not isinstance(path, str):
            raise TypeError(f"@recurring goes above @task, got {task!r}.")
        declare(from_decorator(path, {"cron": cron, **options}, source="@recurring", task=True))
        return task

    return decorator


def load() -> dict[str, Schedule]:
    """Every declared schedule, by name: ``SQLQ["SCHEDULE"]``, then the decorators'.
    Raises ConfigurationError naming the entry at fault."""
    from django_sqlq.conf import get_settings

    conf = get_settings()
    found: dict[str, Schedule] = {}
    for name, entry in conf.SCHEDULE.items():
        found[name] = _fits(parse(name, entry), conf)
    with _lock:
        declared = list(_declared.values())
    for schedule in declared:
        if schedule.name in found:
            raise ConfigurationError(
                f"Two schedules are named {schedule.name!r}: SQLQ['SCHEDULE'] and "
                f"{schedule.source} for {schedule.target!r}. Rename one (decorators take "
                "'name')."
            )
        found[schedule.name] = _fits(schedule, conf)
    return found


# -- schedules stored in the database ---------------------------------------------------------

STORED: Final = "database"  # a stored schedule's source


def from_row(row: DatabaseSchedule) -> Schedule:
    """The Schedule of a ``DatabaseSchedule`` row, validated as a settings entry is (and
    its queue and payload size as :func:`load`'s). Raises ConfigurationError naming it."""
    from django_sqlq.conf import get_settings

    entry: dict[str, Any] = {"cron": row.cron, "timezone": row.timezone, "missed": row.missed}
    if row.task:
        entry.update(task=row.task, args=row.args, kwargs=row.kwargs)
    if row.type or not row.task:
        entry.update(type=row.type, payload=row.payload)  # both, or neither: parse() says
    if row.queue:
        entry["queue"] = row.queue
    if row.priority is not None:
        entry["priority"] = row.priority
    schedule = _fits(parse(row.name, entry, source=STORED), get_settings())
    return dataclasses.replace(schedule, created_at=row.created_at)


def stored_errors(row: DatabaseSchedule) -> dict[str, str]:
    """What is wrong with a ``DatabaseSchedule`` row, by field (empty: a worker will run
    it): the name (also one a code schedule uses), the cron, the time zone, a job type
    without a handler or a task path that is not a @task on a django_sqlq backend, a payload
    (or args and kwargs) that is not JSON or too big, a queue that enqueue() refuses."""
    errors: dict[str, str] = {}
    _check(errors, "name", lambda: _check_stored_name(row.name))
    _check(errors, "cron", lambda: check_cron(row.cron))
    _check(errors, "timezone", lambda: check_timezone(row.timezone))
    _target_errors(row, errors)
    _queue_errors(row, errors)
    if not errors:
        _check(errors, "__all__", lambda: from_row(row))
    return errors


def _check(errors: dict[str, str], field: str, test: Callable[[], object]) -> None:
    """Run ``test``; its error (the first per field) goes into ``errors[field]``."""
    try:
        test()
    except (SQLQError, TypeError, ValueError) as exc:  # UnknownHandlerError too
        errors.setdefault(field, str(exc))


def _check_stored_name(name: str) -> None:
    validation.check_name("schedule name", name, max_length=MAX_NAME_LENGTH)
    try:
        code = load()
    except ConfigurationError:
        return  # the code's own error is the checks' (E030) to report
    if name in code:
        raise ConfigurationError(
            f"A schedule named {name!r} is declared in code ({code[name].source}); names "
            "are unique across the settings, the decorators and the database."
        )


def _target_errors(row: DatabaseSchedule, errors: dict[str, str]) -> None:
    """``type`` xor ``task``, that it runs, and the arguments that go with it."""
    from django_sqlq import registry
    from django_sqlq.conf import get_settings
    from django_sqlq.jsoncodec import encode_json

    limit = get_settings().MAX_PAYLOAD_BYTES
    if bool(row.type) == bool(row.task):
        errors["type"] = "Give a job type or a task (one of the two)."
    elif row.task:
        _check(errors, "task", lambda: _check_task(row.task))
        if row.payload not in ({}, None):
            errors["payload"] = "A task takes args and kwargs; the payload is for a job type."
        if not isinstance(row.args, list):
            errors["args"] = f"A task's args are a JSON list, got {row.args!r}."
        if not isinstance(row.kwargs, dict):
            errors["kwargs"] = f"A task's kwargs are a JSON object, got {row.kwargs!r}."
        arguments = {"args": row.args, "kwargs": row.kwargs}
        _check(errors, "kwargs", lambda: encode_json(arguments, limit=limit))
    else:
        registry.autodiscover()  # the apps' jobs.py: their handlers
        _check(errors, "type", lambda: registry.get(row.type))
        if row.args not in ([], None) or row.kwargs not in ({}, None):
            errors["args"] = "A job type takes a payload; args and kwargs are for a task."
        _check(errors, "payload", lambda: encode_json(row.payload, limit=limit))


def _queue_errors(row: DatabaseSchedule, errors: dict[str, str]) -> None:
    """The queue as enqueue() checks it (a job type's: one of ``SQLQ["QUEUES"]``), and the
    priority's range."""
    from django_sqlq.conf import get_settings

    queues = get_settings().QUEUES
    if row.queue:
        _check(
            errors, "queue", lambda: validation.check_name("queue name", row.queue, max_length=100)
        )
    if row.type and "queue" not in errors and (row.queue or "default") not in queues:
        errors["queue"] = (
            f"Unknown queue {row.queue or 'default'!r}; known: {', '.join(queues)} "
            "(SQLQ['QUEUES'])."
        )
    if row.priority is not None and not -100 <= row.priority <= 100:
        errors["priority"] = f"A priority is from -100 to 100, got {row.priority}."


def _check_task(path: str) -> None:
    """``path`` names a @task on a django_sqlq backend (ConfigurationError if not)."""
    task = _task(path)
    if task is None:
        raise ConfigurationError(f"{path!r} is not a @task.")
    from django_sqlq.backend import SQLQBackend

    if not isinstance(task.get_backend(), SQLQBackend):
        raise ConfigurationError(
            f"The task {path!r} uses the tasks backend {task.backend!r}, which is not "
            "django_sqlq's."
        )


@dataclass(frozen=True)
class Stored:
    """The enabled rows of ``DatabaseSchedule`` as a worker runs them: ``schedules`` by
    name, and ``errors`` (by name) for the rows it cannot run."""

    schedules: dict[str, Schedule]
    errors: dict[str, str]


def stored(
    *, database: str, code: Mapping[str, Schedule], cache: dict[Any, Schedule | str] | None = None
) -> Stored:
    """Read the enabled ``DatabaseSchedule`` rows (one query) into Schedules. A row that
    does not validate, or whose name a code schedule (``code``) uses, goes into ``errors``
    instead. ``cache`` (by the row's content: see ``_content``) spares parsing unchanged
    rows again."""
    from django_sqlq.models import DatabaseSchedule

    found: dict[str, Schedule] = {}
    errors: dict[str, str] = {}
    seen: dict[Any, Schedule | str] = {}
    for row in DatabaseSchedule.objects.using(database).filter(enabled=True):
        key = _content(row)
        parsed = cache.get(key) if cache is not None else None
        if parsed is None:
            parsed = _stored_one(row, code)
        seen[key] = parsed
        if isinstance(parsed, Schedule):
            found[parsed.name] = parsed
        else:
            errors[row.name] = parsed
    if cache is not None:  # only the rows of this read: an edit makes a new key
        cache.clear()
        cache.update(seen)
    return Stored(found, errors)


def _content(row: DatabaseSchedule) -> tuple[Any, str]:
    """A row's id and every field's value: an edit made around save() (``update()``, SQL
    from a shell or a data migration) leaves ``updated_at`` as it was, not the content."""
    values = {f.attname: getattr(row, f.attname) for f in row._meta.concrete_fields}
    return row.pk, json.dumps(values, sort_keys=True, default=str)


def _stored_one(row: DatabaseSchedule, code: Mapping[str, Schedule]) -> Schedule | str:
    if row.name in code:
        return (
            f"{_where(STORED, row.name)}: the name is taken by {code[row.name].source} "
            f"({code[row.name].target!r}), which runs instead; rename this one."
        )
    try:
        schedule = from_row(row)
        check_targets({schedule.name: schedule})
    except ConfigurationError as exc:
        return str(exc)
    return schedule


def _fits(schedule: Schedule, conf: Settings) -> Schedule:
    """``schedule``, if enqueue() would take its job under today's settings: its queue is
    one of ``QUEUES`` (a job type's; a task's queue is its backend's to check) and its
    payload within ``MAX_PAYLOAD_BYTES``. Else ConfigurationError naming it: a schedule
    whose every tick would fail is refused before anything runs."""
    from django_sqlq.jsoncodec import encode_json

    where = _where(schedule.source, schedule.name)
    if schedule.type is not None and (schedule.queue or "default") not in conf.QUEUES:
        raise ConfigurationError(
            f"{where}: unknown queue {schedule.queue or 'default'!r}; "
            f"known: {', '.join(conf.QUEUES)}."
        )
    payload = (
        schedule.payload
        if schedule.task is None
        else {"args": list(schedule.args), "kwargs": dict(schedule.kwargs)}
    )
    try:
        encode_json(payload, limit=conf.MAX_PAYLOAD_BYTES)
    except InvalidJobError as exc:
        raise ConfigurationError(f"{where}: {exc}") from None
    return schedule


def check_targets(schedules: Mapping[str, Schedule]) -> None:
    """Each schedule's job type has a handler, each task path is a @task (the worker checks
    this at start, once the apps' jobs.py are imported)."""
    from django_sqlq import registry
    from django_sqlq.exceptions import UnknownHandlerError

    for schedule in schedules.values():
        where = _where(schedule.source, schedule.name)
        if schedule.task is not None:
            task = _task(schedule.task)
            if task is None:
                raise ConfigurationError(f"{where}: {schedule.task!r} is not a @task.")
            from django_sqlq.backend import SQLQBackend

            if not isinstance(task.get_backend(), SQLQBackend):
                raise ConfigurationError(
                    f"{where}: the task {schedule.task!r} uses the tasks backend "
                    f"{task.backend!r}, which is not django_sqlq's."
                )
            continue
        try:
            registry.get(schedule.target)
        except UnknownHandlerError as exc:
            raise ConfigurationError(f"{where}: {exc}") from None


def _task(path: str) -> Any:
    from django_sqlq import compat

    if not compat.AVAILABLE:
        return None
    from django_sqlq.backend import _import_task

    return _import_task(path)


# -- which tick is due, and enqueueing it ---------------------------------------------------


def due_tick(
    schedule: Schedule, *, now: datetime, last: LastTick | None, watching_since: datetime
) -> datetime | None:
    """The tick to enqueue now, or None. Only ever the latest tick at or before ``now``
    (never a burst of catch-ups):

    - it is due if no worker recorded it yet (``last``, the newest recorded tick, is
      older) and it fell while this worker was watching (at or after ``watching_since``);
    - a tick that fell before this worker was watching and that no worker recorded was
      missed (every worker was down): ``run_once`` enqueues it (once: the tick row decides),
      ``skip`` does not. A schedule with no recorded tick at all was never seen (nor one
      whose cron or time zone changed since its last tick): nothing from before
      ``watching_since`` runs, whatever the policy. Nor does a stored schedule's whose
      last recorded tick is older than its row (a schedule deleted, then added again under
      the same name: a new schedule, whose history starts when it was saved).
    """
    if (
        last is not None
        and last.enqueued_at is not None
        and schedule.created_at is not None
        and last.enqueued_at < schedule.created_at
    ):
        last = None
    latest = schedule.latest_tick(now)
    if latest is None or (last is not None and latest <= last.tick_at):
        return None
    if latest >= watching_since:
        return latest
    if last is None or last.spec != schedule.spec or schedule.missed == SKIP:
        return None
    return latest


def enqueue_tick(schedule: Schedule, tick: datetime, *, database: str) -> int | None:
    """Enqueue ``schedule``'s job for ``tick`` unless a worker already did: the tick's row
    and the job are written in one transaction. Returns the job id, or None when the tick
    was already taken."""
    from django_sqlq.models import ScheduleTick

    ticks = ScheduleTick.objects.using(database)
    stored = to_db(tick)
    # Read outside the transaction: on SQLite a transaction that reads first and then
    # writes cannot wait for the write lock (it fails with "database is locked").
    if ticks.filter(name=schedule.name, tick_at=stored).exists():
        return None
    try:
        with transaction.atomic(using=database):
            row_id = _claim_tick(schedule, stored, database=database)
            if row_id is None:
                return None  # another worker wrote this tick first (its transaction decided)
            job_id = enqueue_job(schedule, run_at=tick, database=database)
            ticks.filter(pk=row_id).update(job_id=job_id)
            trim(schedule.name, database=database)  # in the same commit: one fsync
    except IntegrityError:
        return None  # the same, where the engine raised instead
    return job_id


def _claim_tick(schedule: Schedule, stored: datetime, *, database: str) -> int | None:
    """Insert the tick's row unless it exists: ``INSERT ... ON CONFLICT DO NOTHING`` on the
    (name, tick_at) constraint, so that a worker that loses the race writes nothing and
    PostgreSQL logs no unique-violation ERROR for it (one per losing worker and tick). On
    PostgreSQL it waits for a transaction that inserted the same tick and has not committed
    yet. The row's id, or None when the tick was taken."""
    from django_sqlq.db import ops_for

    return ops_for(database).insert_tick(schedule.name, stored, schedule.spec)


def trim(name: str, *, database: str) -> int:
    """Delete the tick rows of ``name`` older than its KEEP_TICKS newest (one statement)."""
    from django.db.models import Subquery

    from django_sqlq.models import ScheduleTick

    ticks = ScheduleTick.objects.using(database).filter(name=name)
    oldest_kept = ticks.order_by("-tick_at").values("tick_at")[KEEP_TICKS - 1 : KEEP_TICKS]
    deleted, _ = ticks.filter(tick_at__lt=Subquery(oldest_kept)).delete()
    return deleted


def enqueue_job(schedule: Schedule, *, run_at: datetime | None, database: str) -> int:
    """Enqueue one job of ``schedule`` (scheduled at ``run_at``, None: now); its id. In the
    caller's transaction when it is on the queue database. The admin's "run now" calls it
    too, without a tick row."""
    from django_sqlq.api import enqueue
    from django_sqlq.models import Job

    if schedule.task is None:
        options: dict[str, Any] = {"queue": schedule.queue or "default", "using": database}
        if schedule.priority is not None:
            options["priority"] = schedule.priority
        return int(enqueue(schedule.target, schedule.payload, run_at=run_at, **options).pk)
    task = _task(schedule.task)
    if task is None:
        raise ConfigurationError(f"{_where(schedule.source, schedule.name)}: not a @task.")
    changes: dict[str, Any] = {}
    if run_at is not None:
        changes["run_after"] = run_at
    if schedule.queue is not None:
        changes["queue_name"] = schedule.queue
    if schedule.priority is not None:
        changes["priority"] = schedule.priority
    if changes:
        task = task.using(**changes)
    result = task.enqueue(*schedule.args, **schedule.kwargs)
    return int(Job.objects.using(database).values_list("pk", flat=True).get(uuid=result.id))


@dataclass(frozen=True)
class LastTick:
    """A schedule's newest recorded tick, and the ``spec`` it ran under."""

    tick_at: datetime
    spec: str
    enqueued_at: datetime | None = None  # when a worker recorded it


def last_ticks(names: list[str], *, database: str) -> dict[str, LastTick]:
    """The newest recorded tick of each schedule that has one (one query over at most about
    KEEP_TICKS rows per schedule)."""
    from django_sqlq.models import ScheduleTick

    rows = (
        ScheduleTick.objects.using(database)
        .filter(name__in=names)
        .order_by("-tick_at")
        .values_list("name", "tick_at", "spec", "enqueued_at")
    )
    found: dict[str, LastTick] = {}
    for name, tick_at, spec, enqueued_at in rows:
        if name not in found:
            found[name] = LastTick(from_db(tick_at), spec, from_db(enqueued_at))
    return found


def to_db(moment: datetime) -> datetime:
    """An aware time as Django stores it: as it is under USE_TZ, else naive in TIME_ZONE."""
    return moment if settings.USE_TZ else dj_timezone.make_naive(moment)


def from_db(moment: datetime) -> datetime:
    """A stored time, aware (naive ones are in TIME_ZONE, as Django wrote them)."""
    return moment if dj_timezone.is_aware(moment) else dj_timezone.make_aware(moment)


def describe(schedule: Schedule, now: datetime) -> str:
    """One line for the worker's start: name, cron, time zone, next run."""
    upcoming = schedule.next_tick(now)
    return (
        f"Schedule {schedule.name}: {schedule.target} cron={schedule.cron!r} "
        f"tz={schedule.timezone} missed={schedule.missed} "
        f"next={upcoming.astimezone(schedule.tz).isoformat() if upcoming else 'never'}"
    )
