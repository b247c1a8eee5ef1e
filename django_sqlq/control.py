"""The control of one running job: its cancel flag and the progress its handler reports.

The worker makes one :class:`JobControl` per attempt; the handler reaches it through its
``JobContext`` (``cancel_requested``, ``check_cancelled()``, ``set_progress()``). Nothing
here touches the database: the worker's job-control service
(``django_sqlq.worker.maintenance.jobcontrols``) reads the cancel requests and writes the
progress (twice and once a second), in a thread of its own.
"""

from __future__ import annotations

import contextlib
import math
import numbers
import threading
from collections.abc import Callable
from typing import NamedTuple

from django_sqlq.exceptions import JobCancelled

#: The longest progress message stored; a longer one is cut to this length (ending "…").
MAX_PROGRESS_MESSAGE = 255


class Progress(NamedTuple):
    fraction: float
    message: str


def check_progress(fraction: object, message: object) -> Progress:
    """``(fraction, message)`` as stored, or TypeError/ValueError saying what is wrong."""
    if isinstance(fraction, bool) or not isinstance(fraction, numbers.Real):
        raise TypeError(
            f"set_progress() takes a fraction from 0 to 1 (a float), got {fraction!r}."
        )
    try:
        value = float(fraction)
    except OverflowError:  # an int too big for a float: out of range all the same
        value = math.inf
    if math.isnan(value) or not 0.0 <= value <= 1.0:
        raise ValueError(
            f"set_progress() takes a fraction from 0 to 1 (0.4 for 40%), got {fraction!r}."
        )
    if not isinstance(message, str):
        raise TypeError(f"set_progress()'s message must be a str, got {type(message).__name__}.")
    # What a text column refuses (NUL on PostgreSQL, lone surrogates) is spelled out.
    text = message.replace("\x00", "\\x00")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    if len(text) > MAX_PROGRESS_MESSAGE:
        text = text[: MAX_PROGRESS_MESSAGE - 1] + "…"
    return Progress(value, text)


# Guards the cancel callbacks of every JobControl: registering one (an async handler starts)
# and requesting a cancel are rare, so one lock serves all, and making a JobControl (once per
# job, on the worker's hot path) allocates none.
_callbacks_lock = threading.Lock()


class JobControl:
    """One attempt's cancel flag and unwritten progress; shared by the runner thread (the
    handler) and the worker's job-control service.

    Thread-safe without a lock of its own: the handler only replaces ``_progress`` (one
    attribute store), and the service writes what it reads unless it already wrote that
    very object, so a report made while the service reads is written at its next turn."""

    __slots__ = (
        "_on_cancel",
        "_progress",
        "_written",
        "attempt",
        "cancelled",
        "continuation",
        "job_id",
        "steps",
    )

    def __init__(self, job_id: int, attempt: int) -> None:
        self.job_id = job_id
        self.attempt = attempt
        self.cancelled = False  # set once, by the service (request_cancel)
        self._progress: Progress | None = None  # the last report
        self._written: Progress | None = None  # the last report the service took
        self._on_cancel: list[Callable[[], object]] | None = None
        # The chain's next step (django_sqlq.workflows.Continuation), set by the handler's
        # context.continue_with() and written with the completion.
        self.continuation: object | None = None
        # The attempt's durable steps (django_sqlq.steps.Steps), made at its first step.
        self.steps: object | None = None

    # -- the handler's side ---------------------------------------------------------------

    def set_progress(self, fraction: float, message: str = "") -> None:
        self._progress = check_progress(fraction, message)

    def check_cancelled(self) -> None:
        if self.cancelled:
            raise JobCancelled(f"Job id={self.job_id} was cancelled while it ran.")

    # -- the worker's side ----------------------------------------------------------------

    @property
    def has_progress(self) -> bool:
        """Whether progress was reported and not taken yet."""
        return self._progress is not self._written

    def take_progress(self) -> Progress | None:
        """The last report, if the service has not taken it yet (it writes it)."""
        progress = self._progress
        if progress is self._written:
            return None
        self._written = progress
        return progress

    def on_cancel(self, callback: Callable[[], object]) -> Callable[[], None]:
        """Call ``callback`` (from the service's thread) when a cancel is requested; at once
        if it already was. Returns a function that unregisters it."""
        with _callbacks_lock:
            already = self.cancelled
            if not already:
                if self._on_cancel is None:
                    self._on_cancel = []
                self._on_cancel.append(callback)
        if already:
            callback()

        def remove() -> None:
            with _callbacks_lock:
                if self._on_cancel is not None and callback in self._on_cancel:
                    self._on_cancel.remove(callback)

        return remove

    def request_cancel(self) -> bool:
        """Set the flag and run the callbacks (an async handler's task is cancelled).
        Returns False if it was already set."""
        with _callbacks_lock:
            if self.cancelled:
                return False
            self.cancelled = True
            callbacks, self._on_cancel = self._on_cancel or [], None
        for callback in callbacks:
            with contextlib.suppress(Exception):  # a loop closed meanwhile: nothing to stop
                callback()
        return True
