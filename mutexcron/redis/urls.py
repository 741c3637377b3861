"""Redis URLs to clients: one server, a Redis Cluster, or the master that Sentinel names.

=====================================================================  ==========================================
``redis://[[user]:password@]host[:port][/db]``, ``rediss://``, ``unix://``  one server (``redis.Redis.from_url``)
``redis+cluster://[[user]:password@]host:port[,host:port…]``, ``rediss+``   a Redis Cluster, from these seed nodes
``redis+sentinel://[[user]:password@]host:port[,…]/service[/db]``, ``rediss+``  the master of ``service``
=====================================================================  ==========================================

Options of mutexcron's own (``?prefix=…``) are taken out first; the rest go to redis-py as its URLs take them
(``socket_timeout``, ``health_check_interval``, …). Under Sentinel the user and password are the data nodes';
``?sentinel_password=…`` (masked like a password) authenticates to the sentinels. A cluster client reads the
cluster's slots on first use, not when built, so that building one connects to nothing (as the others).
"""

from __future__ import annotations

import inspect
import threading
from typing import Any, TypeAlias, TypeGuard
from urllib.parse import unquote, unquote_plus, urlsplit

import redis
from redis._parsers import Encoder
from redis.backoff import NoBackoff
from redis.cluster import ClusterNode, RedisCluster
from redis.connection import (
    URL_QUERY_ARGUMENT_PARSERS,
    AbstractConnection,
    Connection,
    SSLConnection,
    UnixDomainSocketConnection,
    parse_url,
)
from redis.exceptions import RedisClusterException
from redis.retry import Retry
from redis.sentinel import Sentinel

from ..errors import StoreConfigError
from ..urls import check_host_and_port, mask_url, pop_query_options, scrub, url_scheme

__all__ = ["CLUSTER_SCHEMES", "REDIS_ERRORS", "REDIS_SCHEMES", "SENTINEL_SCHEMES", "AnyRedis", "LazyRedisCluster",
           "client_from_url", "close_client", "is_cluster"]

AnyRedis: TypeAlias = "redis.Redis | RedisCluster"
CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster")
SENTINEL_SCHEMES = ("redis+sentinel", "rediss+sentinel")
REDIS_SCHEMES = ("redis", "rediss", "unix", *CLUSTER_SCHEMES, *SENTINEL_SCHEMES)
# What redis-py raises: RedisClusterException (no cluster node reachable, a slot not covered) is not a RedisError.
REDIS_ERRORS: tuple[type[Exception], ...] = (redis.RedisError, RedisClusterException)
DEFAULT_PORTS = {"cluster": 6379, "sentinel": 26379}
SENTINEL_OPTIONS = ("sentinel_password",)
_REDIS_PARAMETERS = inspect.signature(redis.Redis.__init__).parameters
_DEFAULT_OPTIONS: dict[str, Any] = {"socket_connect_timeout": 2, "socket_timeout": 5}  # s; the URL's options win
# A new connection asks nothing but HELLO (redis-py also sends CLIENT SETINFO twice and, from 7, CLIENT
# MAINT_NOTIFICATIONS, each waiting for its reply): on a slow link each of those delayed the first command of a
# connection opened at a fire, one round trip each, until a later tick's acquire overtook it (README, "Tested
# failures"). The client's own arguments still win.
_LEAN_HANDSHAKE: dict[str, Any] = (
    {"driver_info": None} if "driver_info" in _REDIS_PARAMETERS  # redis-py 8: None sends no CLIENT SETINFO
    else {"lib_name": None, "lib_version": None} if "lib_name" in _REDIS_PARAMETERS else {})
if "maint_notifications_config" in _REDIS_PARAMETERS:
    from redis.maint_notifications import MaintNotificationsConfig

    _LEAN_HANDSHAKE["maint_notifications_config"] = MaintNotificationsConfig(enabled=False)
_DEFAULT_OPTIONS.update(_LEAN_HANDSHAKE)


def is_cluster(client: object) -> TypeGuard[RedisCluster]:
    """Whether ``client`` is a Redis Cluster client (scripts then run on the node of their key's slot)."""
    return isinstance(client, RedisCluster)


