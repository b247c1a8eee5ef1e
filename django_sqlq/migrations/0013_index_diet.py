"""The index diet (issue 22): ``sqlq_job_completed_idx`` goes, new jobs get time-ordered ids.

- ``sqlq_job_completed_idx`` (``completed_at``, every row) duplicated
  ``sqlq_job_finished_idx`` (status, ``completed_at``, finished rows only) for its one reader,
  the dashboard's throughput, and took an entry at every enqueue, claim and completion (on
  PostgreSQL no UPDATE of a job is HOT: each row version enters every index that is not
  partial). Dropped with ``DROP INDEX CONCURRENTLY`` on PostgreSQL: workers and enqueues go on
  while it runs, which is why this migration is not atomic.
- ``uuid``'s default becomes ``models.new_uuid`` (version 7, time-ordered); ``enqueue()``'s
  INSERTs write the same from SQL. Existing rows keep their uuids, and the column is not
  touched (the default is Python's): nothing is rewritten, on SQLite either.
"""

from django.db import migrations, models

import django_sqlq.models
from django_sqlq.migrations._concurrently import RemoveIndexConcurrently


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("django_sqlq", "0012_database_schedules"),
    ]

    operations = [
        RemoveIndexConcurrently(
            model_name="job",
            name="sqlq_job_completed_idx",
        ),
        # The default is Python's (the database's column has none): state only. As a plain
        # AlterField, SQLite would rebuild the whole table to change nothing.
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="job",
                    name="uuid",
                    field=models.UUIDField(
                        default=django_sqlq.models.new_uuid,
                        editable=False,
                        help_text="The job's unguessable public id: the tasks backend's result id.",
                        unique=True,
                    ),
                ),
            ],
        ),
    ]
