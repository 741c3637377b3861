import os

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.utils.html import escape

from .models import Tick


def index(request: HttpRequest) -> HttpResponse:
    """A trivial page: which instance served it, and the last ticks with the instance that ran each."""
    instance = settings.MUTEXCRON.get("INSTANCE_ID") or f"pid {os.getpid()}"
    rows = "".join(
        f"<tr><td>{tick.fire_time:%H:%M:%S}</td><td>{escape(tick.instance_id)}</td></tr>"
        for tick in Tick.objects.all()[:10]
    )
    return HttpResponse(
        f"<h1>mutexcron demo</h1><p>Served by {escape(instance)} (pid {os.getpid()}).</p>"
        f"<table><tr><th>tick (UTC)</th><th>ran on</th></tr>{rows}</table>"
        '<p><a href="/admin/">admin</a>: job runs, locks and ticks</p>'
    )
