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
import signal
import socket
import sys
import time
import traceback
import types
from typing import Any

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

    def reap(*_: Any) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            exited = time.monotonic()
            status_path = children.pop(pid, None)
            if status_path is not None:
                tmp = f"{status_path}.tmp"
                with open(tmp, "w") as fh:
                    fh.write(f"{os.waitstatus_to_exitcode(status)} {exited!r}\n")
                os.replace(tmp, status_path)

    signal.signal(signal.SIGCHLD, reap)
    # SIGTERM stops the server (exit status 0): its reaped workers' CPU then counts in the
    # test run's own children's (the summary line of tests/conftest.py).
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(16)
    print("forkserver ready", flush=True)
    while True:
        conn, _ = server.accept()
        with conn:
            request = json.loads(_read_all(conn))
            sys.stdout.flush()
            sys.stderr.flush()
            # SIGCHLD held while the pid is recorded: a child that dies at once is reaped after.
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
            pid = os.fork()
            if pid == 0:
                server.close()
                conn.close()
                _become_worker(request, base_path)  # never returns
            children[pid] = request["status"]
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
            conn.sendall(f"{pid}\n".encode())


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


def _become_worker(request: dict[str, Any], base_path: list[str]) -> None:
    """The child: ``python ARGV`` (``-m MODULE ...``, ``-c CODE ...`` or ``SCRIPT ...``) as
    an interpreter started with this request's environment, directory and streams runs it."""
    code = 1
    try:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
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
        # Streams as a fresh interpreter makes them for files: stdout block-buffered, stderr
        # line-buffered.
        sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False))
        sys.stdout = io.TextIOWrapper(
            io.BufferedWriter(io.FileIO(1, "w", closefd=False)), encoding="utf-8"
        )
        sys.stderr = io.TextIOWrapper(
            io.BufferedWriter(io.FileIO(2, "w", closefd=False)),
            encoding="utf-8",
            errors="backslashreplace",
            line_buffering=True,
        )
        for name in ("stdin", "stdout", "stderr"):
            setattr(sys, f"__{name}__", getattr(sys, name))
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
