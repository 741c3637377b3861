"""Ping URLs (healthchecks.io, Cronitor): the URL of each kind of ping, and the masked form shown to people.

Those services put the secret in the path (``https://hc-ping.com/<uuid>``, ``/p/<api-key>/<job>``), so every
log line, error, repr and metric label shows a ping URL as :func:`mask_ping_url` gives it: scheme, host and
port, the rest hidden.
"""

from __future__ import annotations

from typing import Literal
from urllib.parse import urlsplit

from .urls import MASK

__all__ = ["PING_SUFFIXES", "PingKind", "PingURL", "mask_ping_url", "ping_origin", "ping_target"]

PingKind = Literal["success", "fail", "start"]
# What goes after the URL's path for each kind of ping, as healthchecks.io and Cronitor's hc-style endpoints read it.
PING_SUFFIXES: dict[PingKind, str] = {"success": "", "fail": "/fail", "start": "/start"}


def ping_target(url: str, kind: PingKind = "success") -> str:
    """The URL to GET for a ``kind`` ping of ``url``: its suffix (``/fail``, ``/start``) after the path, before
    the query, which is kept as written (``https://hc-ping.com/<uuid>?rid=1`` fails at ``…/<uuid>/fail?rid=1``).
    A trailing ``/`` of the path is dropped first; the fragment is never sent."""
    without_fragment = url.partition("#")[0]
    base, mark, query = without_fragment.partition("?")
    return base.rstrip("/") + PING_SUFFIXES[kind] + mark + query


def ping_origin(url: str) -> str:
    """``scheme://host[:port]`` of ``url``, no user name or password: the only part of a ping URL that may be
    shown (a metric label, a log line). ``scheme://***`` when the host cannot be told safely (an ``@`` after a
    ``/``, ``?`` or ``#``: a password holding ``/`` would be read as the host), ``***`` for no URL at all."""
    scheme, separator, rest = url.partition("://")
    if not separator or not scheme.isascii() or not scheme.isalpha():
        return MASK
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port
    except ValueError:
        host = port = None
    if host is None or "@" in rest[_netloc_length(rest):]:
        return f"{scheme.lower()}://{MASK}"
    shown = f"[{host}]" if ":" in host else host
    return f"{scheme.lower()}://{shown}" + (f":{port}" if port is not None else "")


def _netloc_length(rest: str) -> int:
    """The length of the host part of ``rest`` (a URL after its ``://``): up to its first ``/``, ``?`` or ``#``."""
    ends = [index for index in (rest.find(cut) for cut in "/?#") if index >= 0]
    return min(ends, default=len(rest))


def mask_ping_url(url: str) -> str:
    """``url`` as people may see it: ``scheme://host[:port]``, and ``/***`` in place of anything after it (the
    path and query, which hold the ping's secret)."""
    origin = ping_origin(url)
    if origin == MASK:
        return MASK
    rest = url.partition("://")[2]
    return origin + (f"/{MASK}" if rest[_netloc_length(rest):].strip("/") else "")


class PingURL(str):
    """A job's ``ping_url``: the URL itself, whose repr is masked, so that a Job's repr, a debugger or a
    traceback's locals show no secret."""

    __slots__ = ()

    def __repr__(self) -> str:
        return repr(mask_ping_url(self))
