import os
import time
from pathlib import Path
from typing import Any

from django.core import checks
from django.db import models


class Order(models.Model):
    item = models.CharField(max_length=100)

    class Meta:
        app_label = "testapp"

    def __str__(self) -> str:
        return self.item


if os.environ.get("SQLQ_TEST_SLOW_START"):
    # A start-up the tests can catch in the middle (the system checks run after a command's
    # own start and before its work): the check touches the file the variable names, then
    # waits (at most 30 s) for "<that file>.release".
    @checks.register
    def slow_start(**kwargs: Any) -> list[checks.CheckMessage]:
        marker = Path(os.environ["SQLQ_TEST_SLOW_START"])
        marker.touch()
        release = marker.with_name(marker.name + ".release")
        deadline = time.monotonic() + 30
        while not release.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        return []
