"""Settings of the nemesis run's processes on the ``django://`` store and task backend (STORE=postgres or mariadb).

    NEMESIS_DB_ENGINE  "postgresql" or "mysql"
    NEMESIS_DB_NAME    the run's own database
    NEMESIS_DB_HOST / NEMESIS_DB_PORT   the server (the harness's private one, which it may restart)
"""

from __future__ import annotations

import os

SECRET_KEY = "mutexcron-nemesis-only"
USE_TZ = True
TIME_ZONE = "UTC"
INSTALLED_APPS = ["django.contrib.contenttypes", "django.contrib.auth", "mutexcron_django"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

_ENGINE = os.environ.get("NEMESIS_DB_ENGINE", "postgresql")
DATABASES = {
    "default": {
        "ENGINE": f"django.db.backends.{_ENGINE}",
        "HOST": os.environ.get("NEMESIS_DB_HOST", "127.0.0.1"),
        "PORT": os.environ.get("NEMESIS_DB_PORT", "5432" if _ENGINE == "postgresql" else "3306"),
        "USER": "postgres" if _ENGINE == "postgresql" else "root",
        "NAME": os.environ.get("NEMESIS_DB_NAME", "test"),
        # A dead server must fail a call within seconds, not hang a fire.
        "OPTIONS": {"connect_timeout": 2},
    }
}
