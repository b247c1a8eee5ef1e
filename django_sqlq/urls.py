"""django_sqlq's opt-in URLs: ``path("sqlq/", include("django_sqlq.urls"))``.

- ``metrics`` (``django_sqlq:metrics``): the Prometheus view (:mod:`django_sqlq.metrics`).
"""

from __future__ import annotations

from django.urls import path

from django_sqlq.metrics import metrics_view

app_name = "django_sqlq"

urlpatterns = [path("metrics", metrics_view, name="metrics")]
