from typing import Any


class OtherDatabaseRouter:
    """The "other" database holds only django_sqlq's tables (for cross-database tests)."""

    def allow_migrate(
        self,
        db: str,
        app_label: str,
        model_name: str | None = None,  # noqa: ARG002 (Django's signature)
        **hints: Any,
    ) -> bool | None:
        if db == "other":
            return app_label == "django_sqlq"
        return None
