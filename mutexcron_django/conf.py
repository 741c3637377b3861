"""The ``MUTEXCRON`` setting, read with documented defaults; a bad value raises ImproperlyConfigured."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from mutexcron.cron import resolve_timezone
from mutexcron.errors import StoreConfigError
from mutexcron.stores import LockStore, store_from_url

DEFAULTS: dict[str, Any] = {
    "STORE": "django",  # the project's own database; or "django://<alias>", "redis://…", "mongodb://…"
    "AUTOSTART": True,  # start a scheduler in each serving web process
    "TIMEZONE": None,  # default: settings.TIME_ZONE
    "INSTANCE_ID": None,  # default: host:pid
    "HISTORY_RETENTION": timedelta(days=30),  # None keeps run history forever
    "MODULES": ["cron"],  # <app>.<module> files imported at start-up to find @mutex_cron jobs
}


@dataclass(frozen=True)
class MutexcronSettings:
    store: str | LockStore
    autostart: bool
    timezone: str
    instance_id: str | None
    history_retention: timedelta | None
    modules: tuple[str, ...]

    @property
    def store_spec(self) -> str | LockStore:
        """What to give ``store_from_url`` or ``Scheduler``: "django" is the default database's URL."""
        return "django://" if self.store == "django" else self.store

    def build_store(self) -> LockStore:
        """A store from the setting (a new one each call, unless the setting is a LockStore object)."""
        try:
            return store_from_url(self.store_spec)
        except StoreConfigError as error:
            raise ImproperlyConfigured(f"MUTEXCRON['STORE']: {error}") from None


def _fail(key: str, message: str) -> ImproperlyConfigured:
    return ImproperlyConfigured(f"MUTEXCRON[{key!r}] {message}")


def get_settings() -> MutexcronSettings:
    """Read and check ``settings.MUTEXCRON`` (a dict; every key optional)."""
    user = getattr(settings, "MUTEXCRON", {})
    if not isinstance(user, dict):
        raise ImproperlyConfigured(f"MUTEXCRON must be a dict, not {type(user).__name__}")
    unknown = set(user) - set(DEFAULTS) - {"TASKS"}
    if unknown:
        raise ImproperlyConfigured(
            f"MUTEXCRON has unknown key(s) {sorted(unknown)}; known keys: {sorted(DEFAULTS)}"
        )
    values = {**DEFAULTS, **user}

    store = values["STORE"]
    if not isinstance(store, str | LockStore) or (isinstance(store, str) and not store.strip()):
        raise _fail("STORE", f'must be "django", a store URL, a dotted path or a LockStore, not {store!r}')
    if not isinstance(values["AUTOSTART"], bool):
        raise _fail("AUTOSTART", f"must be True or False, not {values['AUTOSTART']!r}")
    timezone = values["TIMEZONE"] or settings.TIME_ZONE or "UTC"
    try:
        resolve_timezone(timezone)
    except ValueError:
        raise _fail("TIMEZONE", f"is not a known time zone: {timezone!r}") from None
    instance_id = values["INSTANCE_ID"]
    if instance_id is not None and (not isinstance(instance_id, str) or not instance_id.strip()):
        raise _fail("INSTANCE_ID", f"must be a non-empty string or None, not {instance_id!r}")
    retention = values["HISTORY_RETENTION"]
    if retention is not None and (not isinstance(retention, timedelta) or retention <= timedelta(0)):
        raise _fail("HISTORY_RETENTION", f"must be a positive timedelta or None, not {retention!r}")
    modules = values["MODULES"]
    if not isinstance(modules, list | tuple) or not all(isinstance(m, str) and m for m in modules):
        raise _fail("MODULES", f'must be a list of module names such as ["cron"], not {modules!r}')
    return MutexcronSettings(store, values["AUTOSTART"], timezone, instance_id, retention, tuple(modules))
