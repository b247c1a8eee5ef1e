"""Adversarial tests of ``sqlq_worker --reload`` (issue 26), from docs/reference/worker.md."""

from __future__ import annotations

import contextlib
import os
import signal
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.test import override_settings

from django_sqlq import enqueue
from django_sqlq.models import Job
from tests.conftest import WorkerProcess, wait_for

db = pytest.mark.django_db(transaction=True)

GOOD = textwrap.dedent(
    """
    import os
    import time
    from pathlib import Path

    from django_sqlq import handler

    VERSION = {version!r}


    @handler("adv26r.version")
    def version(payload):
        return VERSION


    @handler("adv26r.long")
    def long(payload):
        Path(payload["started"]).write_text(str(os.getpid()))
        deadline = time.monotonic() + 60
        while not Path(payload["release"]).exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        with Path(payload["out"]).open("a") as fh:
            fh.write(f"{{payload['n']}} {{os.getpid()}} {{VERSION}}\\n")
        return VERSION
    """
)


@pytest.fixture
def app(tmp_path: Path) -> dict[str, Any]:
    """An installed app of our own (in tmp_path), whose jobs.py the tests rewrite."""
    package = tmp_path / "adv26reloadapp"
    package.mkdir()
    (package / "__init__.py").write_text("")
    jobs = package / "jobs.py"
    jobs.write_text(GOOD.format(version="v1"))
    (tmp_path / "adv26_reload_settings.py").write_text(
        "from tests.settings import *  # noqa\n"
        "INSTALLED_APPS = [*INSTALLED_APPS, 'adv26reloadapp']\n"
    )
    env = {
        "DJANGO_SETTINGS_MODULE": "adv26_reload_settings",
        "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
    }
    return {"jobs": jobs, "env": env, "dir": tmp_path}


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


@pytest.fixture
def reaped(spawn_worker: Callable[..., WorkerProcess]) -> Any:
    """spawn_worker, and at teardown SIGKILL the --reload parents' children first (a
    SIGKILL of the parent alone leaves its child worker running: see the orphan test)."""
    started: list[WorkerProcess] = []

    def spawn(*args: str, env: dict[str, str] | None = None) -> WorkerProcess:
        worker = spawn_worker(*args, env=env)
        started.append(worker)
        return worker

    yield spawn
    for worker in started:
        for child in _children(worker.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)


def rewrite_until(worker: WorkerProcess, path: Path, text: str, seen: Callable[[], bool]) -> None:
    """Rewrite ``path`` (moving its mtime) until ``seen()``: the watcher sees a file from
    its first scan on, which a single write right after the start could precede."""

    def check() -> bool:
        if seen():
            return True
        if worker.proc.poll() is not None:
            raise AssertionError(f"exited ({worker.proc.returncode}):\n{worker.output()}")
        rewrite(path, text)
        return False

    wait_for(check, 60, 1.0)


def rewrite(path: Path, text: str) -> None:
    """Write and make sure the modification time moves (StatReloader compares mtimes)."""
    before = path.stat().st_mtime
    path.write_text(text)
    os.utime(path, (before + 2, before + 2))


def producer(**extra: Any) -> Any:
    return override_settings(SQLQ={**settings.SQLQ, "CHECK_TYPES": False, **extra})


def spawn(reaped: Callable[..., WorkerProcess], app: dict[str, Any], *args: str) -> WorkerProcess:
    from tests.conftest import ROOT

    env = {**app["env"], "PYTHONPATH": os.pathsep.join([str(ROOT), str(app["dir"])])}
    worker = reaped("--reload", *args, env=env)
    wait_for(lambda: " ready" in worker.output() or worker.proc.poll() is not None, 60)
    assert worker.proc.poll() is None, worker.output()
    return worker


@db
def test_a_syntax_error_then_the_fix(
    reaped: Callable[..., WorkerProcess], app: dict[str, Any]
) -> None:
    worker = spawn(reaped, app)
    rewrite_until(worker, app["jobs"], "def broken(:\n", lambda: "SyntaxError" in worker.output())
    assert worker.proc.poll() is None, worker.output()  # the watching parent stays
    ready_before = worker.output().count(" ready")
    rewrite_until(worker, app["jobs"], GOOD.format(version="v2"),
                  lambda: worker.output().count(" ready") > ready_before)  # fmt: skip
    with producer():
        job = enqueue("adv26r.version")
    wait_for(lambda: Job.objects.get(pk=job.pk).status in ("completed", "failed"), 30)
    job.refresh_from_db()
    assert (job.status, job.result) == ("completed", "v2"), (job.last_error, worker.output())
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0, worker.output()


