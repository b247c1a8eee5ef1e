"""Settings for the worker processes of the fault scenarios: the test settings, with log
lines that carry their level and thread."""

from tests.settings import *  # noqa: F403

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "levels": {"format": "%(asctime)s %(levelname)s %(threadName)s %(name)s %(message)s"}
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "levels"}},
    "loggers": {"django_sqlq": {"handlers": ["console"], "level": "INFO"}},
}
