"""Scenario 9: sizes and shapes of input.

- Sizes and shapes that reach the worker: a 50 MB payload under a higher limit, results
  over the limit or holding what the database cannot store, text that only looks
  unstorable. (What ``enqueue``/``bulk_enqueue`` refuse at the door needs no fault: it is in
  tests/enqueue/test_validation.py, which every CI matrix entry runs.)
- Rows edited by hand into nonsense: what the schema refuses (the status CHECK constraint,
  invalid JSON) is refused; what gets in, the worker fails with a clear error, and goes on.
- ``sqlq_worker`` with invalid options: exit status 2 and a one-line message. A worker
  started before ``migrate``: says so and exits non-zero instead of looping.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest
from django.db import DatabaseError, IntegrityError, connection, transaction
from django.test import override_settings

from django_sqlq import enqueue
from django_sqlq.models import Job, JobStatus
from tests.conftest import ROOT, run_burst

pytestmark = [pytest.mark.faults, pytest.mark.django_db(transaction=True)]

MB = 1_000_000


def status(job: Job) -> tuple[str, int]:
    job.refresh_from_db()
    return job.status, job.attempts


# -- sizes and shapes that reach the worker --------------------------------------------------


@override_settings(SQLQ={"MAX_PAYLOAD_BYTES": 64 * MB, "QUEUES": ["default"]})
def test_with_a_higher_limit_a_50_mb_payload_travels_whole():
    job = enqueue("faults.size", {"blob": "x" * (50 * MB)})
    run_burst()
    job.refresh_from_db()
    assert (job.status, job.result) == (JobStatus.COMPLETED, 50 * MB)


@override_settings(SQLQ={"MAX_PAYLOAD_BYTES": 1000, "QUEUES": ["default"]})
def test_the_limit_applies_to_results_too():
    job = enqueue("faults.return", {"size": 2000}, max_attempts=1)
    run_burst()
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED
    assert "return value is 2002 bytes as JSON, over the limit of 1000" in job.last_error


@pytest.mark.parametrize(
    "text", ["😀 a whole pair", "é ü ß 中文", "a literal \\u0000", "\\\\u0000", "\\ud83d"]
)
def test_text_that_only_looks_unstorable_travels_unchanged(text):
    job = enqueue("tests.echo", {"text": text})
    run_burst()
    job.refresh_from_db()
    assert (job.status, job.payload, job.result) == (
        JobStatus.COMPLETED, {"text": text}, {"text": text}
    )  # fmt: skip


def test_a_result_with_a_nul_character_fails_the_job_not_the_worker():
    bad = enqueue("faults.return", {"value": "v", "nul": True}, max_attempts=1)
    good = enqueue("tests.noop")
    run_burst()
    assert status(bad) == (JobStatus.FAILED, 1)
    assert "return value cannot be stored as JSON: it holds a NUL" in bad.last_error
    assert status(good) == (JobStatus.COMPLETED, 1)


@pytest.mark.parametrize("extra", [{"nul": True}, {"surrogate": True}])
def test_an_error_message_the_database_cannot_store_is_stored_escaped(extra):
    bad = enqueue("faults.raise", {"message": "it broke", **extra}, max_attempts=1)
    good = enqueue("tests.noop")
    run_burst()
    assert status(bad) == (JobStatus.FAILED, 1)
    escaped = "\\x00" if "nul" in extra else "\\ud800"
    assert bad.last_error.startswith(f"ValueError: it broke{escaped}")
    assert bad.errors[0]["message"] == f"it broke{escaped}"
    assert status(good) == (JobStatus.COMPLETED, 1)


# -- rows edited by hand ---------------------------------------------------------------------


def hand_edit(sql: str, params: list[Any]) -> None:
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(sql, params)


def test_the_schema_refuses_an_unknown_status_and_invalid_json():
    job = enqueue("tests.noop")
    with pytest.raises(IntegrityError):
        hand_edit("UPDATE sqlq_job SET status = 'exploded' WHERE id = %s", [job.pk])
    # SQLite: CHECK (JSON_VALID(payload)); PostgreSQL: jsonb parses its input.
    with pytest.raises(DatabaseError):
        hand_edit("UPDATE sqlq_job SET payload = '{not json' WHERE id = %s", [job.pk])
    job.refresh_from_db()
    assert (job.status, job.payload) == (JobStatus.PENDING, {})


def test_invalid_json_that_got_in_anyway_fails_its_job_and_the_worker_goes_on():
    if connection.vendor != "sqlite":
        pytest.skip("only SQLite lets a hand edit switch CHECK constraints off")
    bad = enqueue("tests.echo", max_attempts=1)
    good = enqueue("tests.noop")
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA ignore_check_constraints = ON")
        try:
            cursor.execute("UPDATE sqlq_job SET payload = '{not json' WHERE id = %s", [bad.pk])
        finally:
            cursor.execute("PRAGMA ignore_check_constraints = OFF")
    run_burst()
    assert status(bad) == (JobStatus.FAILED, 1)
    assert bad.last_error.startswith("json.decoder.JSONDecodeError: Expecting property name")
    assert status(good) == (JobStatus.COMPLETED, 1)


def test_attempts_above_max_attempts_fail_the_job_without_running_it(tmp_path):
    log = tmp_path / "ran"
    bad = enqueue("faults.record", {"n": 1, "path": str(log)}, max_attempts=3)
    good = enqueue("tests.noop")
    hand_edit("UPDATE sqlq_job SET attempts = 7 WHERE id = %s", [bad.pk])
    run_burst()
    assert status(bad) == (JobStatus.FAILED, 8)
    assert bad.last_error.startswith(
        "django_sqlq.exceptions.InvalidJobError: Not run: attempt 8 is over max_attempts=3"
    )
    assert not log.exists()
    assert status(good) == (JobStatus.COMPLETED, 1)


def test_a_row_set_to_processing_by_hand_without_a_lease_is_recovered():
    job = enqueue("tests.noop")
    hand_edit(
        "UPDATE sqlq_job SET status = 'processing', locked_by = 'nobody', attempts = 1 "
        "WHERE id = %s",
        [job.pk],
    )
    run_burst()  # reaps at start: the row has no lease, so nobody will ever renew it
    assert status(job) == (JobStatus.COMPLETED, 2)
    assert job.errors[0]["worker_id"] == "nobody"


def test_a_type_name_of_10000_characters_written_by_hand():
    job = enqueue("tests.noop", max_attempts=1)
    try:
        hand_edit("UPDATE sqlq_job SET type = %s WHERE id = %s", ["y" * 10_000, job.pk])
    except DatabaseError:
        # PostgreSQL enforces varchar(255), and MariaDB in strict mode (its default).
        assert connection.vendor in ("postgresql", "mysql")
        assert status(job) == (JobStatus.PENDING, 0)
        return
    good = enqueue("tests.noop")
    run_burst()
    assert status(job) == (JobStatus.FAILED, 1)
    assert "No handler is registered for job type 'yyyy" in job.last_error
    assert status(good) == (JobStatus.COMPLETED, 1)


# -- the command -----------------------------------------------------------------------------


def sqlq_worker(*args: str, env: dict[str, str], timeout: float = 60) -> tuple[int, str]:
    """Run ``sqlq_worker`` to its exit; returns its status and its stderr."""
    done = subprocess.run(
        [sys.executable, "-m", "django", "sqlq_worker", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,  # a worker that loops instead of exiting fails here
        stdin=subprocess.DEVNULL,
    )
    return done.returncode, done.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--concurrency", "0"], "argument --concurrency: must be at least 1, got 0"),
        (["--concurrency", "many"], "argument --concurrency: 'many' is not a whole number"),
        (["--concurrency", "1001"], "argument --concurrency: must be at most 1000, got 1001"),
        (["--processes", "100000"], "argument --processes: must be at most 1000, got 100000"),
        (["--max-jobs", "-5"], "argument --max-jobs: must be at least 1, got -5"),
        (
            ["--poll-interval", "nan"],
            "argument --poll-interval: must be a number of seconds > 0 and <= 86400, got nan",
        ),
        (
            ["--poll-interval", "1e10"],
            "argument --poll-interval: must be a number of seconds > 0 and <= 86400, got 1e10",
        ),
        (
            ["--interval", "86400.5"],
            "argument --interval: must be a number of seconds >= 0 and <= 86400, got 86400.5",
        ),
        (["--queue", ""], "argument --queue: a queue name is 1 to 100 characters"),
        # Before: accepted, and on PostgreSQL every claim then failed ("value too long for
        # type character varying(255)") and was retried forever: --burst never ended.
        (
            ["--worker-id", "w" * 256],
            "argument --worker-id: A worker id is at most 255 characters; got one of 256.",
        ),
        (["--frobnicate"], "unrecognized arguments: --frobnicate"),
    ],
)
def test_invalid_options_exit_2_with_a_one_line_message(args, message, worker_env):
    code, stderr = sqlq_worker(*args, "--burst", env=worker_env)
    assert code == 2, stderr
    errors = [line for line in stderr.splitlines() if "error:" in line]
    assert len(errors) == 1, stderr
    assert errors[0].endswith(message), stderr
    assert "Traceback" not in stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--queue", "nope"], "Unknown queue(s): nope."),
        (["--database", "nope"], "Unknown database alias 'nope'"),
    ],
)
def test_invalid_option_values_exit_2_with_a_one_line_message(args, message, worker_env):
    code, stderr = sqlq_worker(*args, "--burst", env=worker_env)
    assert message in stderr, stderr
    assert len(stderr.strip().splitlines()) == 1, stderr
    assert code == 2, stderr


@pytest.fixture
def unmigrated_env(worker_env, tmp_path):
    """The environment of a worker whose database has no tables: a new SQLite file, or a
    new PostgreSQL or MariaDB database (dropped afterwards)."""
    env = {k: v for k, v in worker_env.items() if k != "SQLQ_TEST_USE_TEST_DB"}
    if connection.vendor == "sqlite":
        (tmp_path / "empty").mkdir()
        yield {**env, "SQLQ_TEST_RUN_DIR": str(tmp_path / "empty")}
        return
    name = connection.ops.quote_name(f"sqlq_unmigrated_{os.getpid()}")
    mariadb = connection.vendor == "mysql"
    with connection.cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS {name}")
        cursor.execute(f"CREATE DATABASE {name}")
    try:
        yield {**env, ("SQLQ_TEST_MYSQL_DB" if mariadb else "SQLQ_TEST_PG_DB"): name[1:-1]}
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS {name}{'' if mariadb else ' WITH (FORCE)'}")


def test_a_worker_started_before_migrate_says_so_and_exits(unmigrated_env):
    code, stderr = sqlq_worker(env=unmigrated_env)  # not --burst: it would serve forever
    assert code == 1, stderr
    assert stderr.strip() == (
        "CommandError: The jobs table does not exist in database 'default': "
        "run `python manage.py migrate` first."
    )


@pytest.mark.parametrize("processes", ["1", "2"])
def test_a_worker_that_cannot_reach_its_database_says_so_in_one_line(
    processes, worker_env, tmp_path
):
    # SQLite: a file in a directory that does not exist; PostgreSQL, MariaDB: a port nobody
    # serves.
    env = {**worker_env, "SQLQ_TEST_RUN_DIR": str(tmp_path / "missing" / "dir"),
           "SQLQ_TEST_PG_PORT": "1", "SQLQ_TEST_MYSQL_PORT": "1"}  # fmt: skip
    code, stderr = sqlq_worker("--processes", processes, env=env)
    assert code == 1, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("CommandError: Cannot use database 'default' (django.db.backends.")
    assert "OperationalError" in lines[0]
    assert "Traceback" not in stderr
