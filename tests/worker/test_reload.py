"""``sqlq_worker --reload`` (issue 26 item 4): a real process restarts on a code change,
gracefully: the job running across the restart finishes in the old worker, once; the job
enqueued meanwhile runs once, in the new one. Both engines."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from django_sqlq import enqueue
from django_sqlq.models import Job
from tests.conftest import ROOT, WorkerProcess, wait_for

db = pytest.mark.django_db(transaction=True)

# A module every worker of the suite imports (the test app's jobs.py): touching it is a
# code change. Only its modification time changes.
WATCHED = ROOT / "tests" / "testapp" / "jobs.py"


def _touch_until(worker: WorkerProcess, text: str) -> None:
    """Touch WATCHED until ``text`` is in the worker's output: the watcher sees a file
    from its first scan on, which a single touch right after the start could precede."""

    def seen() -> bool:
        if worker.proc.poll() is not None:
            raise AssertionError(f"worker exited ({worker.proc.returncode}):\n{worker.output()}")
        if text in worker.output():
            return True
        os.utime(WATCHED)
        return False

    wait_for(seen, timeout=60, interval=0.5)


@db
def test_a_code_change_restarts_the_worker_without_losing_or_repeating_a_job(
    spawn_worker: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    started, release, out = tmp_path / "started", tmp_path / "release", tmp_path / "out"
    running = enqueue(
        "tests.sleep_then_record",
        {"started": str(started), "release": str(release), "path": str(out), "n": 1,
         "max_seconds": 120},
    )  # fmt: skip
    worker = spawn_worker("--reload", "--concurrency", "2")
    wait_for(lambda: "watching for file changes with" in worker.output())
    wait_for(lambda: started.exists() and started.read_text())  # created, then written
    first_pid = int(started.read_text())
    assert first_pid != worker.pid  # the job runs in the child, not in the watching parent

    _touch_until(worker, "changed: restarting once the running jobs are done")
    # The old worker waits for its running job: no new worker has started.
    assert worker.output().count(" ready") == 1
    assert Job.objects.get(pk=running.pk).status == "processing"
    waiting = enqueue("tests.record", {"n": 2, "path": str(out)})  # enqueued mid-restart

    release.touch()
    wait_for(lambda: worker.output().count(" ready") >= 2)
    wait_for(lambda: Job.objects.filter(status="completed").count() == 2)
    assert "code changed, starting the worker again" in worker.output()

    lines = sorted(out.read_text().splitlines())
    assert lines[0] == f"1 {first_pid}"  # finished by the worker that started it, once
    assert [line.split()[0] for line in lines] == ["1", "2"]  # each job ran once
    for job in Job.objects.filter(pk__in=[running.pk, waiting.pk]):
        assert job.attempts == 1, job.last_error

    worker.signal(signal.SIGTERM)  # the parent passes it on: a graceful stop, exit 0
    assert worker.wait() == 0, worker.output()


@db
def test_sigterm_to_the_parent_lets_the_running_job_finish(
    spawn_worker: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    started, release, out = tmp_path / "started", tmp_path / "release", tmp_path / "out"
    job = enqueue(
        "tests.sleep_then_record",
        {"started": str(started), "release": str(release), "path": str(out), "n": 1,
         "max_seconds": 120},
    )  # fmt: skip
    worker = spawn_worker("--reload")
    wait_for(lambda: started.exists() and started.read_text())
    worker.signal(signal.SIGTERM)
    wait_for(lambda: "finishing running jobs" in worker.output())
    assert worker.proc.poll() is None  # waiting for the job
    release.touch()
    assert worker.wait() == 0, worker.output()
    job.refresh_from_db()
    assert (job.status, job.attempts) == ("completed", 1)
    assert len(out.read_text().splitlines()) == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--reload", "--burst"], "cannot be combined with --burst"),
        (["--reload", "--processes", "2"], "cannot be combined with --processes"),
        (["--reload"], "not call_command"),
    ],
)
def test_reload_refuses_what_it_cannot_restart(args: list[str], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        call_command("sqlq_worker", *args, verbosity=0)
