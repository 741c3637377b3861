"""Settings for ``manage.py mutexcron run`` in a subprocess (tests/django/test_command.py).

The test settings plus the ``tests.django.runjobs`` app, whose ``cron`` module declares the jobs, and
a SQLite file of the test's own ($MUTEXCRON_TEST_RUN_DB); $MUTEXCRON_TEST_RUN_STORE overrides the store.
"""

from __future__ import annotations

import os

from tests.django.settings import *  # noqa: F403
from tests.django.settings import DATABASES, INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "tests.django.runjobs"]
DATABASES = {
    **DATABASES,
    "default": {**DATABASES["default"], "NAME": os.environ["MUTEXCRON_TEST_RUN_DB"]},
}
MUTEXCRON = {
    "AUTOSTART": False,
    "INSTANCE_ID": "run-test",
    "MODULES": ["cron"],
    "STORE": os.environ.get("MUTEXCRON_TEST_RUN_STORE", "django"),
}
