"""Adversarial probes of retention (issue 14 part 1), written from the docs only.
Both engines."""

from __future__ import annotations

import contextlib
import math
from datetime import timedelta

import pytest
from django.core.management import CommandError
from django.test import override_settings

from django_sqlq.conf import get_settings
from django_sqlq.exceptions import ConfigurationError
from django_sqlq.models import Job
from tests.retention.test_retention import SQLQ, make, prune_cmd

DAY = 86400


@pytest.mark.parametrize(
    "value",
    [
        math.nan,
        math.inf,
        True,
        False,
        -1,
        timedelta(seconds=-1),
        101 * 366 * DAY,  # over the documented 100 years
        timedelta(days=101 * 366),
        {"completed": math.nan},
        {"completed": False},
        {None: DAY},
        {"COMPLETED": DAY},
        {"scheduled": DAY},
        {"processing": None},
        {"failed": timedelta(days=-1)},
        "604800",
        b"1",
    ],
)
def test_junk_keep_finished_is_a_configuration_error_naming_the_key(value):
    with (
        override_settings(SQLQ={**SQLQ, "KEEP_FINISHED": value}),
        pytest.raises(ConfigurationError, match="KEEP_FINISHED"),
    ):
        get_settings()


def test_keep_finished_timedelta_with_microseconds_is_accepted():
    with override_settings(SQLQ={**SQLQ, "KEEP_FINISHED": timedelta(days=1, microseconds=5)}):
        kept = dict(get_settings().KEEP_FINISHED)
    assert set(kept) == {"completed", "failed", "cancelled"}
    assert all(v is not None and DAY <= v <= DAY + 1 for v in kept.values())


@pytest.mark.parametrize("value", [math.nan, math.inf, True, "60", -1, 0.001, 86401, None])
def test_junk_prune_interval_is_refused(value):
    with (
        override_settings(SQLQ={**SQLQ, "PRUNE_INTERVAL": value}),
        pytest.raises(ConfigurationError, match="PRUNE_INTERVAL"),
    ):
        get_settings()


@pytest.mark.django_db
def test_unfinished_jobs_with_an_old_completed_at_are_never_pruned():
    old = timedelta(days=400)
    live = [*make("pending", age=old), *make("processing", age=old), *make("scheduled", age=old)]
    make("completed", age=old, n=2)
    with override_settings(SQLQ={**SQLQ, "KEEP_FINISHED": 0}):
        prune_cmd("--older-than", "0")
        prune_cmd("--min-age-days", "0", "--failed-min-age-days", "0", "--queue-name", "*")
        prune_cmd()
    assert set(Job.objects.values_list("pk", flat=True)) == set(live)


@pytest.mark.django_db
def test_dry_run_count_is_what_is_then_deleted():
    make("completed", age=timedelta(days=10), n=7)
    make("failed", age=timedelta(days=10), n=3)
    make("cancelled", age=timedelta(days=10), queue="emails", n=2)
    make("completed", age=timedelta(hours=1), n=4)
    dry = prune_cmd("--dry-run")
    assert "Would delete 12 finished job(s)." in dry
    assert Job.objects.count() == 16
    assert "Deleted 12 finished job(s) (completed 7, failed 3, cancelled 2)." in prune_cmd()
    assert Job.objects.count() == 4


@pytest.mark.django_db
@pytest.mark.parametrize(
    "options",
    [
        {"older_than": -5.0},
        {"older_than": math.nan},
        {"min_age_days": -1},
        {"failed_min_age_days": -3},
        {"status": ["pending"]},
        {"task_status": ["READY"]},
        {"older_than": 3600.0, "min_age_days": 1},
    ],
)
def test_call_command_keywords_are_checked_like_the_command_line(options):
    make("completed", age=timedelta(days=10), n=2)
    live = make("pending", age=timedelta(days=10))
    with pytest.raises(CommandError):
        prune_cmd(**options)
    assert Job.objects.count() == 3
    assert Job.objects.filter(pk__in=live).exists()


@pytest.mark.django_db
@pytest.mark.parametrize(
    "args",
    [
        ["--failed-min-age-days", "-1"],
        ["--failed-min-age-days", "x"],
        ["--min-age-days", "1.5"],
        ["--min-age-days", "nan"],
        ["--older-than", "nan"],
        ["--older-than", "inf"],
        ["--older-than", "101y"],
        ["--older-than", "999999w"],
        ["--older-than", ""],
        ["--queue-name", ""],
        ["--task-status", "successful,bogus"],
    ],
)
def test_junk_command_line_values_are_errors_and_delete_nothing(args):
    make("completed", age=timedelta(days=10), n=2)
    with pytest.raises(CommandError):
        prune_cmd(*args)
    assert Job.objects.count() == 2


@pytest.mark.django_db
def test_a_negative_older_than_keyword_does_not_delete_jobs_that_just_finished():
    """The reference: --older-than is 0 to 100 years. By keyword, -3600 must not reach into the
    future and delete a job that finished a second ago."""
    fresh = make("completed", age=timedelta(seconds=1))
    with contextlib.suppress(CommandError):
        prune_cmd(older_than=-3600.0)
    assert Job.objects.filter(pk__in=fresh).exists()
