"""One registry of backends: which class serves a URL scheme, for lock stores, task backends and record stores.

The core names only its own classes. Other packages add schemes with :func:`register` or, with no import
needed, an entry point in the ``mutexcron.backends`` group named ``<kind>:<scheme>`` (``"lock_store:etcd" =
"mylocks.store:EtcdLockStore"``; ``mutexcron_django`` adds ``django://`` so). Entry points are read once,
lazily, the first time a scheme is not found among the registered and built-in ones. Classes are imported
on first use, so a backend's client library is only needed when it is used.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, MutableMapping
from dataclasses import dataclass
from importlib import import_module
from importlib.metadata import entry_points
from typing import Any, Literal, get_args

from .errors import StoreConfigError
from .urls import mask_url, shown, url_scheme

__all__ = ["ENTRY_POINT_GROUP", "KINDS", "Kind", "SchemeTable", "Wording", "build_from_url", "class_for_scheme",
           "import_class", "register", "schemes"]

Kind = Literal["lock_store", "task_backend", "record_store"]
KINDS: tuple[Kind, ...] = get_args(Kind)
ENTRY_POINT_GROUP = "mutexcron.backends"

_REDIS_STORE = "mutexcron.stores.redis.RedisLockStore"
_MONGO_STORE = "mutexcron.stores.mongo.MongoLockStore"
_REDIS_BACKEND = "mutexcron.tasks.backends.redis.RedisTaskBackend"
_RABBITMQ_BACKEND = "mutexcron.tasks.backends.rabbitmq.RabbitMQTaskBackend"
_REDIS_RECORDS = "mutexcron.tasks.records.redis.RedisTaskRecords"
# One server, a Redis Cluster, or the master Sentinel names (mutexcron.redis.urls; redis-py is imported on use).
_REDIS_SCHEMES = ("redis", "rediss", "unix", "redis+cluster", "rediss+cluster", "redis+sentinel", "rediss+sentinel")

_BUILT_IN: dict[Kind, dict[str, str]] = {
    "lock_store": {"memory": "mutexcron.stores.memory.MemoryLockStore", **dict.fromkeys(_REDIS_SCHEMES, _REDIS_STORE),
                   "mongodb": _MONGO_STORE, "mongodb+srv": _MONGO_STORE},
    "task_backend": {**dict.fromkeys(_REDIS_SCHEMES, _REDIS_BACKEND), "amqp": _RABBITMQ_BACKEND,
                     "amqps": _RABBITMQ_BACKEND},
    "record_store": dict.fromkeys(_REDIS_SCHEMES, _REDIS_RECORDS),
}
_REGISTERED: dict[Kind, dict[str, str]] = {kind: {} for kind in KINDS}
_FROM_ENTRY_POINTS: dict[Kind, dict[str, str]] | None = None
_LOCK = threading.Lock()

_EXTRAS = {"redis": "redis", "pymongo": "mongo", "bson": "mongo", "pika": "rabbitmq", "django": "django"}
# What a scheme needs besides its package, said whenever its class cannot be loaded.
_NEEDS = {"django": "django:// needs Django and mutexcron_django installed and configured: 'mutexcron_django' in "
                    "INSTALLED_APPS, the settings loaded (DJANGO_SETTINGS_MODULE) and django.setup() run"}


def _check_kind(kind: str) -> Kind:
    for known in KINDS:
        if kind == known:
            return known
    raise ValueError(f"unknown backend kind {kind!r}; use one of {', '.join(KINDS)}")


def register(kind: Kind, scheme: str, dotted_path: str) -> None:
    """Serve ``scheme://`` URLs of ``kind`` (``"lock_store"``, ``"task_backend"`` or ``"record_store"``) with
    the class at ``dotted_path`` (``"mypackage.locks.MyLockStore"``, imported on first use; its ``from_url(url)``
    builds it). A registered scheme takes precedence over a built-in one and over an entry point."""
    kind = _check_kind(kind)
    if url_scheme(f"{scheme}://") != scheme:
        raise ValueError(f"scheme {scheme!r} must be lower-case letters, digits, + . - starting with a letter")
    if not isinstance(dotted_path, str) or "." not in dotted_path.replace(":", "."):
        raise ValueError(f"dotted_path {dotted_path!r} must name a class, such as 'mypackage.locks.MyLockStore'")
    with _LOCK:
        _REGISTERED[kind][scheme] = dotted_path


def _entry_points() -> dict[Kind, dict[str, str]]:
    """The schemes that installed packages declare in the ``mutexcron.backends`` group, read once."""
    global _FROM_ENTRY_POINTS
    with _LOCK:
        if _FROM_ENTRY_POINTS is None:
            found: dict[Kind, dict[str, str]] = {kind: {} for kind in KINDS}
            for point in entry_points(group=ENTRY_POINT_GROUP):
                kind, _, scheme = point.name.partition(":")
                if kind in KINDS and scheme:
                    found[_check_kind(kind)].setdefault(scheme.lower(), point.value)
            _FROM_ENTRY_POINTS = found
        return _FROM_ENTRY_POINTS


class SchemeTable(MutableMapping[str, str]):
    """The live scheme -> dotted path table of one kind: registered, then built-in, then entry points.
    Setting an item registers the scheme (``SCHEMES["x"] = path`` is ``register(kind, "x", path)``)."""

    def __init__(self, kind: Kind) -> None:
        self.kind = _check_kind(kind)

    def _find(self, scheme: str) -> str | None:
        for table in (_REGISTERED[self.kind], _BUILT_IN[self.kind]):
            if scheme in table:
                return table[scheme]
        return _entry_points()[self.kind].get(scheme)

    def __getitem__(self, scheme: str) -> str:
        path = self._find(scheme) if isinstance(scheme, str) else None
        if path is None:
            raise KeyError(scheme)
        return path

    def __contains__(self, scheme: object) -> bool:
        return isinstance(scheme, str) and self._find(scheme) is not None

    def __iter__(self) -> Iterator[str]:
        merged = {**_entry_points()[self.kind], **_BUILT_IN[self.kind], **_REGISTERED[self.kind]}
        return iter(sorted(merged))

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __setitem__(self, scheme: str, dotted_path: str) -> None:
        register(self.kind, scheme, dotted_path)

    def __delitem__(self, scheme: str) -> None:
        with _LOCK:
            del _REGISTERED[self.kind][scheme]  # only a registered scheme can be removed

    def __repr__(self) -> str:
        return f"<SchemeTable {self.kind}: {dict(self)!r}>"


def schemes(kind: Kind) -> SchemeTable:
    """The live scheme -> dotted path table of ``kind``."""
    return SchemeTable(kind)


def import_class(path: str, *, what: str) -> Any:
    """The class at dotted ``path`` (``module.Class``, or an entry point's ``module:Class``). Errors quote it
    masked; a path with something to mask (a mistyped URL with a password) is never quoted by the import
    system's own message either."""
    module_name, colon, class_name = path.partition(":")
    if not colon:
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
    except Exception as error:  # the module's own set-up failed (Django's models outside a configured project)
        reason = "its module cannot be imported" if secret else f"{type(error).__name__}: {error}"
        raise StoreConfigError(f"cannot load {what} {shown(path)}: importing it failed with {reason}") from None
    found: Any = module
    try:
        for part in class_name.split("."):
            found = getattr(found, part)
    except AttributeError:
        raise StoreConfigError(f"cannot load {what} {shown(path)}: {module_name} has no {class_name!r}") from None
    return found


def class_for_scheme(url: str, table: Mapping[str, str], what: str, *, loading: str | None = None,
                     alternative: str = "") -> Any:
    """The class that ``table`` names for ``url``'s scheme, imported on first use. ``what`` names the kind in
    errors; an unknown scheme's error lists the known ones, with ``url`` masked."""
    scheme = url_scheme(url)
    needs = f"; {_NEEDS[scheme]}" if scheme in _NEEDS else ""
    if scheme is None or scheme not in table:
        named = f"scheme {scheme!r}" if scheme else "URL scheme (letters, digits, + . - before ://)"
        raise StoreConfigError(
            f"unknown {what} {named} in {shown(url)}; use one of {', '.join(sorted(table))}{alternative}{needs}"
        )
    try:
        return import_class(table[scheme], what=loading or what)
    except StoreConfigError as error:
        raise StoreConfigError(f"{error}{needs}") from None


@dataclass(frozen=True)
class Wording:
    """How a loader's errors name what it builds: ``what`` (``"task backend"``), ``loading`` (how an import
    error names the class; default ``what``) and ``alternative`` (what else the value could have been, after
    the list of known schemes)."""

    what: str
    loading: str | None = None
    alternative: str = ""


def build_from_url(url: str, table: Mapping[str, str], base: type, wording: Wording, **options: Any) -> Any:
    """``class_for_scheme(url, …).from_url(url, **options)``, checked to be a ``base``: a registered class that
    builds something else fails here, with the URL masked, not later in a worker."""
    what = wording.what
    cls = class_for_scheme(url, table, what, loading=wording.loading, alternative=wording.alternative)
    built = cls.from_url(url, **options)
    if not isinstance(built, base):
        raise StoreConfigError(f"the {what} class for {shown(url)} built a {type(built).__name__}, "
                               f"not a {base.__module__}.{base.__qualname__}")
    return built
