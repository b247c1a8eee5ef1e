"""Queue control (issue 15): ``sqlq_queue``, one row per queue an operator paused or a
global limit covers (a queue without a row runs). A new, small table: nothing else changes,
and the claim of a queue without a row or limit never reads it.
"""

import django.db.models.functions.datetime
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('django_sqlq', '0007_schedules'),
    ]

    operations = [
        migrations.CreateModel(
            name='Queue',
            fields=[
                ('name', models.CharField(max_length=100, primary_key=True, serialize=False)),
                ('paused', models.BooleanField(default=False)),
                ('paused_at', models.DateTimeField(blank=True, null=True)),
                ('updated_at', models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
                ('recent_starts', models.JSONField(blank=True, default=list)),
            ],
            options={
                'verbose_name': 'queue',
                'verbose_name_plural': 'queues',
                'db_table': 'sqlq_queue',
                'ordering': ['name'],
            },
        ),
    ]
