"""Django settings for the test suite: SQLite (the embedded default), PostgreSQL and MariaDB."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

SECRET_KEY = "mutexcron-tests-only"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
ROOT_URLCONF = "tests.django.urls"
ALLOWED_HOSTS = ["*"]
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "mutexcron_django",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
_RUN = f"{os.getpid()}"
_TMP = Path(tempfile.gettempdir())
DATABASES = {
    # A file, not :memory:, so that threads and other processes share it.
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": str(_TMP / f"mutexcron-{_RUN}.sqlite3"),
        "TEST": {"NAME": str(_TMP / f"mutexcron-test-{_RUN}.sqlite3")},
        "OPTIONS": {"timeout": 20},
    },
    "postgres": {
        "ENGINE": "django.db.backends.postgresql",
        "HOST": os.environ.get("MUTEXCRON_TEST_PG_HOST", "127.0.0.1"),
        "PORT": os.environ.get("MUTEXCRON_TEST_PG_PORT", "5432"),
        "USER": os.environ.get("MUTEXCRON_TEST_PG_USER", "postgres"),
        "NAME": "test",
        "TEST": {"NAME": f"mutexcron_test_{_RUN}", "DEPENDENCIES": []},
    },
    "mariadb": {
        "ENGINE": "django.db.backends.mysql",
        "HOST": os.environ.get("MUTEXCRON_TEST_MARIADB_HOST", "127.0.0.1"),
        "PORT": os.environ.get("MUTEXCRON_TEST_MARIADB_PORT", "3306"),
        "USER": "root",
        "PASSWORD": "",
        "NAME": "test",
        "TEST": {
            "NAME": f"mutexcron_test_{_RUN}",
            "CHARSET": "utf8mb4",
            "COLLATION": "utf8mb4_bin",
            "DEPENDENCIES": [],
        },
        "OPTIONS": {"charset": "utf8mb4"},
    },
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
STATIC_URL = "/static/"
MUTEXCRON = {"AUTOSTART": False}
