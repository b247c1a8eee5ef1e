"""Unique jobs: the ``unique_key`` column, one live job per key (a partial unique index), and
an index of every keyed job for ``unique_for``.

A nullable column without a default: no table rewrite on either engine. Both indexes are
partial on ``unique_key IS NOT NULL``, so they start empty however large the table is.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_sqlq", "0004_job_uuid"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="unique_key",
            field=models.CharField(
                blank=True,
                help_text="While a job with this key is scheduled, pending or processing, enqueueing another with the same key returns this one instead.",
                max_length=255,
                null=True,
            ),
        ),
        migrations.AddIndex(
            model_name="job",
            index=models.Index(
                condition=models.Q(("unique_key__isnull", False)),
                fields=["unique_key"],
                name="sqlq_job_unique_key_idx",
            ),
        ),
        migrations.AddConstraint(
            model_name="job",
            constraint=models.UniqueConstraint(
                condition=models.Q(
                    ("status__in", ("scheduled", "pending", "processing")),
                    ("unique_key__isnull", False),
                ),
                fields=("unique_key",),
                name="sqlq_job_unique_key_live",
            ),
        ),
    ]
