from __future__ import annotations

from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class SQLQConfig(AppConfig):
    name = "django_sqlq"
    label = "django_sqlq"
    verbose_name = _("Job queue")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Imported here, once the app registry is ready: checks imports the models.
        from django.core.signals import setting_changed
        from django.db.backends.signals import connection_created

        from django_sqlq import checks  # noqa: F401  (registers the system checks)
        from django_sqlq.conf import clear_cache
        from django_sqlq.db import configure_connection

        connection_created.connect(configure_connection, dispatch_uid="django_sqlq.configure")
        setting_changed.connect(clear_cache, dispatch_uid="django_sqlq.settings")
