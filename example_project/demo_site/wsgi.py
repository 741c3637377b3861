"""WSGI entry point (``gunicorn demo_site.wsgi``); every worker starts its scheduler when it boots."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "demo_site.settings")

application = get_wsgi_application()
