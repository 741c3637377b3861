"""Local HTTP(S) servers for the ping tests (tests/ops/test_pings.py, tests/ops/test_ping_redirects.py): real sockets on
127.0.0.1, port 0. Every wait in them is bounded, so that a server stops by itself whatever the client does."""

from __future__ import annotations

import shutil
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

HOLD_AT_MOST = 10.0  # seconds a held answer waits for its test to let it go


class _Quiet(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


def _serve(handler: type[BaseHTTPRequestHandler], tls: ssl.SSLContext | None = None) -> ThreadingHTTPServer:
    """``handler`` served on a free port of 127.0.0.1, by a daemon thread, until ``shutdown()``."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    if tls is not None:
        httpd.socket = tls.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


def _stop(httpd: ThreadingHTTPServer) -> None:
    httpd.shutdown()
    httpd.server_close()


class PingServer:
    """Records the paths (with their query) it is asked for; ``status`` and ``hold`` shape its answers, and
    ``redirects`` maps a path to the ``Location`` of a 302. ``host`` is the name its URLs use (it listens on
    127.0.0.1 either way: ``localhost`` is another host to a ping). With ``tls``, it speaks HTTPS."""

    def __init__(self, host: str = "127.0.0.1", tls: ssl.SSLContext | None = None) -> None:
        self.paths: list[str] = []
        self.status = 200
        self.redirects: dict[str, str] = {}
        self.hold = threading.Event()  # while clear, answers wait for it (a slow ping server)
        self.hold.set()
        server = self

        class Handler(_Quiet):
            def do_GET(self) -> None:
                server.paths.append(self.path)
                server.hold.wait(HOLD_AT_MOST)
                location = server.redirects.get(self.path)
                self.send_response(302 if location is not None else server.status)
                if location is not None:
                    self.send_header("Location", location)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"OK")

        self.httpd = _serve(Handler, tls)
        self.origin = f"{'https' if tls else 'http'}://{host}:{self.httpd.server_address[1]}"
        self.url = f"{self.origin}/ping/3f1c"

    def close(self) -> None:
        self.hold.set()
        _stop(self.httpd)


class TricklingServer:
    """Answers ``200 OK`` and then one byte of a header every ``interval`` seconds, at most ``limit`` bytes, so
    that no socket operation ever waits long; notes how long each client stayed (``held``) once it leaves."""

    def __init__(self, interval: float = 0.1, limit: int = 150) -> None:
        self.held: list[float] = []
        self.gone = threading.Event()
        self.stop = threading.Event()
        server = self

        class Handler(_Quiet):
            def do_GET(self) -> None:
                started = time.monotonic()
                try:
                    self.wfile.write(b"HTTP/1.1 200 OK\r\nX-Slow: ")
                    for _ in range(limit):
                        if server.stop.wait(interval):
                            break
                        self.wfile.write(b"x")
                        self.wfile.flush()
                    self.wfile.write(b"\r\nContent-Length: 2\r\n\r\nOK")
                except OSError:
                    pass  # the client left: what the test waits for
                server.held.append(time.monotonic() - started)
                server.gone.set()

        self.httpd = _serve(Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/ping/3f1c"

    def close(self) -> None:
        self.stop.set()
        _stop(self.httpd)


@contextmanager
def serving(*servers: PingServer | TricklingServer) -> Iterator[None]:
    try:
        yield
    finally:
        for server in servers:
            server.close()


@pytest.fixture(scope="session")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key (openssl's command line)."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("the HTTPS ping tests need the openssl command to make a certificate")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True, timeout=60)
    return cert, key


@pytest.fixture
def server_tls(tls_files: tuple[Path, Path]) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*tls_files)
    return context


@pytest.fixture
def client_tls(tls_files: tuple[Path, Path]) -> ssl.SSLContext:
    """A client context that trusts the test certificate (and verifies it, as the default one does)."""
    return ssl.create_default_context(cafile=str(tls_files[0]))
