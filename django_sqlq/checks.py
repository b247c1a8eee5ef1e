"""System checks (``manage.py check``): ids ``django_sqlq.E001``... and ``W001``...

- E001: ``settings.SQLQ`` is invalid.
- E002: ``SQLQ["DATABASE"]`` names no configured database.
- E003: the queue database's engine is not supported.
- E004: SQLite older than 3.35 (no ``UPDATE ... RETURNING``).
- E005: the ``mysql`` engine's server is MySQL, or MariaDB older than 10.11.
- E006: the MariaDB queue database's isolation level is not READ COMMITTED.
- E007: the queue database is MariaDB and ``USE_TZ`` is False.
- W001: the SQLite queue database is not in WAL mode.
- W002: the SQLite queue database has no ``auto_vacuum = INCREMENTAL`` (a file created
  before django_sqlq set it): pruned jobs' pages are reused, but the file never shrinks.
- E010: ``SQLQ["DATABASE"]`` is not ``"default"`` and no database router sends django_sqlq's
  models there.
- E011: ``SQLQ["DATABASE"]`` is not ``"default"`` and the routers do not migrate django_sqlq
  there, and only there.
- E020: ``SQLQ["LISTEN_DATABASE"]`` names no configured database.
- E021: ``SQLQ["LISTEN_DATABASE"]`` is set but it or the queue database is not PostgreSQL.
- E022: ``SQLQ["LISTEN_DATABASE"]`` reaches another database than ``SQLQ["DATABASE"]``.
- E030: a recurring job (``SQLQ["SCHEDULE"]``, ``@handler(cron=...)``, ``@recurring``) is
  invalid: bad cron expression, unknown time zone or policy, duplicate name...
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

from django.apps import AppConfig
from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections, router

from django_sqlq import registry, schedules
from django_sqlq.conf import get_settings
from django_sqlq.db import supported, vendor
from django_sqlq.db.mariadb_session import MIN_MARIADB_VERSION, unsupported_server
from django_sqlq.db.postgresql import server_identity
from django_sqlq.db.sqlite import AUTO_VACUUM_MODES, pragma
from django_sqlq.exceptions import ConfigurationError
from django_sqlq.models import Job

#: Where E001 sends the reader: a page of the documentation, not a folder of the source
#: tree (an installed wheel has no docs/), and the defaults in code they do have.
SETTINGS_HINT = (
    "Each SQLQ key is described on the Settings page of django_sqlq's documentation "
    "(Reference > Settings); the defaults are django_sqlq.conf.DEFAULTS."
)


@register(Tags.compatibility)
def check_settings(
    app_configs: Sequence[AppConfig] | None = None,  # noqa: ARG001 (Django's check signature)
    **kwargs: Any,
) -> list[CheckMessage]:
    try:
        conf = get_settings()
    except ConfigurationError as exc:
        return [Error(str(exc), hint=SETTINGS_HINT, id="django_sqlq.E001")]
    try:
        conf.backoff_function()
    except ConfigurationError as exc:
        return [Error(str(exc), hint=SETTINGS_HINT, id="django_sqlq.E001")]
    if conf.DATABASE not in connections.settings:
        return [
            Error(
                f"SQLQ['DATABASE'] is {conf.DATABASE!r}, which is not in settings.DATABASES.",
                hint=f"Use one of: {', '.join(connections.settings)}.",
                id="django_sqlq.E002",
            )
        ]
    if not supported(conf.DATABASE):
        return [
            Error(
                f"The queue database {conf.DATABASE!r} uses the {vendor(conf.DATABASE)!r} "
                "engine, which django_sqlq does not support yet.",
                hint="Use SQLite, PostgreSQL or MariaDB for SQLQ['DATABASE'].",
                id="django_sqlq.E003",
            )
        ]
    messages: list[CheckMessage] = []
    if vendor(conf.DATABASE) == "sqlite" and sqlite3.sqlite_version_info < (3, 35, 0):
        messages.append(
            Error(
                f"SQLite {sqlite3.sqlite_version} is too old: django_sqlq needs 3.35+ "
                "(UPDATE ... RETURNING).",
                hint="Upgrade SQLite, or use a Python build linked with a newer one.",
                id="django_sqlq.E004",
            )
        )
    if vendor(conf.DATABASE) == "mysql":
        messages.extend(_check_mysql(conf.DATABASE))
    messages.extend(_check_routing(conf.DATABASE))
    messages.extend(_check_listen_alias(conf.DATABASE, conf.LISTEN_DATABASE))
    messages.extend(_check_schedules())
    return messages


def _check_mysql(alias: str) -> list[CheckMessage]:
    """E005: the ``mysql`` engine is MySQL rather than MariaDB, or a MariaDB older than the
    dialect needs; E006: the connection's isolation level is not READ COMMITTED (at
    REPEATABLE READ a locking read takes gap locks, and enqueues deadlock with claims)."""
    connection: Any = connections[alias]
    messages: list[CheckMessage] = []
    level = connection.settings_dict.get("OPTIONS", {}).get("isolation_level")
    if level is not None and str(level).lower() != "read committed":
        messages.append(
            Error(
                f"The queue database {alias!r} sets isolation_level {level!r}: django_sqlq "
                "needs 'read committed' on MariaDB (Django's default for the mysql backend).",
                hint="Remove OPTIONS['isolation_level'], or set it to 'read committed'.",
                id="django_sqlq.E006",
            )
        )
    if not settings.USE_TZ:
        messages.append(
            Error(
                f"The queue database {alias!r} is MariaDB and USE_TZ is False: django_sqlq "
                "needs USE_TZ = True there (the queue reads the database's UTC clock; naive "
                "local times would be off by the time zone's offset).",
                hint="Set USE_TZ = True (Django's default), or use SQLite or PostgreSQL.",
                id="django_sqlq.E007",
            )
        )
    found = unsupported_server(connection)
    if found is not None:
        messages.append(
            Error(
                f"The queue database {alias!r} is {found}: django_sqlq supports MariaDB "
                f"{'.'.join(map(str, MIN_MARIADB_VERSION))} and later on the mysql engine "
                "(MySQL has no INSERT ... RETURNING).",
                hint="Use MariaDB 10.11+, PostgreSQL or SQLite for SQLQ['DATABASE'].",
                id="django_sqlq.E005",
            )
        )
    return messages


def _check_schedules() -> list[CheckMessage]:
    # The apps' jobs.py, as the worker imports them: their @handler(cron=...) schedules
    # count for duplicate names.
    registry.autodiscover()
    try:
        schedules.load()
    except ConfigurationError as exc:
        return [
            Error(
                str(exc),
                hint="See docs/howto/recurring-jobs.md and the SCHEDULE setting's reference.",
                id="django_sqlq.E030",
            )
        ]
    return []


def _check_listen_alias(queue_alias: str, listen_alias: str | None) -> list[CheckMessage]:
    if listen_alias is None:
        return []
    if listen_alias not in connections.settings:
        return [
            Error(
                f"SQLQ['LISTEN_DATABASE'] is {listen_alias!r}, which is not in "
                "settings.DATABASES.",
                hint="Add an alias that connects to the queue's PostgreSQL database directly "
                "(not through a transaction-mode pooler), or remove the setting.",
                id="django_sqlq.E020",
            )
        ]
    if vendor(queue_alias) != "postgresql" or vendor(listen_alias) != "postgresql":
        return [
            Error(
                "SQLQ['LISTEN_DATABASE'] only applies to a PostgreSQL queue database, through "
                f"a PostgreSQL alias; {queue_alias!r} uses {vendor(queue_alias)!r} and "
                f"{listen_alias!r} uses {vendor(listen_alias)!r}.",
                hint="Remove SQLQ['LISTEN_DATABASE']: SQLite and MariaDB workers wake without "
                "LISTEN.",
                id="django_sqlq.E021",
            )
        ]
    return []


ROUTER_HINT = (
    "Add 'django_sqlq.routers.QueueRouter' to settings.DATABASE_ROUTERS (first), or make your "
    "own router send the django_sqlq app to SQLQ['DATABASE'] for reads, writes and migrate."
)


def _check_routing(alias: str) -> list[CheckMessage]:
    """A jobs table in another database than the default needs a router: without one, the
    ORM writes jobs to the default database and ``migrate --database <alias>`` creates every
    app's tables there (and django_sqlq's in the default database too)."""
    if alias == DEFAULT_DB_ALIAS:
        return []
    read, write = router.db_for_read(Job), router.db_for_write(Job)
    if read != alias or write != alias:
        return [
            Error(
                f"SQLQ['DATABASE'] is {alias!r}, but the database routers send django_sqlq's "
                f"models to {read!r} (reads) and {write!r} (writes).",
                hint=ROUTER_HINT,
                id="django_sqlq.E010",
            )
        ]
    wrong = [
        db
        for db in connections.settings
        if bool(router.allow_migrate(db, "django_sqlq", model_name="job")) != (db == alias)
    ]
    if wrong:
        return [
            Error(
                f"SQLQ['DATABASE'] is {alias!r}, but the database routers do not migrate "
                f"django_sqlq there and only there (wrong for: {', '.join(wrong)}).",
                hint=ROUTER_HINT,
                id="django_sqlq.E011",
            )
        ]
    return []


@register(Tags.database)
def check_database(
    app_configs: Sequence[AppConfig] | None = None,  # noqa: ARG001 (Django's check signature)
    **kwargs: Any,
) -> list[CheckMessage]:
    """Checks that query the queue database: only with ``check --database <alias>``."""
    try:
        conf = get_settings()
    except ConfigurationError:
        return []  # reported by check_settings
    databases = kwargs.get("databases") or ()
    if conf.DATABASE not in databases or conf.DATABASE not in connections.settings:
        return []
    if vendor(conf.DATABASE) == "sqlite":
        try:
            return _check_wal(conf.DATABASE) + _check_auto_vacuum(
                conf.DATABASE, conf.SQLITE_PRAGMAS
            )
        except DatabaseError:
            return []  # unreachable: the command that needs the database says so
    if conf.LISTEN_DATABASE is not None and not _check_listen_alias(
        conf.DATABASE, conf.LISTEN_DATABASE
    ):
        return _check_same_database(conf.DATABASE, conf.LISTEN_DATABASE)
    return []


def _check_same_database(queue_alias: str, listen_alias: str) -> list[CheckMessage]:
    """The LISTEN alias must reach the queue's database: the same database name on the
    same server (told apart by its start time), whatever pooler or address is between."""
    identities = {
        alias: server_identity(connections[alias]) for alias in (queue_alias, listen_alias)
    }
    if identities[queue_alias] == identities[listen_alias]:
        return []
    return [
        Error(
            f"SQLQ['LISTEN_DATABASE'] {listen_alias!r} reaches database "
            f"{identities[listen_alias][0]!r} on another server or another database than the "
            f"queue's {queue_alias!r} ({identities[queue_alias][0]!r}): its workers would "
            "never hear an enqueue.",
            hint="Point the LISTEN alias at the same PostgreSQL database as SQLQ['DATABASE'].",
            id="django_sqlq.E022",
        )
    ]


def _check_wal(alias: str) -> list[CheckMessage]:
    connection = connections[alias]
    name = str(connection.settings_dict["NAME"])
    if name in ("", ":memory:") or "mode=memory" in name:
        return []
    mode = str(pragma(connection, "journal_mode")).lower()
    if mode != "wal":
        return [
            Warning(
                f"The SQLite queue database {alias!r} is in {mode!r} journal mode, not WAL: "
                "workers and web requests will block each other.",
                hint="Remove 'journal_mode' from SQLQ['SQLITE_PRAGMAS'] (WAL is the default), "
                "or make sure the database file is on a local disk that supports WAL.",
                id="django_sqlq.W001",
            )
        ]
    return []


def _check_auto_vacuum(alias: str, pragmas: Mapping[str, str | int]) -> list[CheckMessage]:
    """A database created before django_sqlq set ``auto_vacuum`` (or before it did so under
    an ``init_command`` that sets WAL) keeps ``auto_vacuum = NONE``: only a VACUUM of the
    whole file changes that, which django_sqlq never runs on a database with data."""
    connection = connections[alias]
    name = str(connection.settings_dict["NAME"])
    wanted = AUTO_VACUUM_MODES.get(str(pragmas.get("auto_vacuum", "")).lower())
    if wanted != 2 or name in ("", ":memory:") or "mode=memory" in name:
        return []  # the project chose another mode (or none) in SQLQ["SQLITE_PRAGMAS"]
    mode = int(pragma(connection, "auto_vacuum") or 0)
    if mode == wanted:
        return []
    return [
        Warning(
            f"The SQLite queue database {alias!r} has auto_vacuum = "
            f"{('NONE', 'FULL')[mode] if mode in (0, 1) else mode}, not INCREMENTAL: the "
            "pages of pruned jobs are reused, but the file never shrinks.",
            hint="Convert it once, with the workers stopped (it rewrites the file and needs "
            f"as much free disk as it takes): run `python manage.py dbshell --database {alias}`"
            ", then `PRAGMA auto_vacuum = INCREMENTAL; VACUUM;` at the sqlite> prompt. See "
            "'SQLite: giving the space back' in the retention how-to.",
            id="django_sqlq.W002",
        )
    ]
