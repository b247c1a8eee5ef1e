"""The pytest plugin (entry point ``pytest11``: loaded wherever django-sqlq is installed).

Fixtures, for pytest-django projects:

- ``sqlq``: the helpers of :mod:`django_sqlq.testing` (``sqlq.assert_enqueued(...)``,
  ``sqlq.refute_enqueued(...)``, ``sqlq.enqueued_jobs(...)``, ``sqlq.run_jobs(...)``,
  ``sqlq.run_job(...)``), with database access (pytest-django's ``db``, or the transactional
  one that a ``django_db(transaction=True)`` mark asks for).
- ``sqlq_inline``: ``SQLQ["TESTING"] = "inline"`` for the test: ``enqueue()`` runs each job
  at once.

Nothing here imports Django models at import time: pytest loads plugins before Django is set
up.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


class SQLQFixture:
    """The ``sqlq`` fixture: :mod:`django_sqlq.testing`'s helpers as methods."""

    def __getattr__(self, name: str) -> Any:
        from django_sqlq import testing

        if name in testing.__all__:
            return getattr(testing, name)
        raise AttributeError(name)


@pytest.fixture
def sqlq(db: None) -> SQLQFixture:  # noqa: ARG001 (requested for database access)
    """Assertions on enqueued jobs and a way to run them in the test's own transaction."""
    return SQLQFixture()


@pytest.fixture
def sqlq_inline(db: None) -> Iterator[None]:  # noqa: ARG001 (requested for database access)
    """``SQLQ["TESTING"] = "inline"`` for this test: ``enqueue()`` runs each job at once."""
    from django_sqlq.testing import inline

    with inline():
        yield
