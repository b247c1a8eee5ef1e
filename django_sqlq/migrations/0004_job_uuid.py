"""Give every job an unguessable public id (the tasks backend's result id).

Existing rows get theirs here, in the database: one UPDATE that rewrites every row, then a
unique index (SQLite also copies the table to make the column NOT NULL). On a large table this
takes time and holds the table's write lock while it runs (500,000 rows: 4.1 s on SQLite,
3.5 s on PostgreSQL, on a small 2-core machine): prune finished jobs first, and migrate while
workers and enqueues are stopped.
"""

import uuid

from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

# Frozen copies of django_sqlq.db's expressions: a migration must not change with the code.
UUID4_SQL = {
    "postgresql": "gen_random_uuid()",
    "sqlite": (
        "lower(hex(randomblob(6)) || '4' || substr(hex(randomblob(2)), 2) "
        "|| substr('89ab', 1 + (random() & 3), 1) || substr(hex(randomblob(2)), 2) "
        "|| hex(randomblob(6)))"
    ),
}


def fill_uuids(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    connection = schema_editor.connection
    table = connection.ops.quote_name("sqlq_job")
    expression = UUID4_SQL.get(connection.vendor)
    if expression is None:  # an engine django_sqlq does not support: row by row
        Job = apps.get_model("django_sqlq", "Job")
        for pk in Job.objects.using(connection.alias).filter(uuid=None).values_list("pk", flat=True):
            Job.objects.using(connection.alias).filter(pk=pk).update(uuid=uuid.uuid4())
        return
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE {table} SET uuid = {expression} WHERE uuid IS NULL")


class Migration(migrations.Migration):
    dependencies = [
        ("django_sqlq", "0003_scheduled_status"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="uuid",
            field=models.UUIDField(editable=False, null=True),
        ),
        migrations.RunPython(fill_uuids, migrations.RunPython.noop, elidable=True),
        migrations.AlterField(
            model_name="job",
            name="uuid",
            field=models.UUIDField(
                default=uuid.uuid4,
                editable=False,
                help_text="The job's unguessable public id: the tasks backend's result id.",
                unique=True,
            ),
        ),
    ]
