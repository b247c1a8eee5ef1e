"""System checks and settings validation."""

from __future__ import annotations

from collections.abc import Iterable

import pytest
from django.core.checks import CheckMessage, run_checks
from django.db import connections
from django.test import override_settings

from django_sqlq.conf import get_settings
from django_sqlq.exceptions import ConfigurationError

pytestmark = pytest.mark.django_db(databases=["default", "other"])


def ids(messages: Iterable[CheckMessage]) -> set[str]:
    return {m.id for m in messages if m.id and m.id.startswith("django_sqlq")}


def test_default_configuration_passes():
    assert ids(run_checks()) == set()


@override_settings(SQLQ={"QUEUS": ["typo"]})
def test_unknown_key_is_e001():
    messages = run_checks()
    assert ids(messages) == {"django_sqlq.E001"}
    assert "QUEUS" in next(m.msg for m in messages if m.id == "django_sqlq.E001")


@pytest.mark.parametrize(
    "bad",
    [{"QUEUES": "default"}, {"QUEUES": []}, {"MAX_ATTEMPTS": 0}, {"LEASE_SECONDS": "60"}],
)
def test_invalid_values_raise_configuration_error(bad):
    with override_settings(SQLQ=bad), pytest.raises(ConfigurationError):
        get_settings()


@override_settings(SQLQ={"DATABASE": "nope"})
def test_unknown_database_alias_is_e002():
    assert ids(run_checks()) == {"django_sqlq.E002"}


@pytest.mark.django_db(transaction=True, databases=["default", "other"])
def test_sqlite_not_in_wal_mode_is_w001(engine):
    if engine != "sqlite":
        pytest.skip("WAL is a SQLite capability")
    connection = connections["default"]
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA journal_mode = delete")
    try:
        assert "django_sqlq.W001" in ids(run_checks(databases=["default"]))
    finally:
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA journal_mode = wal")
    assert "django_sqlq.W001" not in ids(run_checks(databases=["default"]))


def test_new_sqlite_connections_get_the_pragmas(engine):
    if engine != "sqlite":
        pytest.skip("PRAGMAs are a SQLite capability")
    connection = connections["default"]
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA journal_mode")
        assert cursor.fetchone()[0] == "wal"
        cursor.execute("PRAGMA busy_timeout")
        assert cursor.fetchone()[0] == 10_000
        cursor.execute("PRAGMA synchronous")
        assert cursor.fetchone()[0] == 1  # NORMAL
    # SQLite's DatabaseWrapper has it; connections[] is typed as the base class.
    assert connection.transaction_mode == "IMMEDIATE"  # type: ignore[attr-defined]


@override_settings(SQLQ={"LISTEN_DATABASE": "nope"})
def test_unknown_listen_alias_is_e010():
    assert ids(run_checks()) == {"django_sqlq.E020"}


@override_settings(SQLQ={"LISTEN_DATABASE": ""})
def test_empty_listen_alias_is_e001():
    assert ids(run_checks()) == {"django_sqlq.E001"}


@override_settings(SQLQ={"LISTEN_DATABASE": "default"})
def test_listen_alias_of_the_same_database_passes(engine):
    expected = set() if engine == "postgresql" else {"django_sqlq.E021"}
    assert ids(run_checks(databases=["default"])) == expected


@override_settings(SQLQ={"LISTEN_DATABASE": "other"})
def test_listen_alias_of_another_database_is_an_error(engine):
    if engine in ("sqlite", "mysql"):
        # SQLite and MariaDB have no LISTEN: the setting itself is the mistake.
        assert ids(run_checks()) == {"django_sqlq.E021"}
    else:
        # "other" is another PostgreSQL database: found when the checks query the databases.
        assert ids(run_checks()) == set()
        messages = run_checks(databases=["default", "other"])
        assert ids(messages) == {"django_sqlq.E022"}


# -- MariaDB (issue 24) --------------------------------------------------------------------


def _mariadb(engine: str) -> None:
    if engine != "mysql":
        pytest.skip("the mysql engine's checks")


def test_mariadb_passes_without_django_s_partial_index_warnings(engine):
    """Django warns that MariaDB ignores conditional indexes and constraints (W036, W037):
    not for django_sqlq's models, whose MariaDB shapes migration 0015 makes."""
    _mariadb(engine)
    messages = run_checks(databases=["default"])
    assert ids(messages) == set()
    assert not [m for m in messages if m.id in ("models.W036", "models.W037")]


def test_mariadb_at_repeatable_read_is_e006(engine, monkeypatch):
    _mariadb(engine)
    options = connections["default"].settings_dict["OPTIONS"]
    monkeypatch.setitem(options, "isolation_level", "repeatable read")
    messages = run_checks()
    assert ids(messages) == {"django_sqlq.E006"}
    assert "read committed" in next(m.msg for m in messages if m.id == "django_sqlq.E006")
    monkeypatch.setitem(options, "isolation_level", "read committed")
    assert ids(run_checks()) == set()


@pytest.mark.parametrize(
    ("mariadb", "version"), [(True, (10, 6, 21)), (False, (8, 4, 3))], ids=["old", "mysql"]
)
def test_mysql_or_an_old_mariadb_is_e005(engine, monkeypatch, mariadb, version):
    _mariadb(engine)
    connection = connections["default"]
    monkeypatch.setattr(connection, "mysql_is_mariadb", mariadb, raising=False)
    monkeypatch.setattr(connection, "mysql_version", version, raising=False)
    messages = run_checks()
    assert ids(messages) == {"django_sqlq.E005"}
    found = next(m.msg for m in messages if m.id == "django_sqlq.E005")
    assert ("MariaDB 10.6.21" if mariadb else "MySQL 8.4.3") in found


@override_settings(USE_TZ=False, TIME_ZONE="Asia/Tokyo")
def test_mariadb_without_use_tz_is_e007(engine):
    """Found by an adversary: a naive run_at was stored as Tokyo time and compared with the
    database's UTC clock, 9 hours off."""
    _mariadb(engine)
    messages = run_checks()
    assert ids(messages) == {"django_sqlq.E007"}
    assert "USE_TZ = True" in next(m.msg for m in messages if m.id == "django_sqlq.E007")
