"""A fork server for the processes the tests start: ``sqlq_worker`` and other ``manage.py``
commands (``python -m MODULE``, ``python SCRIPT``, ``python -c CODE``).

Each is a real process of its own (its own connections, signals, exit status; kill -9 kills
it), running the command as a user's does. What it skips is the interpreter importing Django
again: about 0.6 s of CPU a start on these machines (0.9 s with coverage), and the process
tiers start hundreds of them on 2 cores. This server imports Django's modules once (never a
settings module, never django_sqlq nor the tests' code: those load in each child, from its
own environment), then forks a child per request: its environment, working directory,
``sys.path`` and standard streams set as a fresh interpreter's would be, then the module,
script or code run as the interpreter runs it, then the interpreter's exit (non-daemon
threads joined, atexit handlers) with the command's status.

A second saving: ``python -m django ...`` with one of the suite's own settings modules
(``tests.*``, which no test rewrites while it runs) is forked from a *zygote*, a child of
this server that took the request's environment and working directory, ran
``django.setup()`` (the apps, their models, the admin) and imported what a worker imports
next (the URLconf its system checks read, the metrics, the apps' ``jobs`` modules): a
``sqlq_worker --burst`` on an empty queue costs about 0.16 s of CPU forked from a zygote,
0.32 s forked from this server. One zygote per distinct environment, the six last used
kept; a zygote whose setup printed anything, raised or started a thread is refused, and
such requests are forked from this server as before, so that each process shows its own
setup's output.

What a fork cannot give is left to a real exec (``tests.forking.ForkServer.can_fork``
decides): ``--reload`` (the reloader re-executes the interpreter), interpreter options, or an
environment whose ``PYTHON*`` variables (other than PYTHONPATH) differ from the server's,
which the interpreter reads only at start. ``SQLQ_TEST_FORKSERVER=0`` execs every one.

The protocol, over a Unix socket: one JSON request per connection (the interpreter's
arguments, the environment, the working directory, the paths of the standard streams and of
a status file), answered with the child's pid. The server reaps its children and writes each
one's exit status (``Popen.returncode``'s convention: minus the signal's number when a signal
killed it) and the ``time.monotonic()`` of its exit to the request's status file.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
import select
import signal
import socket
import sys
import time
import traceback
import types
from pathlib import Path
from typing import Any

# Held while a process is forked, until the child has its own handlers: SIGCHLD (the child
# is recorded before it is reaped) and SIGTERM (the server's handler stops the server).
HELD = {signal.SIGCHLD, signal.SIGTERM}

# Imported once here: what every worker imports before its settings (django.setup(), the
# admin, the database drivers). None of them reads a setting at import.
PRELOAD = (
    "asyncio",
    "json",
    "django.db.models",
    "django.http",
    "django.urls",
    "django.forms",
    "django.template",
    "django.template.defaultfilters",
    "django.template.defaulttags",
    "django.core.management",
    "django.core.checks",
    "django.views.generic",
    "django.db.backends.sqlite3.base",
    "django.db.backends.postgresql.base",
    "django.db.backends.mysql.base",
)


def main(path: str) -> None:
    for name in PRELOAD:
        with contextlib.suppress(ImportError):  # a driver this venv does not have
            importlib.import_module(name)
    base_path = _base_sys_path()
    children: dict[int, str] = {}
    signal.signal(signal.SIGCHLD, _reaper(children))
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    # Bound under another name, renamed once it listens: the client waits for the socket's
    # path, and a connect between bind() and listen() is refused.
    server.bind(f"{path}.binding")
    server.listen(16)
    os.rename(f"{path}.binding", path)
    zygotes = _Zygotes(os.path.dirname(path), base_path)

    def stop(*_: Any) -> None:
        zygotes.stop_all()
        made, refused = zygotes.made - len(zygotes.refused), len(zygotes.refused)
        print(f"zygotes: {made} made, {refused} refused, {zygotes.served} forked", flush=True)
        os._exit(0)

    # SIGTERM stops the server (exit status 0) and its zygotes, which wait for their workers:
    # the CPU of all of them then counts in the test run's own children's (the summary line
    # of tests/conftest.py).
    signal.signal(signal.SIGTERM, stop)
    print("forkserver ready", flush=True)
    while True:
        conn, _ = server.accept()
        with conn:
            request = json.loads(_read_all(conn))
            pid = zygotes.spawn(request, close=(server, conn))
            if pid is None:
                pid = _fork(request, children, base_path, close=(server, conn))
            conn.sendall(f"{pid}\n".encode())


def _fork(
    request: dict[str, Any],
    children: dict[int, str],
    base_path: list[str],
    *,
    close: tuple[socket.socket, ...],
    settled: bool = False,
) -> int:
    """Fork the request's process; record where its exit status goes."""
    pid = _fork_holding(close)
    if pid == 0:
        _become_worker(request, base_path, settled=settled)  # never returns
    children[pid] = request["status"]
    signal.pthread_sigmask(signal.SIG_UNBLOCK, HELD)
    return pid


