"""Status conditions that SQLite evaluates cheaply (issue 22: the SQLite drain).

Every claim and every completion changes a job's ``status``, so SQLite evaluates, at each row
they change, the condition of every partial index and check that names it, for the row as it
was and as it becomes, even where the row enters none of them. Three were written
``status IN (...)`` with three or more statuses, which SQLite evaluates through a temporary
b-tree of the list, a look-up each time: ``sqlq_job_finished_idx``, the unique
``sqlq_job_unique_key_live`` and the check ``sqlq_job_status_valid``. Measured on a table of
40,000 jobs with stdlib ``sqlite3`` (claims of 200 rows, their completions, the statements
of django_sqlq): 12.6 µs of SQL a job as they were, 8.4 µs with the three written as below.

- ``sqlq_job_finished_idx``: ``(status = 'completed' OR status = 'failed' OR status =
  'cancelled')``, the same rows.
- ``sqlq_job_unique_key_live``: ``(unique_key IS NOT NULL AND (status = 'blocked' OR ...))``,
  the same rows; the key is read first, so a job without one (nearly all) never has its
  status compared. ``enqueue(unique_key=...)``'s ``ON CONFLICT`` names it by this condition
  (``db.insert.UNIQUE_LIVE_SQL``).
- ``sqlq_job_status_valid``: ``(status = 'blocked' OR ... OR status = 'cancelled')``, the same
  values.

On SQLite the two indexes are dropped and created again inside the migration's transaction
(no moment without the unique index; creating them reads the table once). The check is
changed in place: the table's definition in ``sqlite_schema`` is edited, as SQLite documents
for a change that leaves every stored row valid ("Making Other Kinds Of Table Schema
Changes"), where Django would copy the whole table into a new one. Should SQLite refuse the
edit (a connection in defensive mode), the old check stays: it allows the same values, at
the old cost.

On PostgreSQL and MariaDB nothing is written: PostgreSQL reads an IN list as cheaply as the
ORs, proves either condition from the other (the ``ON CONFLICT`` of a unique enqueue infers
the index as it was), and MariaDB has its own shapes of these indexes (0015). Their
databases keep the definitions they have; only the migration state changes.
"""

from typing import Any

from django.db import DatabaseError, migrations, models

TABLE = "sqlq_job"
LIVE = ("blocked", "scheduled", "pending", "processing")
FINISHED = ("completed", "failed", "cancelled")
ALL = LIVE + FINISHED


def _any(values: tuple[str, ...]) -> models.Q:
    """The condition's state: ``status = a OR status = b ...`` (the model's ``any_status``)."""
    return models.Q(*[("status", value) for value in values], _connector="OR")


def _in(values: tuple[str, ...]) -> str:
    return '"status" IN (' + ", ".join(f"'{value}'" for value in values) + ")"


def _or(values: tuple[str, ...]) -> str:
    return "(" + " OR ".join(f"\"status\" = '{value}'" for value in values) + ")"


# Each as Django writes it on SQLite, before and after.
OLD_INDEXES = [
    'DROP INDEX IF EXISTS "sqlq_job_finished_idx"',
    f'CREATE INDEX "sqlq_job_finished_idx" ON "{TABLE}" ("status", "completed_at") '
    f"WHERE {_in(FINISHED)}",
    'DROP INDEX IF EXISTS "sqlq_job_unique_key_live"',
    f'CREATE UNIQUE INDEX "sqlq_job_unique_key_live" ON "{TABLE}" ("unique_key") '
    f'WHERE ({_in(LIVE)} AND "unique_key" IS NOT NULL)',
]
NEW_INDEXES = [
    'DROP INDEX IF EXISTS "sqlq_job_finished_idx"',
    f'CREATE INDEX "sqlq_job_finished_idx" ON "{TABLE}" ("status", "completed_at") '
    f"WHERE {_or(FINISHED)}",
    'DROP INDEX IF EXISTS "sqlq_job_unique_key_live"',
    f'CREATE UNIQUE INDEX "sqlq_job_unique_key_live" ON "{TABLE}" ("unique_key") '
    f'WHERE ("unique_key" IS NOT NULL AND {_or(LIVE)})',
]
OLD_CHECK = f'CONSTRAINT "sqlq_job_status_valid" CHECK ({_in(ALL)})'
NEW_CHECK = f'CONSTRAINT "sqlq_job_status_valid" CHECK ({_or(ALL)})'


def _edit_check(schema_editor: Any, old: str, new: str) -> None:
    """Replace the check's text ``old`` by ``new`` in the table's definition, in place."""
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(f"SELECT sql FROM sqlite_master WHERE type = 'table' AND name = '{TABLE}'")
        row = cursor.fetchone()
        if row is None or row[0].count(old) != 1:
            return  # not the definition this migration knows: left as it is
        cursor.execute("PRAGMA schema_version")
        version = cursor.fetchone()[0]
        try:
            cursor.execute("PRAGMA writable_schema = ON")
            cursor.execute(
                f"UPDATE sqlite_master SET sql = %s WHERE type = 'table' AND name = '{TABLE}'",
                [row[0].replace(old, new)],
            )
            # Every connection reads the schema again (the documented procedure's last step).
            cursor.execute(f"PRAGMA schema_version = {int(version) + 1}")
        except DatabaseError:
            pass  # refused (defensive mode): the old check stays, equivalent
        finally:
            cursor.execute("PRAGMA writable_schema = OFF")


def _rewrite(indexes: list[str], old_check: str, new_check: str) -> Any:
    def rewrite(apps: Any, schema_editor: Any) -> None:  # noqa: ARG001 (RunPython's signature)
        if schema_editor.connection.vendor != "sqlite":
            return
        for statement in indexes:
            schema_editor.execute(statement, params=None)
        _edit_check(schema_editor, old_check, new_check)

    return rewrite


class Migration(migrations.Migration):
    dependencies = [
        ("django_sqlq", "0017_mariadb_wake"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunPython(
                    _rewrite(NEW_INDEXES, OLD_CHECK, NEW_CHECK),
                    _rewrite(OLD_INDEXES, NEW_CHECK, OLD_CHECK),
                    elidable=False,
                ),
            ],
            state_operations=[
                migrations.RemoveConstraint(model_name="job", name="sqlq_job_status_valid"),
                migrations.RemoveConstraint(model_name="job", name="sqlq_job_unique_key_live"),
                migrations.RemoveIndex(model_name="job", name="sqlq_job_finished_idx"),
                migrations.AddIndex(
                    model_name="job",
                    index=models.Index(
                        condition=_any(FINISHED),
                        fields=["status", "completed_at"],
                        name="sqlq_job_finished_idx",
                    ),
                ),
                migrations.AddConstraint(
                    model_name="job",
                    constraint=models.CheckConstraint(
                        condition=_any(ALL),
                        name="sqlq_job_status_valid",
                    ),
                ),
                migrations.AddConstraint(
                    model_name="job",
                    constraint=models.UniqueConstraint(
                        condition=models.Q(
                            ("unique_key__isnull", False),
                            _any(LIVE),
                        ),
                        fields=("unique_key",),
                        name="sqlq_job_unique_key_live",
                    ),
                ),
            ],
        ),
    ]
