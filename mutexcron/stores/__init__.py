"""Pluggable lock stores, chosen by URL scheme or dotted path like Django's cache backends.

``store_from_url("redis://…")``, ``"rediss://…"``, ``"mongodb://…"``, ``"mongodb+srv://…"``, ``"memory://"``,
a scheme another package registers (``"django://"`` with ``mutexcron_django``, see :mod:`mutexcron.plugins`),
or a dotted path to a :class:`LockStore` subclass (``"myproject.locks.MyStore"``, built with no arguments).
A store implements the lock contract (:class:`LockStore`) and, for pauses, schedules, alerts and listings, the
control plane (:class:`ControlStore`); :func:`supports_control` tells which.
Backends import their client library only when used, so ``pip install mutexcron[redis]`` is enough for Redis.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import ControlNotSupported, StoreConfigError
from ..plugins import Wording, build_from_url, import_class, schemes
from ..urls import shown
from .base import AcquireRequest, AcquireStatus, Acquisition, LockState, LockStore, ReleaseRequest, Renewal
from .control import ControlStore, require_control, supports_control
from .memory import MemoryLockStore

if TYPE_CHECKING:
    from .mongo import MongoLockStore
    from .redis import RedisLockStore

__all__ = [
    "SCHEMES",
    "AcquireRequest",
    "AcquireStatus",
    "Acquisition",
    "ControlNotSupported",
    "ControlStore",
    "LockState",
    "LockStore",
    "MemoryLockStore",
    "MongoLockStore",
    "RedisLockStore",
    "ReleaseRequest",
    "Renewal",
    "require_control",
    "store_from_url",
    "supports_control",
]

# scheme -> dotted path of the store class (imported on first use); other packages add theirs (mutexcron.plugins)
SCHEMES = schemes("lock_store")


def store_from_url(url: str | LockStore) -> LockStore:
    """Build a lock store from a URL or dotted path; a store object is returned as it is."""
    if isinstance(url, LockStore):
        return url
    if not isinstance(url, str) or not url.strip():
        raise StoreConfigError(f"store must be a URL, a dotted path or a LockStore, not {shown(url)}")
    if "://" in url:
        wording = Wording("store", loading="store backend", alternative=" or a dotted path to a LockStore class")
        store: LockStore = build_from_url(url, SCHEMES, LockStore, wording)
        return store
    if "." not in url or any(mark in url for mark in " :/@"):  # a mistyped URL is no dotted path
        raise StoreConfigError(
            f"store {shown(url)} is neither a URL (redis://…, mongodb://…, memory://) nor a dotted path to a LockStore"
        )
    cls = import_class(url, what="store class")
    if not (isinstance(cls, type) and issubclass(cls, LockStore)):
        raise StoreConfigError(f"store class {shown(url)} is not a subclass of mutexcron.stores.LockStore")
    return cls()


def __getattr__(name: str) -> Any:
    if name == "RedisLockStore":
        return import_class("mutexcron.stores.redis.RedisLockStore", what="store backend")
    if name == "MongoLockStore":
        return import_class("mutexcron.stores.mongo.MongoLockStore", what="store backend")
    raise AttributeError(name)
