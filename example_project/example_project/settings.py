"""Settings for the django_sqlq example project: a tiny shop that confirms orders in the
background. For local use only (DEBUG on, a fixed development SECRET_KEY)."""

import os
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent

SECRET_KEY = os.environ.get(
    "DJANGO_SECRET_KEY", "django-insecure-example-project-only-never-deploy-this"
)
DEBUG = os.environ.get("DJANGO_DEBUG", "1") == "1"
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "[::1]"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_sqlq",
    "shop",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "example_project.urls"
WSGI_APPLICATION = "example_project.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# One SQLite file holds the shop's tables and the jobs table. django_sqlq switches the
# connection to WAL mode with a busy timeout itself, so the web server and the worker can
# share it. SQLQ_DEMO_DB points it elsewhere (scripts/demo --check uses a scratch file).
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("SQLQ_DEMO_DB", BASE_DIR / "db.sqlite3"),
    }
}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"

# The job queue. Every key is optional; see the reference docs for the rest.
SQLQ = {
    "QUEUES": ["default"],
    # The mail provider accepts at most 50 messages a second from the shop: no more than 50
    # confirmations start in any second, however many workers run (docs: "Pausing and
    # limiting queues"). `manage.py sqlq_queue status` shows it.
    "QUEUE_LIMITS": {"default": {"rate": "50/s"}},
    # Recurring jobs: every worker runs the scheduler, and each tick is enqueued once.
    # The admin lists them under Job queue > Schedules, with a "Run now" button.
    "SCHEDULE": {
        "nightly-sales-report": {
            "type": "shop.nightly_sales_report",
            "cron": "0 3 * * *",  # 03:00 every day...
            "timezone": "Europe/Paris",  # ...in Paris, summer and winter time alike
            "payload": {"days": 1},
            "missed": "run_once",  # after downtime, run the last missed night once
        },
    },
    # The bearer token Prometheus sends to /sqlq/metrics (see urls.py). Unset, only staff
    # who may view jobs can read the metrics. A real site reads it from its environment.
    "METRICS_TOKEN": os.environ.get("SQLQ_METRICS_TOKEN") or None,
    # The workers delete finished jobs after this long: receipts sent a day ago are of no
    # interest, failures are kept a month for someone to look at (docs: howto/retention.md).
    "KEEP_FINISHED": {"completed": 86400, "failed": 30 * 86400, "cancelled": 7 * 86400},
}

# The example has no payment provider: a job of the sandbox confirms each order's payment, as
# the provider's webhook (POST /payments/webhook/) would (shop/payments.py). A real shop has
# its provider call the webhook and leaves this off.
SHOP_PAYMENT_SANDBOX = True

# Show what the worker does on the console.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "{asctime} {levelname} {name}: {message}", "style": "{"},
    },
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "plain"},
    },
    "loggers": {
        "django_sqlq": {"handlers": ["console"], "level": "INFO", "propagate": False},
        "shop": {"handlers": ["console"], "level": "INFO", "propagate": False},
    },
}
