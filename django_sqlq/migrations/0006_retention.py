"""Retention: the maintenance table (the pruner's lease, and a record of its last run for the
admin), and ``sqlq_job_finished_idx``, the finished rows of each status oldest first, which
the pruner walks.

The index is built from the finished rows already in the table: on a large table this holds
the jobs table's write lock while it runs (PostgreSQL: CREATE INDEX blocks writes, not
reads). On a table of millions of rows, migrate while workers and enqueues are stopped, or
delete old finished rows first.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_sqlq", "0005_unique_key"),
    ]

    operations = [
        migrations.CreateModel(
            name="Maintenance",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("duty", models.CharField(max_length=50, unique=True)),
                ("holder", models.CharField(blank=True, default="", max_length=255)),
                ("lease_expires_at", models.DateTimeField(blank=True, null=True)),
                ("last_run_at", models.DateTimeField(blank=True, null=True)),
                ("last_run_by", models.CharField(blank=True, default="", max_length=255)),
                (
                    "last_deleted",
                    models.PositiveBigIntegerField(
                        default=0, help_text="Rows the last run deleted."
                    ),
                ),
                (
                    "last_details",
                    models.JSONField(
                        blank=True,
                        default=dict,
                        help_text="The last run's rows deleted per status.",
                    ),
                ),
                ("last_seconds", models.FloatField(blank=True, null=True)),
                ("total_deleted", models.PositiveBigIntegerField(default=0)),
            ],
            options={
                "verbose_name": "maintenance duty",
                "verbose_name_plural": "maintenance duties",
                "db_table": "sqlq_maintenance",
            },
        ),
        migrations.AddIndex(
            model_name="job",
            index=models.Index(
                condition=models.Q(("status__in", ("completed", "failed", "cancelled"))),
                fields=["status", "completed_at"],
                name="sqlq_job_finished_idx",
            ),
        ),
    ]
