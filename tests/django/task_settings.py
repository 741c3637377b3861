"""Settings for ``manage.py mutexcron worker`` in a subprocess (tests/django/test_tasks_integration.py and
test_django_tasks_framework.py).

The test settings plus the ``tests.django.taskapps.handlerapp`` app, whose ``tasks`` module declares the
handlers (and the apps in $MUTEXCRON_TEST_TASKS_APPS, comma-separated), and only the SQLite database
($MUTEXCRON_TEST_TASKS_DB). The task backend is $MUTEXCRON_TEST_TASKS_BACKEND (a Redis URL with a test's
own prefix); on Django 6, Django's ``TASKS`` runs ``django.tasks`` tasks on it.
"""

from __future__ import annotations

import os

from tests.django.settings import *  # noqa: F403
from tests.django.settings import DATABASES, INSTALLED_APPS

_EXTRA_APPS = [app for app in os.environ.get("MUTEXCRON_TEST_TASKS_APPS", "").split(",") if app]
INSTALLED_APPS = [*INSTALLED_APPS, "tests.django.taskapps.handlerapp", *_EXTRA_APPS]
DATABASES = {"default": {**DATABASES["default"], "NAME": os.environ.get("MUTEXCRON_TEST_TASKS_DB", "unused.sqlite3")}}
MUTEXCRON = {
    "AUTOSTART": False,
    "TASKS": {"BACKEND": os.environ["MUTEXCRON_TEST_TASKS_BACKEND"]},
}
TASKS = {"default": {"BACKEND": "mutexcron_django.tasks.MutexcronTaskBackend"}}  # read by Django 6 only