@db
def test_a_change_storm_during_a_long_job(
    reaped: Callable[..., WorkerProcess], app: dict[str, Any], tmp_path: Path
) -> None:
    """Many changes while a job runs: it finishes once, in the worker that started it; the
    jobs enqueued meanwhile run once each; one worker at a time."""
    started, release, out = tmp_path / "started", tmp_path / "release", tmp_path / "out"
    with producer():
        enqueue("adv26r.long", {"started": str(started), "release": str(release),
                                "out": str(out), "n": 0})  # fmt: skip
    worker = spawn(reaped, app, "--concurrency", "2")
    wait_for(lambda: started.exists() and started.read_text(), 30)  # created, then written
    first_pid = int(started.read_text())
    for n in range(1, 6):
        rewrite(app["jobs"], GOOD.format(version=f"v{n + 1}"))
        with producer():
            enqueue("adv26r.long", {"started": str(tmp_path / f"s{n}"),
                                    "release": str(release), "out": str(out), "n": n})  # fmt: skip
        time.sleep(0.3)  # the storm's pace, not a wait for a result
    # The watcher's first scan (a thread beside the worker, slow on a loaded machine) may
    # come after the storm: it sees changes from that scan on, so the last version is
    # written again until one is seen.
    restarting = "changed: restarting once the running jobs are done"
    rewrite_until(
        worker, app["jobs"], GOOD.format(version="v6"), lambda: restarting in worker.output()
    )
    release.touch()
    wait_for(lambda: Job.objects.filter(status="completed").count() == 6, 60)
    lines = out.read_text().splitlines()
    ns = sorted(int(line.split()[0]) for line in lines)
    assert ns == list(range(6)), lines  # each once
    assert f"0 {first_pid} v1" in lines  # the old code, in the old worker
    assert all(job.attempts == 1 for job in Job.objects.all()), [
        (j.pk, j.attempts, j.last_error) for j in Job.objects.all()
    ]
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0, worker.output()


@db
def test_sigint_twice_to_the_parent_forces_and_records_the_running_job(
    reaped: Callable[..., WorkerProcess], app: dict[str, Any], tmp_path: Path
) -> None:
    started, release, out = tmp_path / "started", tmp_path / "release", tmp_path / "out"
    with producer():
        job = enqueue("adv26r.long", {"started": str(started), "release": str(release),
                                      "out": str(out), "n": 0}, max_attempts=3)  # fmt: skip
    worker = spawn(reaped, app)
    wait_for(lambda: started.exists() and started.read_text(), 30)  # created, then written
    worker.signal(signal.SIGINT)
    wait_for(lambda: "finishing running jobs" in worker.output(), 30)
    assert worker.proc.poll() is None
    worker.signal(signal.SIGINT)
    assert worker.wait(30) == 1, worker.output()
    job.refresh_from_db()
    assert job.status in ("pending", "scheduled"), (job.status, job.last_error)
    assert "JobInterruptedError" in (job.last_error or ""), job.last_error
    # no orphan child left running the job
    assert not out.exists()


@db
def test_sigterm_while_a_restart_waits_for_a_job_stops_without_a_new_worker(
    reaped: Callable[..., WorkerProcess], app: dict[str, Any], tmp_path: Path
) -> None:
    started, release, out = tmp_path / "started", tmp_path / "release", tmp_path / "out"
    with producer():
        enqueue("adv26r.long", {"started": str(started), "release": str(release),
                                "out": str(out), "n": 0})  # fmt: skip
    worker = spawn(reaped, app)
    wait_for(lambda: started.exists() and started.read_text(), 30)  # created, then written

    def restarting() -> bool:
        if "changed: restarting" in worker.output():
            return True
        os.utime(app["jobs"])
        return False

    wait_for(restarting, 60, 0.5)
    worker.signal(signal.SIGTERM)
    release.touch()
    assert worker.wait(30) == 0, worker.output()
    assert worker.output().count(" ready") == 1, worker.output()
    assert len(out.read_text().splitlines()) == 1


@db
def test_the_parent_killed_leaves_no_orphan_worker(
    reaped: Callable[..., WorkerProcess], app: dict[str, Any], tmp_path: Path
) -> None:
    """SIGKILL of the watching parent (a terminal closed, an IDE's stop button): the child
    worker must not run on unsupervised for ever."""
    started, release, out = tmp_path / "started", tmp_path / "release", tmp_path / "out"
    with producer():
        enqueue("adv26r.long", {"started": str(started), "release": str(release),
                                "out": str(out), "n": 0})  # fmt: skip
    worker = spawn(reaped, app)
    wait_for(lambda: started.exists() and started.read_text(), 30)  # created, then written
    child = int(started.read_text())
    worker.signal(signal.SIGKILL)
    worker.wait(10)
    release.touch()

    def gone() -> bool:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            return True
        return False

    try:
        wait_for(gone, 60)  # it notices, finishes its job and exits: a bound, not a pace
    finally:
        if not gone():
            os.kill(child, signal.SIGKILL)


@pytest.mark.parametrize(
    "options",
    [{"reload": True}, {"reload": True, "burst": True}, {"reload": True, "processes": 2}],
)
def test_reload_by_keyword_is_refused_from_call_command(options: dict[str, Any]) -> None:
    with pytest.raises(CommandError):
        call_command("sqlq_worker", verbosity=0, **options)
