"""Settings of the mutexcron demo site: one SQLite file shared by every instance, the default lock store.

Environment:
    DEMO_INSTANCE   this instance's name in locks and run history (MUTEXCRON["INSTANCE_ID"]); default host:pid
    DEMO_DB         the SQLite file (default example_project/db.sqlite3)
    DEMO_SECRET_KEY a secret key (default: a fixed development-only one)
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent

SECRET_KEY = os.environ.get("DEMO_SECRET_KEY", "django-insecure-mutexcron-demo-only")
DEBUG = True  # runserver serves the admin's static files; this is a local demo, never a deployment
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "[::1]"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "mutexcron_django",
    "ticks",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "demo_site.urls"
WSGI_APPLICATION = "demo_site.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("DEMO_DB") or str(BASE_DIR / "db.sqlite3"),
        # Several processes write this one file: wait for the write lock instead of failing at once.
        "OPTIONS": {"timeout": 20},
    }
}

AUTH_PASSWORD_VALIDATORS: list[dict[str, str]] = []

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

MUTEXCRON = {
    "AUTOSTART": True,  # runserver starts a scheduler in the serving process; see mutexcron_django.autostart
    "INSTANCE_ID": os.environ.get("DEMO_INSTANCE") or None,
    "SYNC_INTERVAL": 1,  # seconds: overrides and overdue alerts are noticed within a second
    "METRICS": importlib.util.find_spec("prometheus_client") is not None,  # /mutexcron/metrics/ (the extra)
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s [pid %(process)d] %(name)s %(levelname)s %(message)s"},
    },
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "plain"},
    },
    "loggers": {
        "mutexcron": {"handlers": ["console"], "level": "INFO"},
    },
}
