class OtherDatabaseRouter:
    """The "other" database holds only django_sqlq's tables (for cross-database tests)."""

    def allow_migrate(self, db, app_label, model_name=None, **hints):  # noqa: ARG002 (Django's)
        if db == "other":
            return app_label == "django_sqlq"
        return None
