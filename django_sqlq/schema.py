"""The queue database's schema: whether django_sqlq's migrations are all applied there.

An upgrade of django_sqlq may add migrations. Without ``migrate``, its code reads columns
or tables the database does not have yet, and every claim, prune or query fails with the
database's own words ("no such column: trace"). The worker and the management commands ask
here first, and refuse to start naming ``migrate``.
"""

from __future__ import annotations

import threading

from django.db import connections

from django_sqlq.exceptions import ConfigurationError

_lock = threading.Lock()
_migrated: set[str] = set()  # aliases found with every migration applied (asked once)


class UnappliedMigrationsError(ConfigurationError):
    """The queue database lacks django_sqlq migrations: run ``migrate``."""


def unapplied(alias: str) -> list[str]:
    """The names of django_sqlq's migrations not applied in database ``alias``, in order
    ([] when the project disables django_sqlq's migrations, or they are all applied)."""
    from django.db.migrations.executor import MigrationExecutor

    executor = MigrationExecutor(connections[alias])
    if "django_sqlq" not in executor.loader.migrated_apps:
        return []
    targets = [key for key in executor.loader.graph.leaf_nodes() if key[0] == "django_sqlq"]
    plan = executor.migration_plan(targets)
    return [
        migration.name
        for migration, backwards in plan
        if migration.app_label == "django_sqlq" and not backwards
    ]


def migrate_command(alias: str) -> str:
    return "python manage.py migrate" + ("" if alias == "default" else f" --database={alias}")


def check_migrated(alias: str) -> None:
    """Raise UnappliedMigrationsError, naming ``migrate`` and the missing migrations, unless
    every django_sqlq migration is applied in database ``alias``. Asked once per alias and
    process once the answer is yes. A database that cannot be read raises DatabaseError."""
    if alias in _migrated:
        return
    missing = unapplied(alias)
    if missing:
        shown = ", ".join(missing[:3]) + (
            f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        )
        raise UnappliedMigrationsError(
            f"Database {alias!r} lacks django_sqlq's migration(s) {shown}: run "
            f"`{migrate_command(alias)}` first (an upgrade of django_sqlq adds migrations; "
            "its code needs them)."
        )
    with _lock:
        _migrated.add(alias)


def forget() -> None:
    """Ask again next time (for tests that unapply migrations)."""
    with _lock:
        _migrated.clear()
