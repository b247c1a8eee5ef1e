"""Durations as the dashboard and the job page show them."""

from __future__ import annotations

from django.utils.translation import gettext as _


def format_age(seconds: float) -> str:
    """A short, readable duration: "45 s", "3 min", "2 h 5 min", "3 d 4 h"."""
    seconds = max(0, int(seconds))
    if seconds < 60:
        return _("%d s") % seconds
    minutes = seconds // 60
    if minutes < 60:
        return _("%d min") % minutes
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return _("%(h)d h %(m)d min") % {"h": hours, "m": minutes}
    days, hours = divmod(hours, 24)
    return _("%(d)d d %(h)d h") % {"d": days, "h": hours}
