"""Pluggable lock stores, chosen by URL scheme or dotted path like Django's cache backends.

``store_from_url("redis://…")``, ``"rediss://…"``, ``"mongodb://…"``, ``"mongodb+srv://…"``, ``"memory://"``,
or a dotted path to a :class:`LockStore` subclass (``"myproject.locks.MyStore"``, built with no arguments).
Backends import their client library only when used, so ``pip install mutexcron[redis]`` is enough for Redis.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib import import_module
from typing import TYPE_CHECKING, Any

from ..errors import StoreConfigError
from ..urls import mask_url, shown, url_scheme
from .base import AcquireStatus, Acquisition, LockState, LockStore
from .memory import MemoryLockStore

if TYPE_CHECKING:
    from .mongo import MongoLockStore
    from .redis import RedisLockStore

__all__ = [
    "SCHEMES",
    "AcquireStatus",
    "Acquisition",
    "LockState",
    "LockStore",
    "MemoryLockStore",
    "MongoLockStore",
    "RedisLockStore",
    "store_from_url",
]

# scheme -> dotted path of the store class (imported on first use)
SCHEMES: dict[str, str] = {
    "memory": "mutexcron.stores.memory.MemoryLockStore",
    "redis": "mutexcron.stores.redis.RedisLockStore",
    "rediss": "mutexcron.stores.redis.RedisLockStore",
    "unix": "mutexcron.stores.redis.RedisLockStore",
    "mongodb": "mutexcron.stores.mongo.MongoLockStore",
    "mongodb+srv": "mutexcron.stores.mongo.MongoLockStore",
    "django": "mutexcron_django.store.DjangoLockStore",  # the app's own database (needs mutexcron_django)
}

_EXTRAS = {"redis": "redis", "pymongo": "mongo", "bson": "mongo", "pika": "rabbitmq", "django": "django"}


def _import_class(path: str, *, what: str) -> Any:
    """The class at dotted ``path``. Errors quote it masked; a path with something to mask (a mistyped
    URL with a password) is never quoted by the import system's own message either."""
    module_name, _, class_name = path.rpartition(".")
    secret = mask_url(path) != path
    try:
        module = import_module(module_name)
    except (ImportError, ValueError, TypeError) as error:  # not found, or a path no import reads (".a", "a..b")
        name = getattr(error, "name", None) or ""
        extra = _EXTRAS.get(name.split(".")[0])
        hint = f"; install it with: pip install 'mutexcron[{extra}]'" if extra else ""
        reason = "its module cannot be imported" if secret else str(error) or type(error).__name__
        raise StoreConfigError(f"cannot load {what} {shown(path)}: {reason}{hint}") from None
    try:
        return getattr(module, class_name)
    except AttributeError:
        raise StoreConfigError(f"cannot load {what} {shown(path)}: {module_name} has no {class_name!r}") from None


def class_for_scheme(url: str, schemes: Mapping[str, str], what: str, *, loading: str | None = None,
                     alternative: str = "") -> Any:
    """The class that ``schemes`` names for ``url``'s scheme, imported on first use (lock stores, task
    backends and cancel stores are all chosen this way). ``what`` names the kind in errors."""
    scheme = url_scheme(url)
    if scheme not in schemes:
        named = f"scheme {scheme!r}" if scheme else "URL scheme (letters, digits, + . - before ://)"
        raise StoreConfigError(
            f"unknown {what} {named} in {shown(url)}; use one of {', '.join(sorted(schemes))}{alternative}"
        )
    return _import_class(schemes[scheme], what=loading or what)


def store_from_url(url: str | LockStore) -> LockStore:
    """Build a lock store from a URL or dotted path; a store object is returned as it is."""
    if isinstance(url, LockStore):
        return url
    if not isinstance(url, str) or not url.strip():
        raise StoreConfigError(f"store must be a URL, a dotted path or a LockStore, not {shown(url)}")
    if "://" in url:
        cls = class_for_scheme(url, SCHEMES, "store", loading="store backend",
                               alternative=" or a dotted path to a LockStore class")
        return cls.from_url(url)
    if "." not in url or any(mark in url for mark in " :/@"):  # a mistyped URL is no dotted path
        raise StoreConfigError(
            f"store {shown(url)} is neither a URL (redis://…, mongodb://…, memory://) nor a dotted path to a LockStore"
        )
    cls = _import_class(url, what="store class")
    if not (isinstance(cls, type) and issubclass(cls, LockStore)):
        raise StoreConfigError(f"store class {shown(url)} is not a subclass of mutexcron.stores.LockStore")
    return cls()


def __getattr__(name: str) -> Any:
    if name == "RedisLockStore":
        return _import_class("mutexcron.stores.redis.RedisLockStore", what="store backend")
    if name == "MongoLockStore":
        return _import_class("mutexcron.stores.mongo.MongoLockStore", what="store backend")
    raise AttributeError(name)
