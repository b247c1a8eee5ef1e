from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("", include("shop.urls")),
    path("admin/", admin.site.urls),
    # Opt-in: the Prometheus view at /sqlq/metrics (django_sqlq:metrics). Scrape it with
    # Authorization: Bearer <SQLQ["METRICS_TOKEN"]>; staff who may view jobs can open it
    # in a browser. Needs `pip install 'django-sqlq[prometheus]'`. Leave this line out and
    # nothing is served.
    path("sqlq/", include("django_sqlq.urls")),
]
