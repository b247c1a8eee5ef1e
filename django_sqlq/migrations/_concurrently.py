"""Index operations that do not stop the workers: ``CREATE INDEX CONCURRENTLY`` and ``DROP
INDEX CONCURRENTLY`` on PostgreSQL, plain ones on SQLite (where a migration holds the write
lock whatever it does, and dropping an index takes milliseconds).

``django.contrib.postgres.operations`` has ``AddIndexConcurrently`` and
``RemoveIndexConcurrently``, but they run only on PostgreSQL, and importing that module
needs psycopg, which a project on SQLite does not install; these do what they do (the same
statements, the same refusal to run inside a transaction) on PostgreSQL and fall back to
Django's plain operations elsewhere. The migration that uses them sets ``atomic = False``.
(The loader skips modules whose name starts with ``_``: this one is not a migration.)
"""

from __future__ import annotations

from typing import Any

from django.db import NotSupportedError, migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor


def _concurrently(schema_editor: BaseDatabaseSchemaEditor) -> bool:
    """True on PostgreSQL, after checking that no transaction is open (CONCURRENTLY
    cannot run in one)."""
    if schema_editor.connection.vendor != "postgresql":
        return False
    if schema_editor.connection.in_atomic_block:
        raise NotSupportedError(
            "CONCURRENTLY cannot run inside a transaction: the migration sets atomic = False."
        )
    return True


class AddIndexConcurrently(migrations.AddIndex):
    """``AddIndex`` without blocking writes on PostgreSQL (``CREATE INDEX CONCURRENTLY``)."""

    def describe(self) -> str:
        return (
            f"Create index {self.index.name} on model {self.model_name} "
            "(CONCURRENTLY on PostgreSQL)"
        )

    def database_forwards(
        self,
        app_label: str,
        schema_editor: BaseDatabaseSchemaEditor,
        from_state: Any,
        to_state: Any,
    ) -> None:
        if not _concurrently(schema_editor):
            super().database_forwards(app_label, schema_editor, from_state, to_state)
            return
        model = to_state.apps.get_model(app_label, self.model_name)
        if self.allow_migrate_model(schema_editor.connection.alias, model):
            schema_editor.add_index(model, self.index, concurrently=True)  # type: ignore[call-arg]

    def database_backwards(
        self,
        app_label: str,
        schema_editor: BaseDatabaseSchemaEditor,
        from_state: Any,
        to_state: Any,
    ) -> None:
        if not _concurrently(schema_editor):
            super().database_backwards(app_label, schema_editor, from_state, to_state)
            return
        model = from_state.apps.get_model(app_label, self.model_name)
        if self.allow_migrate_model(schema_editor.connection.alias, model):
            schema_editor.remove_index(model, self.index, concurrently=True)  # type: ignore[call-arg]


class RemoveIndexConcurrently(migrations.RemoveIndex):
    """``RemoveIndex`` without blocking reads or writes on PostgreSQL (``DROP INDEX
    CONCURRENTLY``); going back builds the index with ``CREATE INDEX CONCURRENTLY``."""

    def describe(self) -> str:
        return f"Remove index {self.name} from {self.model_name} (CONCURRENTLY on PostgreSQL)"

    def database_forwards(
        self,
        app_label: str,
        schema_editor: BaseDatabaseSchemaEditor,
        from_state: Any,
        to_state: Any,
    ) -> None:
        if not _concurrently(schema_editor):
            super().database_forwards(app_label, schema_editor, from_state, to_state)
            return
        model = from_state.apps.get_model(app_label, self.model_name)
        if self.allow_migrate_model(schema_editor.connection.alias, model):
            index = from_state.models[app_label, self.model_name_lower].get_index_by_name(
                self.name
            )
            schema_editor.remove_index(model, index, concurrently=True)  # type: ignore[call-arg]

    def database_backwards(
        self,
        app_label: str,
        schema_editor: BaseDatabaseSchemaEditor,
        from_state: Any,
        to_state: Any,
    ) -> None:
        if not _concurrently(schema_editor):
            super().database_backwards(app_label, schema_editor, from_state, to_state)
            return
        model = to_state.apps.get_model(app_label, self.model_name)
        if self.allow_migrate_model(schema_editor.connection.alias, model):
            index = to_state.models[app_label, self.model_name_lower].get_index_by_name(self.name)
            schema_editor.add_index(model, index, concurrently=True)  # type: ignore[call-arg]