def _fork_holding(close: tuple[socket.socket, ...]) -> int:
    """``os.fork()`` with HELD blocked, which the parent unblocks once it has recorded the
    child (a child that dies at once is reaped after) and the child once it has its own
    handlers; in the child, the sockets of ``close`` closed."""
    sys.stdout.flush()
    sys.stderr.flush()
    signal.pthread_sigmask(signal.SIG_BLOCK, HELD)
    pid = os.fork()
    if pid == 0:
        for sock in close:
            sock.close()
    return pid


def _reaper(children: dict[int, str]) -> Any:
    """A SIGCHLD handler: reap every child that exited, write its status file."""

    def reap(*_: Any) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            _write_status(children.pop(pid, None), status)

    return reap


def _write_status(status_path: str | None, status: int) -> None:
    if status_path is not None:
        exited = time.monotonic()
        tmp = f"{status_path}.tmp"
        with open(tmp, "w") as fh:
            fh.write(f"{os.waitstatus_to_exitcode(status)} {exited!r}\n")
        os.replace(tmp, status_path)


# -- zygotes: Django already set up --------------------------------------------------------

# The settings modules a zygote may set up: the suite's own (tests.*), which no test rewrites
# while it runs. A project a test writes to disk is imported fresh by each of its processes.
SETTLED_SETTINGS = "tests."
ZYGOTES = 6  # live at once; the least recently used one is retired past that


class _Zygotes:
    """The server's zygotes: for ``python -m django ...`` with the suite's settings, a child
    that has run ``django.setup()`` with the request's environment and working directory
    (about half of a worker's start on these machines: the apps, their models, the admin)
    forks the process instead, so that its setup is not run again. One zygote per distinct
    environment; a request whose setup printed anything, raised, or started a thread is
    served as before (forked from this server) so that the process shows it as its own."""

    def __init__(self, folder: str, base_path: list[str]) -> None:
        self.folder = folder
        self.base_path = base_path
        self.live: dict[str, tuple[int, str]] = {}  # key -> (pid, socket), oldest first
        self.refused: set[str] = set()
        self.made = 0
        self.served = 0  # processes forked by a zygote

    @staticmethod
    def key(request: dict[str, Any]) -> str | None:
        argv, env = request["python"], request["env"]
        if argv[:2] != ["-m", "django"] or request["cwd"] != os.getcwd():
            return None
        if not env.get("DJANGO_SETTINGS_MODULE", "").startswith(SETTLED_SETTINGS):
            return None
        return json.dumps(sorted(env.items()))

    def spawn(self, request: dict[str, Any], *, close: tuple[socket.socket, ...]) -> int | None:
        """The pid of the request's process, forked by its zygote; None: no zygote for it."""
        key = self.key(request)
        if key is None or key in self.refused:
            return None
        if key not in self.live and not self._make(key, request, close):
            self.refused.add(key)
            return None
        self.live[key] = self.live.pop(key)  # the most recently used last
        zygote, path = self.live[key]
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as zconn:
                zconn.settimeout(30)
                zconn.connect(path)
                zconn.sendall(json.dumps(request).encode() + b"\n")
                pid = int(_read_all(zconn))
        except (OSError, ValueError):
            print(f"zygote {zygote} did not answer; retired", flush=True)
            self._retire(key)
            self.refused.add(key)
            return None
        self.served += 1
        return pid

    def _make(self, key: str, request: dict[str, Any], close: tuple[socket.socket, ...]) -> bool:
        self.made += 1
        path = os.path.join(self.folder, f"zygote-{self.made}")
        read, write = os.pipe()
        pid = _fork_holding(close)
        if pid == 0:
            os.close(read)
            _zygote(request, self.base_path, path, write)  # never returns
        signal.pthread_sigmask(signal.SIG_UNBLOCK, HELD)
        os.close(write)
        with os.fdopen(read, "rb") as answer_fh:
            ready, _, _ = select.select([answer_fh], [], [], 120)
            answer = answer_fh.read().decode(errors="replace") if ready else "no answer in 120 s"
        if answer != "ok":
            print(f"zygote {pid} refused ({answer.strip()}): forking from the server", flush=True)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            return False
        print(f"zygote {pid} ready for {request['env']['DJANGO_SETTINGS_MODULE']}", flush=True)
        self.live[key] = (pid, path)
        while len(self.live) > ZYGOTES:
            self._retire(next(iter(self.live)))
        return True

    def _retire(self, key: str) -> None:
        """SIGTERM: the zygote takes no more requests, waits for its processes, then exits
        (this server reaps it)."""
        pid, _ = self.live.pop(key)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)

    def stop_all(self) -> None:
        pids = [pid for pid, _ in self.live.values()]
        for key in list(self.live):
            self._retire(key)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        deadline = time.monotonic() + 8
        for pid in pids:
            # Its exit, or the deadline: a pidfd becomes readable when the process ends.
            try:
                pidfd = os.pidfd_open(pid)
            except ProcessLookupError:  # reaped already
                continue
            try:
                select.select([pidfd], [], [], max(0.0, deadline - time.monotonic()))
            finally:
                os.close(pidfd)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)


