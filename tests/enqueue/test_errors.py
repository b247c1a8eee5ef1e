"""What a failed attempt records, and what it tells the tasks framework (issue 11)."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from django_sqlq import compat, enqueue
from django_sqlq.lifecycle import MAX_MESSAGE_CHARS, MAX_TRACEBACK_CHARS
from django_sqlq.models import Job, JobStatus
from tests.conftest import run_burst

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_huge_exception_message_is_capped_in_last_error_and_every_entry():
    job = enqueue("faults.raise", {"message": "0123456789", "repeat": 100_000}, max_attempts=2)
    run_burst()
    job = Job.objects.get(pk=job.pk)
    assert job.status == JobStatus.FAILED
    assert len(job.errors) == 2
    for entry in job.errors:
        assert len(entry["message"]) < MAX_MESSAGE_CHARS + 100
        assert "characters cut" in entry["message"]
        assert len(entry["traceback"]) < MAX_TRACEBACK_CHARS + 100
        # The cut keeps both ends: the frames (where it was raised) and the exception line.
        assert "raise_message" in entry["traceback"]
        assert entry["traceback"].rstrip().endswith("0123456789")
    assert len(job.last_error) < MAX_MESSAGE_CHARS + MAX_TRACEBACK_CHARS + 200


def test_task_finished_is_sent_with_the_exception_in_hand(caplog):
    if not compat.AVAILABLE:
        pytest.skip("no tasks framework installed")
    from tests.testapp import tasks

    result = tasks.fail.enqueue("the reason")
    with caplog.at_level(logging.ERROR):
        run_burst()
    assert Job.objects.get(uuid=result.id).status == JobStatus.FAILED
    records = [r for r in caplog.records if r.name in ("django.tasks", "django_tasks")
               and r.levelno >= logging.ERROR]  # fmt: skip
    assert records, caplog.text
    exc_info = records[-1].exc_info
    assert exc_info is not None, "logged without the exception"
    assert exc_info[1] is not None, "logged without the exception"
    assert str(exc_info[1]) == "the reason"
    assert "NoneType: None" not in caplog.text


@pytest.fixture
def no_jobs_table() -> Iterator[None]:
    """The jobs table renamed away for the test, as before ``migrate``."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE sqlq_job RENAME TO sqlq_job_away")
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute("ALTER TABLE sqlq_job_away RENAME TO sqlq_job")


@pytest.mark.usefixtures("no_jobs_table")
def test_enqueue_before_migrate_says_to_run_migrate():
    from django_sqlq import bulk_enqueue
    from django_sqlq.exceptions import ConfigurationError

    message = r"The jobs table does not exist in database .default.: run `python manage.py migr"
    with pytest.raises(ConfigurationError, match=message):
        enqueue("tests.noop")
    with pytest.raises(ConfigurationError, match=message):
        bulk_enqueue("tests.noop", [{}, {}])
