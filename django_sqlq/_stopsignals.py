"""Moved to :mod:`django_sqlq.worker.signals`; this name stays importable."""

from django_sqlq.worker.signals import (
    STOP_SIGNALS,
    OnForce,
    OnStop,
    handler,
    install,
    name,
    restore,
    stop_signals,
)

__all__ = [
    "STOP_SIGNALS",
    "OnForce",
    "OnStop",
    "handler",
    "install",
    "name",
    "restore",
    "stop_signals",
]