class LazyRedisCluster(RedisCluster):
    """A :class:`~redis.cluster.RedisCluster` that reads the cluster's nodes and slots on first use, not when built
    (a plain ``redis.Redis`` connects on first use too): a scheduler or a Django project built while the cluster is
    down starts, and fails closed until it is back. A first use that cannot reach any node raises and is tried
    again at the next one."""

    def __init__(self, **options: Any) -> None:  # RedisCluster.__init__ runs on first use
        self.__dict__.update(_lazy_options=options, _lazy_lock=threading.Lock(), _lazy_ready=False)

    def _lazy_connect(self) -> None:
        with self._lazy_lock:
            if not self._lazy_ready:
                RedisCluster.__init__(self, **self._lazy_options)
                self.__dict__["_lazy_ready"] = True

    def __getattr__(self, name: str) -> Any:
        """Called only for an attribute not set yet: the cluster's state, which the first use builds."""
        if name.startswith("_lazy") or self.__dict__.get("_lazy_ready", True):
            raise AttributeError(name)
        self._lazy_connect()
        return getattr(self, name)

    def get_encoder(self) -> Encoder:
        """The encoder, without connecting (``register_script`` asks for it)."""
        if self._lazy_ready:
            return super().get_encoder()  # type: ignore[no-any-return, no-untyped-call]
        options = self._lazy_options
        return Encoder(options.get("encoding", "utf-8"), options.get("encoding_errors", "strict"),  # type: ignore[no-untyped-call]
                       options.get("decode_responses", False))

    def close(self) -> None:
        if self._lazy_ready:
            super().close()

    def __repr__(self) -> str:
        if self._lazy_ready:
            return super().__repr__()
        nodes = ",".join(f"{node.host}:{node.port}" for node in self._lazy_options["startup_nodes"])
        return f"<{type(self).__name__} {nodes} (not connected yet)>"


def close_client(client: AnyRedis) -> None:
    """Close ``client``, and the connections to the sentinels of a Sentinel-managed one."""
    client.close()
    if isinstance(client, RedisCluster):
        return
    manager = getattr(getattr(client, "connection_pool", None), "sentinel_manager", None)
    for sentinel in getattr(manager, "sentinels", ()):
        sentinel.close()


def _malformed(url: str, why: str) -> StoreConfigError:
    return StoreConfigError(f"malformed Redis URL {mask_url(url)!r}: {why}")


def _accepted_options(connection_class: type[AbstractConnection]) -> frozenset[str]:
    """The query options a URL may give a connection of ``connection_class`` (its keyword arguments), and the
    pool's: redis-py passes any other one on, and the connection refuses it only at the first command."""
    names = set(URL_QUERY_ARGUMENT_PARSERS) | {"max_connections"}
    for klass in connection_class.__mro__:
        if (init := klass.__dict__.get("__init__")) is not None:
            names.update(p.name for p in inspect.signature(init).parameters.values()
                         if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "self")
    return frozenset(names)


_ACCEPTED: dict[type[AbstractConnection], frozenset[str]] = {}


def _check_query(url: str, cleaned: str, own_options: tuple[str, ...]) -> None:
    """Refuse, when the URL is read, a query option that neither mutexcron nor redis-py takes (a typo such as
    ``?prefx=``), naming it."""
    scheme = urlsplit(cleaned).scheme
    connection_class: type[AbstractConnection] = (
        UnixDomainSocketConnection if scheme == "unix" else SSLConnection if scheme.startswith("rediss") else Connection
    )
    accepted = _ACCEPTED.get(connection_class) or _ACCEPTED.setdefault(connection_class,
                                                                       _accepted_options(connection_class))
    for pair in urlsplit(cleaned).query.split("&"):
        name = unquote_plus(pair.partition("=")[0])
        if pair and name not in accepted:
            ours = ", ".join(own_options) or "none"
            raise _malformed(url, f"unknown option {name!r} (mutexcron's own: {ours}; the others go to redis-py's "
                                  f"connections, which take socket_timeout, health_check_interval, …)")


def _nodes(text: str, default_port: int, url: str) -> list[tuple[str, int]]:
    """``host:port,host:port…`` (``[v6]:port`` too) as (host, port) pairs."""
    nodes = []
    for item in text.split(","):
        item = item.strip()
        if item.startswith("["):
            host, _, rest = item[1:].partition("]")
            if rest and not rest.startswith(":"):
                raise _malformed(url, f"bad node {item!r}")
            port_text = rest[1:]
        else:
            host, _, port_text = item.partition(":")
        if not host:
            raise _malformed(url, "every node needs a host (host:port,host:port…)")
        if port_text and not (port_text.isdigit() and 0 < int(port_text) < 65536):
            raise _malformed(url, f"port {port_text!r} of {host!r} is not a number from 1 to 65535")
        nodes.append((unquote(host), int(port_text) if port_text else default_port))
    return nodes


