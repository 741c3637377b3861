"""Django settings of the benchmark's instance processes on PostgreSQL (bench/fleet.py, bench/soak.py): the fleet
tests' settings (tests/django/fleet_settings.py: ``FLEET_DB_ENGINE=postgresql``, ``FLEET_DB_NAME`` the run's own
database, the server from ``MUTEXCRON_TEST_PG_*``) without their job's app, with persistent connections
(``CONN_MAX_AGE = None``: each thread keeps its own for the life of the process) and nothing started by itself.
"""

from __future__ import annotations

from tests.django.fleet_settings import *  # noqa: F403
from tests.django.fleet_settings import DATABASES, INSTALLED_APPS

INSTALLED_APPS = [app for app in INSTALLED_APPS if app != "tests.django.fleet_app"]
DATABASES["default"]["CONN_MAX_AGE"] = None
MUTEXCRON = {"AUTOSTART": False}
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"stderr": {"class": "logging.StreamHandler"}},
    "loggers": {"mutexcron": {"handlers": ["stderr"], "level": "WARNING"}},
}
