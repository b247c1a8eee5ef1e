"""``sqlq_worker --reload``: restart the worker when code changes (for development).

Built on Django's own autoreloader (``django.utils.autoreload``: its file watcher, picked
by ``get_reloader()`` as runserver's is, StatReloader or Watchman; its ``file_changed``
signal; ``get_child_arguments()``; exit status 3 for "restart me"), with two changes that
make a restart graceful, as SIGTERM is:

- ``run_with_reloader()`` runs the command in a daemon thread and ends the process from the
  watcher's thread (``sys.exit(3)``): running jobs would be cut off. Here the worker keeps
  the main thread (and its SIGTERM/SIGINT handling); the watcher runs in a thread of its
  own, and a change that no receiver of ``file_changed`` handles (Django's own reset
  template and translation caches) asks the worker to stop as SIGTERM does (claim nothing
  more, let the running jobs finish, give back those claimed and not started), then the
  process exits with status 3.
- ``restart_with_reloader()`` kills the child outright when the parent gets SIGTERM. Here
  the parent passes SIGTERM/SIGINT on to the child (the first: a graceful stop; a second:
  forced) and waits for it. The child runs in a process group of its own, so that Ctrl-C in
  a terminal reaches it once, through the parent, not twice.

The parent (``run_parent``) starts the same command line again each time the child exits
with status 3. A child that cannot start (a syntax error in a ``jobs.py``, a bad schedule)
logs the error and waits for the next change instead of exiting, as runserver does.
"""

from __future__ import annotations

import logging
import os
import subprocess
import threading
import time
import traceback
from collections.abc import Callable
from typing import IO, TYPE_CHECKING, Any, Final

from django.utils import autoreload

from django_sqlq.worker import signals as stopsignals
from django_sqlq.worker.startup import WorkerError

if TYPE_CHECKING:
    from django_sqlq.worker import Worker

logger = logging.getLogger("django_sqlq.worker")

# Set in the child's environment: this process is the worker the parent watches over.
CHILD_ENV: Final = "SQLQ_WORKER_RELOAD_CHILD"
RESTART: Final = 3  # the exit status that asks for a restart (Django's trigger_reload's)
PARENT_POLL: Final = 0.5  # seconds between the child's looks for its parent


def in_child() -> bool:
    """Whether this process is a worker started by ``sqlq_worker --reload``'s parent."""
    return os.environ.get(CHILD_ENV) == "true"


def run_parent(stdout: IO[str] | Any) -> int:
    """Run the command again in a child process each time it exits with RESTART; pass
    SIGTERM/SIGINT on to it. Returns the child's last exit status."""
    args = autoreload.get_child_arguments()
    env = {**os.environ, CHILD_ENV: "true"}
    stopping = threading.Event()
    lock = threading.Lock()
    child: subprocess.Popen[bytes] | None = None

    def on_signal(signum: int, count: int) -> None:  # noqa: ARG001 (stop_signals' callback)
        stopping.set()
        with lock:
            if child is not None and child.poll() is None:
                child.send_signal(signum)

    with stopsignals.stop_signals(on_signal):  # every signal goes to on_signal, the 2nd too
        while True:
            with lock:
                child = subprocess.Popen(args, env=env, close_fds=False, process_group=0)
            if stopping.is_set():  # a signal that came before the child existed
                child.terminate()
            code = child.wait()
            if stopping.is_set() and code == RESTART:
                return 0  # a restart was waiting for a job when SIGTERM came: a plain stop
            if code != RESTART or stopping.is_set():
                return code if code >= 0 else 128 - code  # killed by a signal: as a shell says
            stdout.write("sqlq_worker --reload: code changed, starting the worker again")
            stdout.flush()