def _options(url: str, cleaned: str) -> dict[str, Any]:
    """The credentials, TLS and query options of a cluster or Sentinel URL, as redis-py's URLs give them."""
    parts = urlsplit(cleaned)
    userinfo, at, _ = parts.netloc.rpartition("@")
    tls = parts.scheme.startswith("rediss")
    try:
        options: dict[str, Any] = parse_url(f"{'rediss' if tls else 'redis'}://localhost/?{parts.query}")  # type: ignore[no-untyped-call]
    except ValueError as error:
        raise _malformed(url, scrub(str(error), url)) from None
    for name in ("host", "port", "db", "connection_class"):
        options.pop(name, None)
    if at:
        username, colon, password = userinfo.partition(":")
        if username:
            options["username"] = unquote(username)
        if colon and password:
            options["password"] = unquote(password)
    if tls:
        options["ssl"] = True
    return options


def _cluster(url: str, cleaned: str, client_options: dict[str, Any]) -> LazyRedisCluster:
    parts = urlsplit(cleaned)
    if parts.path.strip("/"):
        raise _malformed(url, "a cluster has only database 0: no path after the nodes")
    nodes = _nodes(parts.netloc.rpartition("@")[2], DEFAULT_PORTS["cluster"], url)
    options = {**_DEFAULT_OPTIONS, **_options(url, cleaned), **client_options}
    startup_nodes = [ClusterNode(host, port) for host, port in nodes]  # type: ignore[no-untyped-call]
    return LazyRedisCluster(startup_nodes=startup_nodes, **options)


def _sentinel(url: str, cleaned: str, sentinel_options: dict[str, str], client_options: dict[str, Any]) -> redis.Redis:
    parts = urlsplit(cleaned)
    path = [unquote(piece) for piece in parts.path.strip("/").split("/") if piece]
    if not path or len(path) > 2:
        raise _malformed(url, "name the service: redis+sentinel://host:port[,host:port…]/service_name[/db]")
    if len(path) == 2 and not path[1].isdigit():
        raise _malformed(url, f"database {path[1]!r} is not a number")
    nodes = _nodes(parts.netloc.rpartition("@")[2], DEFAULT_PORTS["sentinel"], url)
    options = {**_DEFAULT_OPTIONS, **_options(url, cleaned), **client_options}
    for_sentinels: dict[str, Any] = {name: value for name, value in options.items() if name.startswith("socket_")}
    # A sentinel that does not answer is skipped for the next (redis-py's default retries each with back-off,
    # seconds per call while all are down); the master's connections keep redis-py's retries.
    for_sentinels["retry"] = Retry(NoBackoff(), 0)
    if options.get("ssl"):
        for_sentinels["ssl"] = True
    if sentinel_options.get("sentinel_password"):
        for_sentinels["password"] = sentinel_options["sentinel_password"]
    # Typed as Any: redis-py annotates Sentinel only from 8.2 on, and the extra allows redis>=5.
    sentinel: Any = Sentinel(nodes, sentinel_kwargs=for_sentinels, **options)
    master: redis.Redis = sentinel.master_for(path[0], db=int(path[1]) if len(path) == 2 else 0)
    return master


def client_from_url(
    url: str, own_options: tuple[str, ...], **client_options: Any
) -> tuple[AnyRedis, str, dict[str, str]]:
    """A client for ``url`` (any scheme of :data:`REDIS_SCHEMES`) with short default timeouts.

    Returns the client, the URL without mutexcron's ``own_options`` (for display), and their values.
    Malformed URLs raise StoreConfigError without the password (redis-py ignores a bad database number).
    """
    scheme = url_scheme(url) or ""
    extra = SENTINEL_OPTIONS if scheme in SENTINEL_SCHEMES else ()
    cleaned, options = pop_query_options(url, own_options + extra)
    sentinel_options = {name: options.pop(name) for name in extra if name in options}
    _check_query(url, cleaned, own_options + extra)
    if scheme in CLUSTER_SCHEMES:
        return _cluster(url, cleaned, client_options), cleaned, options
    if scheme in SENTINEL_SCHEMES:
        return _sentinel(url, cleaned, sentinel_options, client_options), cleaned, options
    for name, value in _DEFAULT_OPTIONS.items():
        client_options.setdefault(name, value)  # the URL's own options take precedence (redis-py's from_url)
    check_host_and_port(cleaned)
    parts = urlsplit(cleaned)
    database = parts.path.strip("/")
    if parts.scheme in ("redis", "rediss") and database and not database.isdigit():
        raise _malformed(url, f"database {database!r} is not a number")
    try:
        client = redis.Redis.from_url(cleaned, **client_options)
    except (ValueError, TypeError) as error:
        raise _malformed(url, scrub(str(error), url)) from None
    return client, cleaned, options
