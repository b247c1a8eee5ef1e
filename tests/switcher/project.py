"""``python -m tests.switcher.project CODE``: run CODE as code inside the switched project
(``DJANGO_SETTINGS_MODULE=tests.switcher.settings``) would, after ``django.setup()``, with
``call_command``, ``json`` and the project's ``tasks`` module in scope; what it prints is the
answer."""

from __future__ import annotations

import json
import sys

import django


def main() -> None:
    django.setup()
    from django.core.management import call_command

    from tests.switcher import tasks

    exec(sys.argv[1], {"call_command": call_command, "json": json, "tasks": tasks})


if __name__ == "__main__":
    main()
