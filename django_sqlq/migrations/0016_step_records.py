"""What a step's record writes, cut (issue 25: a step's cost on SQLite).

Every step a job takes inserts a row into ``sqlq_job_step``, in the step's transaction, and on
SQLite each page that INSERT changes is one more frame the commit writes to the WAL (and one
more for the checkpoints to copy). Two of those pages are given up here.

**One index of the steps asleep in place of two.**
``sqlq_job_step_wait_key_idx`` (``wait_key``, every row) took an entry at every step a job
recorded, for one reader, ``emit_event()``'s look-up of the steps waiting for a key; and
``sqlq_job_step_asleep_idx`` (``state``, the steps sleeping or waiting) served the
dashboard's count. Both readers want only the steps asleep: the new
``sqlq_job_step_asleep_idx`` (``state``, ``wait_key``), partial to them, serves both, and a
done step enters no index but the unique (job, name). Created and dropped CONCURRENTLY on
PostgreSQL (workers and enqueues go on meanwhile), which is why this migration is not
atomic. MariaDB has no partial indexes: there the new index holds every row, as the two it
replaces did.

**On SQLite, ids without AUTOINCREMENT.** Django declares every auto id ``AUTOINCREMENT``,
which keeps the largest id given in ``sqlite_sequence``, a page of its own that every INSERT
rewrites. Nothing names a step by its id alone (an attempt marks its steps by job and name;
the admin lists a job's): the table is rebuilt once without the keyword (ids are still given
in order; one of a deleted newest row may be given again). Its rows and indexes are copied as they are. Should a later migration make
Django rebuild this table, the keyword comes back, and only the cost with it.
"""

from typing import Any

from django.db import migrations, models

from django_sqlq.migrations._concurrently import AddIndexConcurrently, RemoveIndexConcurrently


def _rebuild(old: str, new: str) -> Any:
    """A RunPython function that rebuilds ``sqlq_job_step`` on SQLite with ``old`` replaced by
    ``new`` in its definition (nothing elsewhere, or when the definition lacks ``old``)."""

    def rebuild(apps: Any, schema_editor: Any) -> None:  # noqa: ARG001 (RunPython's signature)
        connection = schema_editor.connection
        if connection.vendor != "sqlite":
            return
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT type, sql FROM sqlite_master WHERE tbl_name = 'sqlq_job_step' "
                "AND sql IS NOT NULL"
            )
            rows = cursor.fetchall()
        [table] = [sql for kind, sql in rows if kind == "table"]
        if old not in table:
            return
        indexes = [sql for kind, sql in rows if kind == "index"]
        definition = table.replace('"sqlq_job_step"', '"sqlq_job_step__new"', 1)
        for statement in [
            definition.replace(old, new, 1),
            'INSERT INTO "sqlq_job_step__new" SELECT * FROM "sqlq_job_step"',
            'DROP TABLE "sqlq_job_step"',
            'ALTER TABLE "sqlq_job_step__new" RENAME TO "sqlq_job_step"',
            *indexes,
        ]:
            schema_editor.execute(statement, params=None)

    return rebuild


AUTOINCREMENT = '"id" integer NOT NULL PRIMARY KEY AUTOINCREMENT'
NO_AUTOINCREMENT = '"id" integer NOT NULL PRIMARY KEY'


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("django_sqlq", "0015_mariadb_shapes"),
    ]

    operations = [
        RemoveIndexConcurrently(
            model_name="jobstep",
            name="sqlq_job_step_wait_key_idx",
        ),
        RemoveIndexConcurrently(
            model_name="jobstep",
            name="sqlq_job_step_asleep_idx",
        ),
        AddIndexConcurrently(
            model_name="jobstep",
            index=models.Index(
                condition=models.Q(("state__in", ["sleeping", "waiting"])),
                fields=["state", "wait_key"],
                name="sqlq_job_step_asleep_idx",
            ),
        ),
        migrations.RunPython(
            _rebuild(AUTOINCREMENT, NO_AUTOINCREMENT),
            _rebuild(NO_AUTOINCREMENT + ",", AUTOINCREMENT + ","),
            atomic=True,
            elidable=False,
        ),
    ]