def _zygote(request: dict[str, Any], base_path: list[str], path: str, ready_fd: int) -> None:
    """A zygote: the request's environment and directory, ``django.setup()`` (its output, if
    any, kept in a file: any output refuses the zygote), then a fork per request."""
    answer = "ok"
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, HELD)
        os.environ.clear()
        os.environ.update(request["env"])
        own = [os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        sys.path[:] = [os.getcwd(), *own, *base_path]
        setup_output = f"{path}.setup-output"
        server_log = os.dup(2)
        _redirect(0, os.devnull, os.O_RDONLY)
        _redirect(1, setup_output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(1, 2)
        _fresh_streams()
        import django

        django.setup()
        # What every worker then imports: the commands' names (cached), the worker's command,
        # the URLconf (the system checks read it), the metrics and the apps' jobs modules.
        from django.conf import settings
        from django.core.management import get_commands

        get_commands()
        importlib.import_module("django_sqlq.management.commands.sqlq_worker")
        if getattr(settings, "ROOT_URLCONF", None):
            importlib.import_module(settings.ROOT_URLCONF)
        importlib.import_module("django_sqlq.metrics")
        importlib.import_module("django_sqlq.registry").autodiscover()
        sys.stdout.flush()
        sys.stderr.flush()
        import threading

        if os.path.getsize(setup_output):
            answer = "django.setup() printed: " + Path(setup_output).read_text()[:300]
        elif threading.active_count() != 1:
            answer = f"django.setup() started threads: {threading.enumerate()}"
    except BaseException:
        answer = "django.setup() raised: " + traceback.format_exc(limit=3)[-300:]
    if answer != "ok":
        os.write(ready_fd, answer.encode())
        os._exit(1)
    # Set up once, as a fresh interpreter's process is: the command's own django.setup()
    # (execute_from_command_line calls it) must not configure logging a second time.
    setattr(django, "setup", lambda set_prefix=True: None)  # noqa: ARG005, B010
    os.dup2(server_log, 1)  # what the zygote itself may print, in the server's log
    os.dup2(server_log, 2)
    os.close(server_log)

    children: dict[int, str] = {}
    signal.signal(signal.SIGCHLD, _reaper(children))
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(16)
    os.write(ready_fd, b"ok")
    os.close(ready_fd)
    signal.signal(signal.SIGTERM, lambda *_: listener.shutdown(socket.SHUT_RDWR))
    while True:
        try:
            conn, _ = listener.accept()
        except OSError:
            break
        with conn:
            request = json.loads(_read_all(conn))
            pid = _fork(request, children, base_path, close=(listener, conn), settled=True)
            conn.sendall(f"{pid}\n".encode())
    # Retired: wait for the processes forked here, writing each one's status, then exit.
    listener.close()
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    while children:
        pid, status = os.waitpid(-1, 0)
        _write_status(children.pop(pid, None), status)
    _finish(0)


def _read_all(conn: socket.socket) -> bytes:
    chunks = []
    while chunk := conn.recv(65536):
        chunks.append(chunk)
        if chunk.endswith(b"\n"):
            break
    return b"".join(chunks)


def _base_sys_path() -> list[str]:
    """sys.path without what PYTHONPATH and the working directory added (each worker adds
    its own)."""
    added = {os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p}
    added.add(os.getcwd())
    return [p for p in sys.path if p and os.path.abspath(p) not in added]


def _become_worker(request: dict[str, Any], base_path: list[str], *, settled: bool) -> None:
    """The child: ``python ARGV`` (``-m MODULE ...``, ``-c CODE ...`` or ``SCRIPT ...``) as
    an interpreter started with this request's environment, directory and streams runs it.
    ``settled``: forked by a zygote, whose environment (as its settings left it), directory
    and stream objects (which its logging writes to) are the request's already."""
    code = 1
    try:
        # The handlers of the server (or zygote) first, then the signals held across the
        # fork: a SIGTERM sent at once kills this process as it would a fresh one.
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, HELD)
        if not settled:
            os.chdir(request["cwd"])
            os.environ.clear()
            os.environ.update(request["env"])
        _redirect(0, request.get("stdin") or os.devnull, os.O_RDONLY)
        out_flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
        _redirect(1, request["stdout"], out_flags)
        if request["stderr"] == request["stdout"]:
            os.dup2(1, 2)
        else:
            _redirect(2, request["stderr"], out_flags)
        if not settled:
            _fresh_streams()
        argv = request["python"]
        # sys.path as the interpreter makes it: the script's folder (or, for -m and -c, the
        # working directory), then PYTHONPATH's entries, then the installation's.
        own = [os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        import runpy

        try:
            if argv[0] == "-m":
                sys.path[:] = [os.getcwd(), *own, *base_path]
                sys.argv = ["-m", *argv[2:]]  # run_module puts the module's file first
                runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
            elif argv[0] == "-c":
                sys.path[:] = ["", *own, *base_path]
                sys.argv = ["-c", *argv[2:]]
                main = types.ModuleType("__main__")
                sys.modules["__main__"] = main
                exec(compile(argv[1], "<string>", "exec"), main.__dict__)
            else:
                script = os.path.abspath(argv[0])
                sys.path[:] = [os.path.dirname(script), *own, *base_path]
                sys.argv = list(argv)
                runpy.run_path(script, run_name="__main__")
            code = 0
        except SystemExit as exit_:
            code = _exit_code(exit_.code)
    except BaseException:
        traceback.print_exc()
        code = 1
    _finish(code)


# The server's own streams as its interpreter made them: their encodings and error handlers
# are what a fresh interpreter with this environment (its locale, PYTHONIOENCODING) gives.
_STREAMS = {name: getattr(sys, f"__{name}__") for name in ("stdin", "stdout", "stderr")}


def _fresh_streams() -> None:
    """sys.stdin, stdout and stderr on file descriptors 0-2, as a fresh interpreter makes
    them for files: buffered, stderr line-buffered, the interpreter's encodings and error
    handlers (``surrogateescape`` for stdin and stdout under a C or POSIX locale)."""

    def text(name: str, raw: io.FileIO, buffered: Any, **kwargs: Any) -> io.TextIOWrapper:
        model = _STREAMS[name]
        encoding = getattr(model, "encoding", None) or "utf-8"
        errors = getattr(model, "errors", None) or "strict"
        return io.TextIOWrapper(buffered(raw), encoding=encoding, errors=errors, **kwargs)

    sys.stdin = text("stdin", io.FileIO(0, "r", closefd=False), io.BufferedReader)
    sys.stdout = text("stdout", io.FileIO(1, "w", closefd=False), io.BufferedWriter)
    sys.stderr = text(
        "stderr", io.FileIO(2, "w", closefd=False), io.BufferedWriter, line_buffering=True
    )
    for name in ("stdin", "stdout", "stderr"):
        setattr(sys, f"__{name}__", getattr(sys, name))


def _redirect(fd: int, path: str, flags: int) -> None:
    opened = os.open(path, flags, 0o644)
    os.dup2(opened, fd)
    os.close(opened)


def _exit_code(value: object) -> int:
    if value is None:
        return 0
    if isinstance(value, int):
        return value
    print(value, file=sys.stderr)
    return 1


def _finish(code: int) -> None:
    """What the interpreter does at exit: join non-daemon threads, run atexit, flush."""
    import atexit
    import threading

    with contextlib.suppress(BaseException):
        threading._shutdown()  # type: ignore[attr-defined]
    with contextlib.suppress(BaseException):
        atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(BaseException):
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    main(sys.argv[1])
