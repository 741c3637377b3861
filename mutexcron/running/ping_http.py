"""One ping: a GET with a total deadline and a strict redirect policy (:class:`PingRequest`).

``urlopen(timeout=...)`` bounds each socket operation, not the request: a server that trickles its headers a
byte at a time, or a resolver that does not answer, holds it for as long as they like. So the request runs in
a thread of its own, which the caller waits for until the deadline and then abandons: every socket the request
opened is shut down, which ends a connect, a TLS handshake or a read at once. Name resolution cannot be
interrupted; an abandoned request still resolving ends when the resolver gives up, and
:class:`~mutexcron.running.pings.Pings` starts no other request to that host meanwhile.

Redirects: at most :data:`MAX_REDIRECTS`, to the same host only, and to the same scheme and port or from
``http`` up to ``https`` (any port); any other redirect is a failed ping.
"""

from __future__ import annotations

import http.client
import socket
import ssl
import threading
import time
import urllib.request
from contextlib import suppress
from typing import Any
from urllib.error import HTTPError, URLError
from urllib.parse import unquote, urljoin, urlsplit

from ..ping_urls import mask_ping_url
from ..urls import MASK

__all__ = ["MAX_REDIRECTS", "PingRequest"]

MAX_REDIRECTS = 3  # a ping service redirects once (http to https, an old path); more is a loop or a mistake
_REDIRECTS = (301, 302, 303, 307, 308)
_DEFAULT_PORTS = {"http": 80, "https": 443}
_ANSWER_BYTES = 1024  # of the body read: a ping's answer is "OK"


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """Every 3xx comes back as an HTTPError: :meth:`PingRequest._get` follows it, or not, by its own rules."""

    def http_error_302(self, req: Any, fp: Any, code: Any, msg: Any, headers: Any) -> None:
        return None

    http_error_301 = http_error_303 = http_error_307 = http_error_308 = http_error_302


def _redirect_refusal(origin: str, target: str) -> str | None:
    """Why a redirect from ``origin`` to ``target`` is not followed, or None if it is."""
    old, new = urlsplit(origin), urlsplit(target)
    try:
        old_port = old.port or _DEFAULT_PORTS.get(old.scheme)
        new_port = new.port or _DEFAULT_PORTS.get(new.scheme)
    except ValueError:
        return "a malformed Location"
    if new.scheme not in _DEFAULT_PORTS:
        return "not an http(s) URL"
    if (new.hostname or "") != (old.hostname or ""):
        return "another host"
    if new.scheme == old.scheme:
        return None if new_port == old_port else "another port"
    return None if (old.scheme, new.scheme) == ("http", "https") else "https down to http"


def scrub_ping(text: str, *urls: str) -> str:
    """``text`` (an error message) without the paths and queries of ``urls``, as written or unquoted."""
    secrets: set[str] = set()
    for url in urls:
        parts = urlsplit(url)
        for piece in (parts.path, parts.query, parts.fragment, parts.netloc.rpartition("@")[0],
                      *[segment for segment in parts.path.split("/") if len(segment) >= 8]):
            if piece.strip("/"):
                secrets.update({piece, unquote(piece)})
    for secret in sorted(secrets, key=len, reverse=True):
        text = text.replace(secret, MASK)
    return text


