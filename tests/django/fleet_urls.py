"""URLs of the fleet test site: /pid/ answers with the serving process's pid (?sleep=0.3 holds the worker);
/mutexcron/ is mutexcron_django.urls."""

import os
import time

from django.http import HttpRequest, HttpResponse
from django.urls import include, path


def pid(request: HttpRequest) -> HttpResponse:
    time.sleep(min(float(request.GET.get("sleep", 0)), 2.0))  # keeps a sync worker busy, so requests spread
    return HttpResponse(str(os.getpid()), content_type="text/plain")


urlpatterns = [path("pid/", pid), path("mutexcron/", include("mutexcron_django.urls"))]
