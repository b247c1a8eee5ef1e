"""What django_sqlq's management commands share: their version, and the queue database
they may use (an alias that exists, settings that read, every migration applied)."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError, connections

from django_sqlq.conf import Settings, get_settings
from django_sqlq.exceptions import ConfigurationError
from django_sqlq.schema import UnappliedMigrationsError, check_migrated


class SQLQCommand(BaseCommand):
    """A django_sqlq command: ``--version`` prints django_sqlq's version, not Django's."""

    def get_version(self) -> str:
        from django_sqlq import __version__

        return __version__


def settings_or_error() -> Settings:
    """``settings.SQLQ``, read and checked; a CommandError naming the bad key."""
    try:
        return get_settings()
    except ConfigurationError as exc:
        raise CommandError(str(exc)) from exc


def queue_database(database: str | None) -> str:
    """The alias of the queue database a command works on (``--database``, else
    ``SQLQ["DATABASE"]``), once it is known to exist and to have every django_sqlq
    migration applied: a CommandError naming ``migrate`` otherwise (exit status 1), or
    naming the known aliases for an unknown one (exit status 2)."""
    alias = database or settings_or_error().DATABASE
    if alias not in connections.settings:
        raise CommandError(
            f"Unknown database alias {alias!r}; known: {', '.join(connections.settings)}.",
            returncode=2,
        )
    try:
        check_migrated(alias)
    except UnappliedMigrationsError as exc:
        raise CommandError(str(exc)) from exc
    except DatabaseError as exc:
        cause = " ".join(str(exc).split()) or type(exc).__name__
        raise CommandError(f"Cannot use database {alias!r}: {cause}") from exc
    return alias