class PingRequest:
    """One ping's GET, started in a thread of its own by :meth:`start`; :meth:`wait` gives its result by the
    deadline, abandoning it then (its sockets shut down)."""

    def __init__(self, url: str, timeout: float, context: ssl.SSLContext | None = None) -> None:
        self.url = url
        self.timeout = timeout
        self.deadline = time.monotonic() + timeout
        self._opener = urllib.request.build_opener(
            _NoRedirects(), _Handler(self), _HTTPSHandler(self, context))
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._abandoned = False
        self._over = threading.Event()  # the request ended, or was abandoned
        self._error: str | None = "not sent"  # None once the server answered 2xx
        self.thread = threading.Thread(target=self._run, name="mutexcron-ping-request", daemon=True)

    def start(self) -> PingRequest:
        self.thread.start()
        return self

    def wait(self) -> str | None:
        """None if the ping was answered 2xx by the deadline, else why not (no secret in it)."""
        if not self._over.wait(max(0.0, self.deadline - time.monotonic())):
            self.abandon()
        with self._lock:
            if self._abandoned:
                return f"no answer within its deadline ({self.timeout:.3g}s)"
            return self._error

    def abandon(self) -> None:
        """Give up (at the deadline, or at shutdown): shut down every socket this request opened, and any it
        opens later, so that its thread ends at once, unless it is still resolving the host's name."""
        with self._lock:
            if self._over.is_set():
                return
            self._abandoned = True
            self._over.set()
            sockets = list(self._sockets)
        for sock in sockets:
            _shut(sock)

    def create_connection(self, address: tuple[str, int], timeout: object = None,
                          source_address: tuple[str, int] | None = None) -> socket.socket:
        """``socket.create_connection`` (http.client's hook) with what is left of the deadline as its timeout,
        whose socket :meth:`abandon` can shut down."""
        sock = socket.create_connection(address, self._timeout(), source_address)
        with self._lock:
            self._sockets.append(sock)
            kept = not self._abandoned
        if not kept:  # abandoned while connecting
            sock.close()
            raise TimeoutError("the ping was abandoned")
        return sock

    def _timeout(self) -> float:
        """What is left of the deadline, for the next socket operation."""
        left = self.deadline - time.monotonic()
        if left <= 0 or self._over.is_set():
            raise TimeoutError("the ping's deadline passed")
        return left

    def _run(self) -> None:
        try:
            error = self._get()
        except Exception as problem:  # whatever it is, it is this ping's failure, told in the log
            error = scrub_ping(_describe(problem), self.url)
        with self._lock:
            self._error = error
            self._over.set()

    def _get(self) -> str | None:
        url = self.url
        for _ in range(MAX_REDIRECTS + 1):
            request = urllib.request.Request(url, method="GET", headers={"User-Agent": "mutexcron"})
            try:
                with self._opener.open(request, timeout=self._timeout()) as response:
                    response.read(_ANSWER_BYTES)
                return None
            except HTTPError as error:
                with error:
                    location = error.headers.get("Location") if error.code in _REDIRECTS else None
                if location is None:
                    return f"HTTP {error.code}"
                target = urljoin(url, location)
                refusal = _redirect_refusal(url, target)
                if refusal is not None:
                    return (f"HTTP {error.code} redirects to {mask_ping_url(target)} ({refusal}): not followed, "
                            "only redirects to the same host and scheme or from http to https are")
                url = target
        return f"more than {MAX_REDIRECTS} redirects"


def _describe(error: BaseException) -> str:
    if isinstance(error, URLError) and not isinstance(error, HTTPError):
        reason = error.reason
        return reason if isinstance(reason, str) else f"{type(reason).__name__}: {reason}"
    return f"{type(error).__name__}: {error}"


def _shut(sock: socket.socket) -> None:
    with suppress(OSError):  # not connected yet, or already closed
        socket.socket.shutdown(sock, socket.SHUT_RDWR)  # the raw socket's, under a TLS layer too


class _Handler(urllib.request.HTTPHandler):
    def __init__(self, request: PingRequest) -> None:
        super().__init__()
        self._request = request

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(self._connection, req)

    def _connection(self, host: str, **options: Any) -> http.client.HTTPConnection:
        connection = http.client.HTTPConnection(host, **options)
        connection._create_connection = self._request.create_connection  # type: ignore[attr-defined]
        return connection


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, request: PingRequest, context: ssl.SSLContext | None) -> None:
        super().__init__(context=context)
        self._request = request

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(self._connection, req, context=self._context)  # type: ignore[attr-defined]

    def _connection(self, host: str, **options: Any) -> http.client.HTTPSConnection:
        connection = http.client.HTTPSConnection(host, **options)
        connection._create_connection = self._request.create_connection  # type: ignore[attr-defined]
        return connection
