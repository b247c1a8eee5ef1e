"""Adversarial tests of ``sqlq_queue`` unknown names and ``--new`` (issue 26)."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from django_sqlq.models import Queue

db = pytest.mark.django_db


def queue(*args: str) -> tuple[str, int, str]:
    out = io.StringIO()
    try:
        call_command("sqlq_queue", *args, stdout=out, stderr=io.StringIO())
    except CommandError as exc:
        return out.getvalue(), exc.returncode, str(exc)
    return out.getvalue(), 0, ""


@db
@pytest.mark.parametrize("name", ["emails ", " emails", "Emails", "emails\n", "default,emails"])
def test_near_misses_are_refused_with_the_close_name(name: str) -> None:
    _out, code, message = queue("pause", name)
    assert code == 1, message
    assert "did you mean 'emails'" in message or "did you mean 'default'" in message
    assert not Queue.objects.filter(paused=True).exists()


@db
def test_one_unknown_name_among_several_pauses_none() -> None:
    _out, code, _message = queue("pause", "reports", "emial")
    assert code == 1
    assert not Queue.objects.filter(paused=True).exists()


@db
def test_new_then_known_then_resume_without_new() -> None:
    _out, code, message = queue("pause", "tenant:acme", "--new")
    assert code == 0, message
    out, code, message = queue("status", "tenant:acme")
    assert code == 0
    assert "paused" in out
    _out, code, message = queue("resume", "tenant:acme")  # known now: no --new needed
    assert code == 0, message
    _out, code, _ = queue("pause", "tenant:acme", "--new")  # --new on a known name: fine
    assert code == 0


@db
@pytest.mark.parametrize("name", ["", "x" * 101, "a\x00b"])
def test_invalid_names_exit_2_even_with_new(name: str) -> None:
    _out, code, _message = queue("pause", name, "--new")
    assert code == 2
    assert not Queue.objects.exists()
