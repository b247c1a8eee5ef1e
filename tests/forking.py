"""The tests' side of the fork server (``tests/forkserver.py``, which says what it is for):
:class:`ForkServer` starts it and asks it for processes, :class:`ForkedProcess` is what the
tests use of ``subprocess.Popen`` for one, :func:`run_python` is ``subprocess.run`` for one."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, overload

ROOT = Path(__file__).resolve().parent.parent


def _wait_for(condition: Callable[[], object], timeout: float, interval: float = 0.02) -> None:
    """tests.conftest.wait_for (imported here: tests.conftest imports this module)."""
    from tests.conftest import wait_for

    wait_for(condition, timeout, interval)


class ForkServer:
    """The client of ``tests/forkserver.py``: started at the first worker a test run starts,
    stopped at its end (:func:`pytest_unconfigure`)."""

    _started: ForkServer | None = None
    forked = 0  # the processes the servers of this test run forked
    zygotes = ""  # what the last one stopped said of its zygotes (tests/forkserver.py)
    refusals: list[str] = []  # and why it refused any

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="sqlq-forkserver-"))
        self.socket = str(self.dir / "socket")
        self.env = {**os.environ, "PYTHONPATH": _with_root(os.environ.get("PYTHONPATH", ""))}
        self.env.pop("PYTEST_CURRENT_TEST", None)
        if os.environ.get("SQLQ_TEST_COVERAGE_WORKERS", "1") == "0":
            # Its processes unmeasured (scripts/test: the runs of the engines other than the
            # first, whose worker processes run the lines the first engine's measure):
            # coverage doubled a forked worker's CPU.
            for name in ("COVERAGE_PROCESS_CONFIG", "COVERAGE_PROCESS_START"):
                self.env.pop(name, None)
        self._log = (self.dir / "server.log").open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.forkserver", self.socket],
            cwd=ROOT,
            env=self.env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        self._count = 0
        self._lock = threading.Lock()
        _wait_for(lambda: self._alive() and os.path.exists(self.socket), 30)

    def _alive(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(
                "the fork server exited:\n" + (self.dir / "server.log").read_text()
            )
        return True

    @classmethod
    def get(cls) -> ForkServer:
        if cls._started is None:
            cls._started = cls()
        return cls._started

    @classmethod
    def stop_started(cls) -> None:
        """Stop the server if one was started (reaped, its workers' CPU counts in this
        process's children's)."""
        server, cls._started = cls._started, None
        if server is not None:
            server.proc.send_signal(signal.SIGTERM)
            server.proc.wait(20)  # its zygotes wait up to 8 s for their processes
            server._log.close()
            log = (server.dir / "server.log").read_text(errors="replace")
            said = [line for line in log.splitlines() if line.startswith("zygotes: ")]
            cls.zygotes = said[-1].removeprefix("zygotes: ") if said else ""
            # Why a zygote was refused (its setup printed, raised or started a thread).
            cls.refusals = [line for line in log.splitlines() if " refused (" in line]
            shutil.rmtree(server.dir, ignore_errors=True)  # its socket, log, status files

    def can_fork(self, argv: list[str], env: dict[str, str]) -> bool:
        """What a fork gives as an exec would: not ``--reload`` (which execs the interpreter
        again), not a ``PYTHON*`` variable the interpreter reads at start set otherwise."""
        if "--reload" in argv or (argv[0].startswith("-") and argv[0] not in ("-m", "-c")):
            return False
        keys = {k for k in (*env, *self.env) if k.startswith("PYTHON") and k != "PYTHONPATH"}
        return all(env.get(k) == self.env.get(k) for k in keys)

    def spawn(
        self,
        argv: list[str],
        env: dict[str, str],
        *,
        cwd: Path = ROOT,
        stdout: Path,
        stderr: Path,
        stdin: Path | None = None,
    ) -> ForkedProcess:
        """``python ARGV`` (``-m MODULE ...``, ``-c CODE ...``, ``SCRIPT ...``), forked."""
        with self._lock:
            self._count += 1
            ForkServer.forked += 1
            status = self.dir / f"status-{self._count}"
        request = {
            "python": argv,
            "env": env,
            "cwd": str(cwd),
            "stdout": str(stdout),
            "stderr": str(stderr),
            "stdin": str(stdin) if stdin else None,
            "status": str(status),
        }
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(30)
            conn.connect(self.socket)
            conn.sendall(json.dumps(request).encode() + b"\n")
            answer = b""
            while not answer.endswith(b"\n"):
                chunk = conn.recv(64)
                if not chunk:
                    raise AssertionError("the fork server closed the connection")
                answer += chunk
        return ForkedProcess(int(answer), status)


def forking() -> ForkServer | None:
    """The fork server, unless SQLQ_TEST_FORKSERVER=0."""
    return ForkServer.get() if os.environ.get("SQLQ_TEST_FORKSERVER", "1") != "0" else None


@overload
def run_python(
    argv: list[str],
    *,
    env: dict[str, str],
    cwd: Path | str = ...,
    input: str | None = ...,
    timeout: float = ...,
) -> subprocess.CompletedProcess[str]: ...


@overload
def run_python(
    argv: list[str],
    *,
    env: dict[str, str],
    cwd: Path | str = ...,
    input: bytes,
    timeout: float = ...,
) -> subprocess.CompletedProcess[bytes]: ...


def run_python(
    argv: list[str],
    *,
    env: dict[str, str],
    cwd: Path | str = ROOT,
    input: str | bytes | None = None,
    timeout: float = 60,
) -> subprocess.CompletedProcess[Any]:
    """``subprocess.run([sys.executable, *argv], capture_output=True, ...)``, the process
    forked by the fork server where it can be (tests/forkserver.py). Text in and out, or
    bytes when ``input`` is bytes."""
    text = not isinstance(input, bytes)
    server = forking()
    if server is None or not server.can_fork(argv, env):
        return subprocess.run(
            [sys.executable, *argv],
            cwd=cwd,
            env=env,
            input=input,
            capture_output=True,
            text=text,
            timeout=timeout,
            check=False,
        )
    with tempfile.TemporaryDirectory(prefix="sqlq-run-") as scratch:
        files = Path(scratch)
        stdin = None
        if input is not None:
            stdin = files / "stdin"
            stdin.write_bytes(input if isinstance(input, bytes) else input.encode())
        (files / "stdout").touch()
        (files / "stderr").touch()
        proc = server.spawn(
            argv,
            env,
            cwd=Path(cwd),
            stdout=files / "stdout",
            stderr=files / "stderr",
            stdin=stdin,
        )
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
            raise subprocess.TimeoutExpired([sys.executable, *argv], timeout) from None
        out, err = (files / "stdout").read_bytes(), (files / "stderr").read_bytes()
        if text:
            return subprocess.CompletedProcess(
                [sys.executable, *argv],
                code,
                out.decode(errors="replace"),
                err.decode(errors="replace"),
            )
        return subprocess.CompletedProcess([sys.executable, *argv], code, out, err)


class ForkedProcess:
    """What the tests use of ``subprocess.Popen``, for a worker the fork server started (its
    parent is the server, which writes its exit status to a file)."""

    def __init__(self, pid: int, status: Path) -> None:
        self.pid = pid
        self._status = status
        self.returncode: int | None = None
        self.exited_at: float | None = None  # time.monotonic() of its exit

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                code, exited = self._status.read_text().split()
            except (OSError, ValueError):
                return None
            self.returncode, self.exited_at = int(code), float(exited)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        try:
            # Its exit is read from the status file the server writes when it reaps it.
            _wait_for(lambda: self.poll() is not None, timeout or 24 * 3600, interval=0.002)
        except AssertionError:
            raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout or 0) from None
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def _with_root(pythonpath: str) -> str:
    return str(ROOT) + os.pathsep + pythonpath
