"""The operation of the migrations that change MariaDB alone (0015, 0017, 0019): SQL run on
MariaDB and nothing elsewhere. (The loader skips modules whose name starts with ``_``: this
one is not a migration.)"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db import migrations


def _run(statements: list[str]) -> Callable[[Any, Any], None]:
    def run(apps: Any, schema_editor: Any) -> None:  # noqa: ARG001 (RunPython's signature)
        if schema_editor.connection.vendor != "mysql":
            return
        for statement in statements:
            schema_editor.execute(statement)

    return run


def on_mariadb(forward: list[str], backward: list[str]) -> migrations.RunPython:
    """Run ``forward`` on MariaDB (``backward`` when unapplied), each statement in turn,
    outside a transaction (MariaDB commits each DDL statement anyway)."""
    return migrations.RunPython(_run(forward), _run(backward), atomic=False, elidable=False)
