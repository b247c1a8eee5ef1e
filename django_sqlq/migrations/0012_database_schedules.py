"""Schedules stored in the database (issue 26 item 5): the sqlq_schedule table, edited in
the admin beside SQLQ["SCHEDULE"]. A new, empty table: nothing to rewrite. Its ticks use
the tick table of 0007 (by name)."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('django_sqlq', '0011_workflows'),
    ]

    operations = [
        migrations.CreateModel(
            name='DatabaseSchedule',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('name', models.CharField(help_text='Unique among all schedules, code ones too.', max_length=200, unique=True)),
                ('enabled', models.BooleanField(default=True, help_text='A disabled schedule enqueues nothing; its history stays.')),
                ('type', models.CharField(blank=True, default='', help_text="A job type: a @handler's name or a dotted path. Or give a task.", max_length=255)),
                ('task', models.CharField(blank=True, default='', help_text="Or a @task's dotted path (Django's tasks framework).", max_length=255)),
                ('cron', models.CharField(help_text='Five fields (minute hour day month weekday), or six with seconds first.', max_length=100)),
                ('timezone', models.CharField(default='UTC', help_text='An IANA name, such as Europe/Paris.', max_length=64)),
                ('payload', models.JSONField(blank=True, default=dict, help_text="What a job type's handler receives (JSON).")),
                ('args', models.JSONField(blank=True, default=list, help_text="A task's arguments (JSON list).")),
                ('kwargs', models.JSONField(blank=True, default=dict, help_text="A task's keyword arguments (JSON object).")),
                ('queue', models.CharField(blank=True, default='', help_text="Empty: 'default' for a job type, the task's own queue for a task.", max_length=100)),
                ('priority', models.SmallIntegerField(blank=True, help_text='-100 to 100, higher first; empty: the default.', null=True)),
                ('missed', models.CharField(choices=[('run_once', 'run the last missed tick once'), ('skip', 'skip missed ticks')], default='run_once', max_length=20)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('updated_at', models.DateTimeField(auto_now=True)),
            ],
            options={
                'verbose_name': 'database schedule',
                'verbose_name_plural': 'database schedules',
                'db_table': 'sqlq_schedule',
                'ordering': ['name'],
            },
        ),
    ]
