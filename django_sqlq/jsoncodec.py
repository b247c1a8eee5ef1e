"""JSON in and out of the jobs table: the one place that encodes payloads and results (with
the checks that make a bad value fail in the caller, not in the database) and decodes what
raw SQL reads back."""

from __future__ import annotations

import json
import re
from typing import Any

from django_sqlq.db import json_depth_limit, json_size_limit
from django_sqlq.exceptions import PayloadError

__all__ = ["decode_json", "encode_json", "parse_json", "too_deep"]

_ENCODER = json.JSONEncoder(allow_nan=False, separators=(",", ":"))
_DECODE = json.JSONDecoder().decode

# \u escapes that JSON text may hold but PostgreSQL's jsonb refuses ("unsupported Unicode
# escape sequence"): NUL, and half a surrogate pair (a whole pair, group 2, is fine). Only
# an escape after an even number of backslashes is one (``\\u0000`` is the text "\u0000").
_UNSTORABLE_ESCAPE = re.compile(
    r"(?<!\\)(?:\\\\)*\\u(0000|(d[89ab][0-9a-f]{2}\\ud[c-f][0-9a-f]{2})|d[89a-f][0-9a-f]{2})",
    re.IGNORECASE,
)


#: The deepest nesting of arrays and objects stored, on SQLite and PostgreSQL: SQLite's JSON
#: functions (the column's CHECK (JSON_VALID(...))) refuse text nested deeper than 2,000 levels
#: (1,000 from SQLite 3.45), and Python's encoder may or may not reach its recursion limit
#: first (3.11 does, 3.13 does not). MariaDB's JSON_VALID refuses more than 31 levels: the
#: limit is the queue database's (``django_sqlq.db.json_depth_limit``).
MAX_DEPTH = 1000
#: The least of the engines' limits: text with fewer brackets is never too deep anywhere.
MIN_ENGINE_DEPTH = 31

#: No engine carries less JSON in a statement than this (bytes): only longer text asks the
#: queue database for its limit (``django_sqlq.db.json_size_limit``).
MIN_ENGINE_BYTES = 64 * 1024


def _depth(text: str) -> int:
    """How deeply the JSON ``text`` nests arrays and objects (brackets inside strings are
    skipped)."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def encode_json(value: Any, *, what: str = "payload", limit: int | None = None) -> str:
    """``value`` as JSON text, or a PayloadError that says what JSON cannot hold."""
    try:
        text = _ENCODER.encode(value)
    except (TypeError, ValueError) as exc:
        raise PayloadError(f"The {what} cannot be stored as JSON: {exc}.") from exc
    except RecursionError as exc:
        raise too_deep(what) from exc
    # Only text with that many brackets can nest that deep: the walk is for those alone.
    brackets = text.count("[") + text.count("{")
    if brackets > MIN_ENGINE_DEPTH:
        deepest = json_depth_limit(MAX_DEPTH)
        if brackets > deepest and _depth(text) > deepest:
            raise too_deep(what, deepest)
    if "\\u" in text:  # ensure_ascii: every non-ASCII character is a \u escape
        for match in _UNSTORABLE_ESCAPE.finditer(text):
            if match.group(2) is None:
                kind = "a NUL character" if match.group(1) == "0000" else "a lone surrogate"
                raise PayloadError(
                    f"The {what} cannot be stored as JSON: it holds {kind} (\\u{match.group(1)}), "
                    "which PostgreSQL's jsonb refuses; django_sqlq refuses it on every engine."
                )
    if limit is not None:
        _check_size(text, what, limit)
    return text


def _check_size(text: str, what: str, limit: int) -> None:
    """PayloadError if ``text`` is longer than ``limit`` bytes (SQLQ["MAX_PAYLOAD_BYTES"]),
    or than one statement of the queue database carries."""
    if len(text) * 4 > limit and len(text.encode()) > limit:
        raise PayloadError(
            f"The {what} is {len(text.encode())} bytes as JSON, over the limit of {limit} "
            "bytes (SQLQ['MAX_PAYLOAD_BYTES']). Store large data elsewhere and enqueue a "
            "reference to it."
        )
    if len(text) > MIN_ENGINE_BYTES:
        engine_limit = json_size_limit(limit)
        if engine_limit < limit and len(text.encode()) > engine_limit:
            raise PayloadError(
                f"The {what} is {len(text.encode())} bytes as JSON, over the {engine_limit} "
                "bytes one statement of the queue database carries (MariaDB: half its "
                "max_allowed_packet, as the text is sent escaped). Store large data "
                "elsewhere and enqueue a reference to it, or raise max_allowed_packet."
            )


def too_deep(what: str, limit: int = MAX_DEPTH) -> PayloadError:
    """The error for a value nested deeper than ``limit`` levels (or than Python's JSON
    encoder and decoder go)."""
    return PayloadError(
        f"The {what} cannot be stored as JSON: it is nested too deeply (more than "
        f"{limit} levels of arrays and objects, the queue database's limit)."
    )


def parse_json(text: str, *, what: str = "payload") -> Any:
    """JSON text that a person gave (a command line, an admin form) as a value, or a
    PayloadError (a ValueError) that says why not: not JSON, or nested too deeply for
    Python's decoder (a RecursionError otherwise). What the value holds is encode_json's
    to check."""
    try:
        return json.loads(text)
    except RecursionError as exc:
        raise too_deep(what) from exc
    except ValueError as exc:
        raise PayloadError(f"The {what} is not JSON: {exc}.") from exc


def decode_json(value: Any) -> Any:
    """A JSON column read by raw SQL: text on SQLite (and from Django's psycopg set-up),
    already decoded otherwise."""
    if isinstance(value, str):
        return _DECODE(value)
    if isinstance(value, (bytes, bytearray)):
        return json.loads(value)
    return value
