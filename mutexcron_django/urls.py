"""mutexcron's URLs: ``path("mutexcron/", include("mutexcron_django.urls"))`` in the project's URLconf."""

from __future__ import annotations

from django.urls import path

from . import views
from .health import health_view

app_name = "mutexcron"

urlpatterns = [
    path("health/", health_view, name="health"),
    path("metrics/", views.metrics, name="metrics"),
]
