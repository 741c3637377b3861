"""ASGI application of the fleet test site, for Uvicorn and Daphne (tests/django/test_autostart_servers.py)."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.django.fleet_settings")
application = get_asgi_application()
