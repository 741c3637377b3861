from django.contrib import admin
from django.urls import include, path
from ticks.views import index

urlpatterns = [
    path("", index, name="index"),
    path("admin/", admin.site.urls),
    path("mutexcron/", include("mutexcron_django.urls")),  # health/ (probes) and metrics/ (Prometheus)
]
