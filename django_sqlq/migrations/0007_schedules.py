"""Recurring jobs: the tick table. One row per enqueued tick of a schedule; the unique
constraint on (name, tick_at) makes each tick enqueued once across workers and hosts. A new,
empty table: nothing to rewrite."""

import django.db.models.functions.datetime
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('django_sqlq', '0006_retention'),
    ]

    operations = [
        migrations.CreateModel(
            name='ScheduleTick',
            fields=[
                ('id', models.BigAutoField(primary_key=True, serialize=False)),
                ('name', models.CharField(max_length=200)),
                ('tick_at', models.DateTimeField()),
                ('job_id', models.BigIntegerField(blank=True, null=True)),
                ('enqueued_at', models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
                ('spec', models.CharField(blank=True, default='', max_length=300)),
            ],
            options={
                'verbose_name': 'schedule',
                'verbose_name_plural': 'schedules',
                'db_table': 'sqlq_schedule_tick',
                'constraints': [models.UniqueConstraint(fields=('name', 'tick_at'), name='sqlq_schedule_tick_unique')],
            },
        ),
    ]
