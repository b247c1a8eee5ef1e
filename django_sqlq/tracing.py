"""OpenTelemetry spans around enqueue and each run, when ``opentelemetry-api`` is installed.

- ``enqueue()``, ``bulk_enqueue()`` and the tasks backend write their jobs inside a
  ``send {queue}`` span (kind PRODUCER), and store that span's context in the job's
  ``trace`` column: the W3C ``traceparent`` (and ``tracestate``) as JSON text, through the
  globally configured propagator. Nothing is stored when no tracer provider records the span
  (the API alone, no SDK): the column stays NULL.
- The worker runs each attempt inside a ``process {queue}`` span (kind CONSUMER) whose
  parent is that context, and which also links to it, as OpenTelemetry's messaging semantic
  conventions ask: the request that enqueued the job and the job's run are one trace. The
  handler runs with the span current, so its own spans (database, HTTP) are its children.

Attributes follow the messaging conventions: ``messaging.system`` (``django_sqlq``),
``messaging.destination.name`` (the queue), ``messaging.operation.type`` and
``messaging.operation.name`` (``send`` / ``process``), ``messaging.message.id`` (the job id),
``messaging.batch.message_count`` (bulk enqueue); and ``django_sqlq.job.type``,
``django_sqlq.job.attempt``.

Without ``opentelemetry-api`` this module costs one failed import, once: ``ENABLED`` is
False and the callers skip it. With the API but no tracer provider configured (no SDK),
:func:`tracer` is None and the callers skip it too.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator, Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from django_sqlq.db.columns import ClaimedJob
    from django_sqlq.models import Job

try:
    from opentelemetry import propagate, trace
    from opentelemetry.trace import Link, SpanKind, Status, StatusCode
except ImportError:  # pragma: no cover - the optional extra is installed in the test venvs
    ENABLED = False
else:
    ENABLED = True

SYSTEM = "django_sqlq"
TRACER_NAME = "django_sqlq"
# The largest trace context stored: traceparent is 55 characters; tracestate is capped at
# 512 by W3C. Anything larger (a custom propagator's baggage) is not stored.
MAX_CONTEXT_CHARS = 2048


#: The tracer provider spans go to; None: OpenTelemetry's global one (the usual set-up:
#: ``trace.set_tracer_provider(...)`` at start-up). Tests set their own.
tracer_provider: Any = None


# How long the answer "no tracer provider is configured" is kept: get_tracer_provider()
# reads os.environ at each call (~2 us, a twentieth of a no-op job).
RECHECK_SECONDS = 1.0
_cached: tuple[Any, Any] | None = None  # (provider, its tracer)
_none_until = 0.0


def tracer() -> Any:
    """django_sqlq's tracer, or None when no span would record: OpenTelemetry is not
    installed, or no tracer provider is configured (the API's proxy or no-op provider;
    a provider set later is seen within ``RECHECK_SECONDS``). A span of the API alone costs
    ~20 us and records nothing: ``enqueue()`` and the worker skip it instead."""
    global _cached, _none_until
    if not ENABLED:
        return None
    if tracer_provider is not None:
        provider = tracer_provider
    else:
        if time.monotonic() < _none_until:
            return None
        provider = trace.get_tracer_provider()
        if isinstance(provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider)):
            _none_until = time.monotonic() + RECHECK_SECONDS
            return None
    cached = _cached
    if cached is not None and cached[0] is provider:
        return cached[1]
    found = provider.get_tracer(TRACER_NAME, _version())
    _cached = (provider, found)
    return found


def _version() -> str:
    """django_sqlq's version, from the installed package's metadata (as ``__version__``)."""
    try:
        return version("django-sqlq")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "0+unknown"


@contextlib.contextmanager
def sending(tracer: Any, jobs: Sequence[Job], queue: str, type_name: str) -> Iterator[None]:
    """Around the write of ``jobs`` (one enqueue call): a ``send`` span whose context each
    job carries in ``job.trace``."""
    attributes: dict[str, Any] = {
        "messaging.system": SYSTEM,
        "messaging.destination.name": queue,
        "messaging.operation.type": "send",
        "messaging.operation.name": "send",
        "django_sqlq.job.type": type_name,
    }
    if len(jobs) > 1:
        attributes["messaging.batch.message_count"] = len(jobs)
    with tracer.start_as_current_span(
        f"send {queue}", kind=SpanKind.PRODUCER, attributes=attributes
    ) as span:
        carrier: dict[str, str] = {}
        propagate.inject(carrier)
        text = json.dumps(carrier, separators=(",", ":")) if carrier else None
        if text is not None and len(text) <= MAX_CONTEXT_CHARS:
            for job in jobs:
                job.trace = text
        yield
        if len(jobs) == 1 and jobs[0].pk is not None:
            span.set_attribute("messaging.message.id", str(jobs[0].pk))


def trace_id(stored: str | None) -> str | None:
    """The trace id (32 hex digits) in a job's stored ``trace``, or None. Needs no
    OpenTelemetry: the admin's job page shows it, to look the trace up."""
    if not stored:
        return None
    try:
        carrier = json.loads(stored)
    except ValueError:
        return None
    parent = carrier.get("traceparent") if isinstance(carrier, dict) else None
    parts = parent.split("-") if isinstance(parent, str) else []
    if len(parts) != 4 or len(parts[1]) != 32:
        return None
    try:
        int(parts[1], 16)
    except ValueError:
        return None
    return parts[1].lower()


def _parent(job: ClaimedJob) -> Any:
    """The context stored with ``job``, or None (none stored, or unreadable)."""
    if not job.trace:
        return None
    try:
        carrier = json.loads(job.trace)
        if not isinstance(carrier, dict):
            return None
        return propagate.extract({str(k): str(v) for k, v in carrier.items()})
    except (ValueError, RecursionError):  # junk (JSON nested past the interpreter's limit)
        return None


@contextlib.contextmanager
def processing(tracer: Any, job: ClaimedJob) -> Iterator[Any]:
    """Around one attempt of ``job`` in the worker: a ``process`` span, current while the
    handler runs, child of (and linked to) the enqueuer's span. Yields the span, for
    :func:`failed`."""
    parent = _parent(job)
    links = []
    if parent is not None:
        linked = trace.get_current_span(parent).get_span_context()
        if linked.is_valid:
            links.append(Link(linked))
    with tracer.start_as_current_span(
        f"process {job.queue}",
        context=parent,
        kind=SpanKind.CONSUMER,
        links=links,
        attributes={
            "messaging.system": SYSTEM,
            "messaging.destination.name": job.queue,
            "messaging.operation.type": "process",
            "messaging.operation.name": "process",
            "messaging.message.id": str(job.id),
            "django_sqlq.job.type": job.type,
            "django_sqlq.job.attempt": job.attempts,
        },
    ) as span:
        yield span


def failed(span: Any, exception: BaseException | None, description: str) -> None:
    """Mark ``span`` as an attempt that failed."""
    if exception is not None:
        span.record_exception(exception)
    span.set_status(Status(StatusCode.ERROR, description))
