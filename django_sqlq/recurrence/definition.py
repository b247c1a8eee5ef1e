"""What a schedule is (``Schedule``: a cron expression in a time zone, and the job or
task it enqueues) and how one is read and checked: a settings entry or a decorator's options
parsed into a Schedule, its cron and time zone checked (cronsim's: 5 fields, or 6 with
seconds first), its queue and payload measured against today's settings, its job type or
task looked up."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Final
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError
from django.utils.module_loading import import_string

from django_sqlq import compat, registry, validation
from django_sqlq.exceptions import ConfigurationError, InvalidJobError, UnknownHandlerError
from django_sqlq.jsoncodec import encode_json

if TYPE_CHECKING:
    from django_sqlq.compat import Task
    from django_sqlq.conf import Settings

RUN_ONCE: Final = "run_once"
SKIP: Final = "skip"
POLICIES: Final = (RUN_ONCE, SKIP)

MAX_NAME_LENGTH: Final = 200

# The tasks backend's class, as settings.TASKS names it (see on_sqlq).
SQLQ_BACKEND: Final = "django_sqlq.backend.SQLQBackend"

COMMON_KEYS: Final = frozenset({"cron", "timezone", "missed", "queue", "priority"})
TYPE_KEYS: Final = COMMON_KEYS | {"type", "payload"}
TASK_KEYS: Final = COMMON_KEYS | {"task", "args", "kwargs"}
DECORATOR_KEYS: Final = COMMON_KEYS | {"name", "payload"}
TASK_DECORATOR_KEYS: Final = COMMON_KEYS | {"name", "args", "kwargs"}


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


def origin(source: str, name: object) -> str:
    return f"SQLQ['SCHEDULE'][{name!r}]" if source == "settings" else f"{source} schedule {name!r}"


def parse(name: object, entry: object, *, source: str = "settings") -> Schedule:
    """A validated Schedule from a settings entry (or a decorator's options). Raises
    ConfigurationError naming the entry."""
    where = origin(source, name)
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


def fits(schedule: Schedule, conf: Settings) -> Schedule:
    """``schedule``, if enqueue() would take its job under today's settings: its queue is
    one of ``QUEUES`` (a job type's; a task's queue is its backend's to check) and its
    payload within ``MAX_PAYLOAD_BYTES``. Else ConfigurationError naming it: a schedule
    whose every tick would fail is refused before anything runs."""
    where = origin(schedule.source, schedule.name)
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
    for schedule in schedules.values():
        where = origin(schedule.source, schedule.name)
        if schedule.task is not None:
            task = find_task(schedule.task)
            if task is None:
                raise ConfigurationError(f"{where}: {schedule.task!r} is not a @task.")
            if not on_sqlq(task):
                raise ConfigurationError(
                    f"{where}: the task {schedule.task!r} uses the tasks backend "
                    f"{task.backend!r}, which is not django_sqlq's."
                )
            continue
        try:
            registry.get(schedule.target)
        except UnknownHandlerError as exc:
            raise ConfigurationError(f"{where}: {exc}") from None


def find_task(path: str) -> Task[Any, Any] | None:
    """The ``@task`` at ``path``, or None: only ``@task`` objects ever run (None too when
    no tasks framework is installed)."""
    if not compat.AVAILABLE:
        return None
    try:
        found = import_string(path)
    except ImportError:
        return None
    return found if isinstance(found, compat.Task) else None


def on_sqlq(task: Task[Any, Any]) -> bool:
    """Whether ``task``'s backend is django_sqlq's: an ``SQLQBackend`` or a subclass, told
    by the dotted path ``settings.TASKS`` names it by. Not ``isinstance()``: the backend's
    module imports the models, and the models' ``DatabaseSchedule.clean()`` imports this
    one."""
    return any(
        f"{cls.__module__}.{cls.__qualname__}" == SQLQ_BACKEND
        for cls in type(task.get_backend()).__mro__
    )
