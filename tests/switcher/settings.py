"""Settings as a django-tasks-db project writes them. The switch to django_sqlq changed one
line, marked below; there is no ``SQLQ`` setting at all.

Only ``DATABASES`` comes from the test suite's settings (the engine and the test run's
database names); nothing else is shared with it.
"""

from __future__ import annotations

from importlib.util import find_spec

from tests.settings import DATABASES as DATABASES

SECRET_KEY = "switcher-tests-only"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    # Django 5.2: the framework is the django-tasks backport, installed as an app.
    *([] if find_spec("django.tasks") else ["django_tasks"]),
    "django_sqlq",  # was "django_tasks_db"
    "tests.switcher",
]

TASKS = {
    "default": {
        "BACKEND": "django_sqlq.backend.SQLQBackend",  # was "django_tasks_db.DatabaseBackend"
        "QUEUES": ["default", "emails"],
    }
}
