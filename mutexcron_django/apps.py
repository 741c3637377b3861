"""The app's start-up: read settings, find the jobs, seed lock rows after migrate, autostart."""

from __future__ import annotations

import logging
from typing import Any

from django.apps import AppConfig
from django.db.models.signals import post_migrate

from mutexcron.plugins import Kind, register

logger = logging.getLogger("mutexcron.django")

# What this app adds to the core's registry of backends: the same table as the "mutexcron.backends" entry
# points in pyproject.toml, registered again at start-up for a checkout that runs without being installed.
BACKENDS: dict[Kind, str] = {
    "lock_store": "mutexcron_django.sql.store:DjangoLockStore",
    "task_backend": "mutexcron_django.sql.tasks.backend:DjangoTaskBackend",
    "record_store": "mutexcron_django.sql.tasks.records:DjangoTaskRecords",
}


def register_backends() -> None:
    """Serve ``django://`` URLs (lock store, task backend, task records) with this app's classes."""
    for kind, path in BACKENDS.items():
        register(kind, "django", path)


class MutexcronConfig(AppConfig):
    name = "mutexcron_django"
    label = "mutexcron"
    verbose_name = "Mutex cron"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.conf import settings

        register_backends()  # before the settings are read: they may name django:// URLs
        # checks: registers the system checks; tasks: the handler of django.tasks tasks (Django 6)
        from . import checks, tasks  # noqa: F401
        from .autostart import install
        from .conf import get_settings
        from .discovery import autodiscover

        conf = get_settings()  # a bad MUTEXCRON setting raises ImproperlyConfigured here
        if isinstance(conf.store, str):
            conf.build_store().close()  # and so does a malformed store URL (this connects to nothing)
        if "TASKS" in getattr(settings, "MUTEXCRON", {}) and isinstance(conf.tasks.backend, str):
            conf.tasks.build_queue().close()  # a malformed task backend or cancel store URL (connects to nothing)
        autodiscover(conf.modules, conf.tasks.modules)  # the @mutex_cron and the @task_handler modules
        post_migrate.connect(seed_after_migrate, sender=self, dispatch_uid="mutexcron-seed")
        install(conf.autostart)  # a serving process starts its scheduler, or says why it runs none


def seed_after_migrate(using: str = "default", **_: Any) -> None:
    """Create lock rows for the declared jobs as soon as the table exists (SQL store only). A table behind the
    model (``migrate mutexcron <an older migration>``) is told in one warning: the rows are made at the first
    acquire once it is migrated."""
    from mutexcron import default_registry
    from mutexcron.errors import StoreUnavailable

    from .conf import get_settings

    with get_settings().open_store() as store:
        if store.database_alias != using:  # only a store whose lock rows live in the database just migrated
            return
        try:
            created = store.seed(default_registry.names())
        except StoreUnavailable as error:
            logger.warning("lock rows not seeded in database %r: %s", using, error)
            return
    if created:
        logger.info("seeded %d lock row(s) in database %r", created, using)