def run_child(worker: Worker) -> int:
    """Run ``worker`` (not --burst) in the main thread while Django's file watcher runs in
    another; a change stops the worker gracefully. Returns RESTART after a change, 0 after
    SIGTERM/SIGINT (or once the parent is gone: see ``_watch_parent``)."""
    changed = threading.Event()

    def restart(path: object) -> None:
        worker.stop()  # what SIGTERM does: claim nothing more, finish the running jobs
        logger.info(
            "Worker %s: %s changed: restarting once the running jobs are done",
            worker.worker_id,
            path,
        )

    reloader = _watch(changed, restart)
    orphaned = _watch_parent(worker.stop)
    logger.info(
        "Worker %s: watching for file changes with %s (--reload: for development)",
        worker.worker_id,
        type(reloader).__name__,
    )
    try:
        try:
            # check_errors: the file of an exception at start is watched too (a syntax error
            # in a module that was never imported whole).
            autoreload.check_errors(worker.run)()
        except WorkerError:
            raise  # the database, not the code: as without --reload
        except Exception:
            if changed.is_set():
                raise
            logger.error(
                "Worker %s could not start; fix the code and save, it starts again:\n%s",
                worker.worker_id,
                traceback.format_exc(),
            )
            _wait_for(changed, orphaned)
    finally:
        reloader.stop()
    return RESTART if changed.is_set() and not orphaned.is_set() else 0


def wait_for_change() -> int:
    """The child could not start (the exception being handled: a syntax error in a
    ``jobs.py`` found by the system checks, say) and has said so: wait for a change to a
    watched file (RESTART) or for SIGTERM/SIGINT (0), as runserver does."""
    changed = threading.Event()
    reloader = _watch(changed, lambda _path: None)
    orphaned = _watch_parent(lambda: None)
    try:
        _wait_for(changed, orphaned)
    finally:
        reloader.stop()
    return RESTART if changed.is_set() else 0


def _watch(changed: threading.Event, on_change: Callable[[object], None]) -> Any:
    """Start Django's file watcher in a thread; at the first change that no receiver of
    ``file_changed`` handles, set ``changed``, stop watching and call ``on_change(path)``.
    Returns the reloader (to stop it)."""
    reloader = autoreload.get_reloader()

    def notify_file_changed(path: object) -> None:
        # BaseReloader.notify_file_changed, with a graceful restart in place of
        # trigger_reload() (sys.exit(3), which would only end this thread): a change that a
        # receiver of file_changed handles (templates, translations) restarts nothing.
        results = autoreload.file_changed.send(sender=reloader, file_path=path)
        if any(result for _, result in results) or changed.is_set():
            return
        changed.set()
        reloader.stop()
        on_change(path)

    reloader.notify_file_changed = notify_file_changed  # type: ignore[method-assign]
    watcher = threading.Thread(
        target=reloader.run, args=(threading.main_thread(),), name="sqlq-reload", daemon=True
    )
    watcher.start()
    return reloader


def _watch_parent(stop: Callable[[], None]) -> threading.Event:
    """The watching parent killed outright (SIGKILL: an IDE's stop button, a closed
    terminal) cannot pass a signal on: the child sees its parent change and stops as at
    SIGTERM, rather than run on unsupervised. Returns the event set when that happens."""
    parent = os.getppid()
    orphaned = threading.Event()

    def poll() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL)
        orphaned.set()
        logger.warning("sqlq_worker --reload: the watching process is gone: stopping")
        stop()

    threading.Thread(target=poll, name="sqlq-reload-parent", daemon=True).start()
    return orphaned


def _wait_for(changed: threading.Event, orphaned: threading.Event) -> None:
    """Wait for a file change, for SIGTERM/SIGINT, or for the parent to be gone."""
    stop = threading.Event()

    def on_signal(signum: int, count: int) -> None:  # noqa: ARG001 (stop_signals' callback)
        stop.set()

    with stopsignals.stop_signals(on_signal):
        while not (changed.is_set() or stop.is_set() or orphaned.is_set()):
            stop.wait(0.2)
    if stop.is_set() or orphaned.is_set():
        changed.clear()
