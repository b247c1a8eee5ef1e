"""An app whose only module is ``tasks.py``, where Django's tasks framework puts @task
functions, with a ``@recurring`` above one: the worker must find its schedule
(tests/schedules/test_schedules.py). Not in the suite's INSTALLED_APPS: the test installs it."""

from __future__ import annotations

try:  # Django 6+
    from django.tasks import task
except ImportError:  # Django 5.2 with the django-tasks backport
    from django_tasks import task  # type: ignore[no-redef]

from django_sqlq.schedules import recurring


@recurring("15 4 * * *", name="recurringapp-nightly")
@task
def nightly() -> str:
    return "done"
