"""Settings of the task worker processes (tests/tasks/task_worker.py) of the ``django://`` fleet tests.

The test (tests/django/tasks_support.py) creates a database of its own, migrates it, and gives it to the
workers in the environment:

    MUTEXCRON_TASKS_DATABASE  the DATABASES entry, as JSON (ENGINE, NAME, HOST, PORT, USER, PASSWORD, OPTIONS)
    MUTEXCRON_TASKS_ALIAS     the alias the task backend URL names (django://<alias>); it is also "default"
    MUTEXCRON_TASKS_CONN_MAX_AGE  optional: CONN_MAX_AGE of the workers' connections (default 0, Django's)
"""

from __future__ import annotations

import json
import os

SECRET_KEY = "mutexcron-task-fleet-tests-only"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "mutexcron_django",
]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

_DATABASE = json.loads(os.environ["MUTEXCRON_TASKS_DATABASE"])
if os.environ.get("MUTEXCRON_TASKS_CONN_MAX_AGE"):
    _DATABASE["CONN_MAX_AGE"] = int(os.environ["MUTEXCRON_TASKS_CONN_MAX_AGE"])
DATABASES = {"default": _DATABASE, os.environ.get("MUTEXCRON_TASKS_ALIAS", "default"): _DATABASE}

MUTEXCRON = {"AUTOSTART": False}
