"""WSGI application of the fleet test site, for gunicorn (tests/django/test_autostart_servers.py)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.django.fleet_settings")
application = get_wsgi_application()
