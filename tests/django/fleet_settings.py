"""Settings of the Django processes that tests/django/test_fleet_django.py and test_autostart_servers.py start.

Every value comes from the environment the test gives the process:

    FLEET_DB_ENGINE   "sqlite" (default) or "postgresql"
    FLEET_DB_NAME     the SQLite file, or the PostgreSQL database name
    FLEET_LEDGER_DIR  where the job body appends its per-process ledger (tests/django/fleet_app/cron.py)
    FLEET_INSTANCE    MUTEXCRON["INSTANCE_ID"] (default: host:pid)
    FLEET_AUTOSTART   "0" turns MUTEXCRON["AUTOSTART"] off (default on)
    FLEET_METRICS     "1" turns MUTEXCRON["METRICS"] on (default off; /mutexcron/metrics/ serves them)
    FLEET_DB_POOL     PostgreSQL: the size of Django's connection pool (OPTIONS["pool"]; default: no pool)
    FLEET_RUN_ON_TASKS  "1": the site's job runs on task workers (tests/django/fleet_tasks_app/cron.py) on the
                      django:// task backend, a dead worker's task returning after 2 s
"""

from __future__ import annotations

import os

SECRET_KEY = "mutexcron-fleet-tests-only"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
ROOT_URLCONF = "tests.django.fleet_urls"
INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "mutexcron_django",
    "tests.django.fleet_app",
]
RUN_ON_TASKS = os.environ.get("FLEET_RUN_ON_TASKS") == "1"
if RUN_ON_TASKS:
    INSTALLED_APPS[-1] = "tests.django.fleet_tasks_app"
MIDDLEWARE: list[str] = []
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

if os.environ.get("FLEET_DB_ENGINE", "sqlite") == "postgresql":
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.postgresql",
            "HOST": os.environ.get("MUTEXCRON_TEST_PG_HOST", "127.0.0.1"),
            "PORT": os.environ.get("MUTEXCRON_TEST_PG_PORT", "5432"),
            "USER": os.environ.get("MUTEXCRON_TEST_PG_USER", "postgres"),
            "NAME": os.environ["FLEET_DB_NAME"],
        }
    }
    if os.environ.get("FLEET_DB_POOL"):
        DATABASES["default"]["OPTIONS"] = {"pool": {"min_size": 1, "max_size": int(os.environ["FLEET_DB_POOL"])}}
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": os.environ.get("FLEET_DB_NAME", "fleet.sqlite3"),
            "OPTIONS": {"timeout": 20},
        }
    }

MUTEXCRON = {
    "AUTOSTART": os.environ.get("FLEET_AUTOSTART", "1") != "0",
    "INSTANCE_ID": os.environ.get("FLEET_INSTANCE") or None,
    "METRICS": os.environ.get("FLEET_METRICS") == "1",
}
if RUN_ON_TASKS:
    MUTEXCRON["TASKS"] = {"BACKEND": "django", "JOB_VISIBILITY_TIMEOUT": 2}

# Every line names its process, so the tests can tell which process started a scheduler.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"pid": {"format": "%(asctime)s pid=%(process)d %(name)s %(levelname)s %(message)s"}},
    "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "pid"}},
    "loggers": {
        "mutexcron": {"handlers": ["stderr"], "level": "INFO"},
        "mutexcron.django": {"handlers": ["stderr"], "level": "DEBUG", "propagate": False},
    },
}
