"""Real servers for the tests: the local Redis, and a MongoDB wire-protocol server process.

There is no mongod on the CI machine, so unless ``MUTEXCRON_TEST_MONGO_URL`` points at a real MongoDB
we start mongoeco's wire server (tests/support/mongo_server.py) under Python 3.13 and talk to it with pymongo.
"""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import redis

from tests.support import wait_until

ROOT = Path(__file__).resolve().parents[2]
REDIS_URL = os.environ.get("MUTEXCRON_TEST_REDIS_URL", "redis://127.0.0.1:6379/9")
MONGO_URL_ENV = "MUTEXCRON_TEST_MONGO_URL"
MONGOECO_PYTHON_ENV = "MUTEXCRON_MONGOECO_PYTHON"


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


_EPHEMERAL = _ephemeral_range()
_handed_out: set[int] = set()


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on right now, outside the kernel's ephemeral range.

    Below that range, so that no outgoing connection of the busy suites beside us takes it between this
    answer and the server's bind (the node would fail with "Address already in use"), nor
    while a test has killed its server and not yet restarted it. Never the same port twice in one process.
    """
    low = 20000 if _EPHEMERAL[0] > 21000 else 1024
    high = _EPHEMERAL[0] - 1 if _EPHEMERAL[0] > low + 1000 else 65535
    for _ in range(1000):
        port = random.randint(low, high)
        if port in _handed_out or _EPHEMERAL[0] <= port <= _EPHEMERAL[1]:
            continue
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    with socket.socket() as probe:  # the ephemeral range covers (nearly) every port: take one of it
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def stop_process(process: subprocess.Popen[Any], timeout: float = 10) -> None:
    """SIGTERM ``process`` if it still runs, and reap it (SIGKILL after ``timeout`` seconds)."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def start_redis_server(port: int, *options: str) -> subprocess.Popen[bytes]:
    """``redis-server`` on ``port`` of 127.0.0.1 without persistence, with ``options``, once it answers PING."""
    process = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", *options],
        stdout=subprocess.DEVNULL,
    )
    client = redis.Redis(host="127.0.0.1", port=port, socket_connect_timeout=1, retry=None)

    def answers() -> bool:
        if process.poll() is not None:
            raise RuntimeError(f"redis-server {' '.join(options)} exited on port {port}")
        try:
            return bool(client.ping())
        except redis.ConnectionError:
            return False

    try:
        wait_until(answers, timeout=10, what=f"redis-server on port {port}", interval=0.01)
    except BaseException:
        process.terminate()
        process.wait(10)
        raise
    finally:
        client.close()
    return process


class PrivateRedis:
    """A redis-server of one test's own on a free port (for settings the shared server must keep), without
    persistence; ``with PrivateRedis("--maxmemory-policy", "allkeys-lru") as url:`` stops it at the end."""

    def __init__(self, *options: str) -> None:
        self.options = options
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> str:
        port = free_port()
        self.process = start_redis_server(port, *self.options)
        return f"redis://127.0.0.1:{port}/0"

    def __exit__(self, *exc_info: object) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(10)
            self.process = None


def mongoeco_python() -> str:
    """The interpreter that has mongoeco installed: $MUTEXCRON_MONGOECO_PYTHON or .venv-mongo/bin/python."""
    candidate = os.environ.get(MONGOECO_PYTHON_ENV) or str(ROOT / ".venv-mongo" / "bin" / "python")
    if not (Path(candidate).exists() or shutil.which(candidate)):
        raise RuntimeError(
            f"no MongoDB for the tests: set {MONGO_URL_ENV} to a real MongoDB, or create the mongoeco "
            f"environment with `make .venv-mongo` (looked for {candidate})"
        )
    return candidate


class MongoWireServer:
    """A mongoeco wire server in its own process, on a free port of 127.0.0.1."""

    def __init__(self) -> None:
        self.process: subprocess.Popen[str] | None = None
        self.port: int | None = None

    def start(self, port: int = 0, timeout: float = 60.0, path: Path | None = None) -> str:
        """Start it (on ``port``, 0: a free one), its data in memory or, with ``path``, in that SQLite file."""
        self.process = subprocess.Popen(
            [mongoeco_python(), str(ROOT / "tests" / "support" / "mongo_server.py"), str(port),
             *([str(path)] if path is not None else [])],
            stdout=subprocess.PIPE,
            stderr=sys.stderr,
            text=True,
        )
        deadline = time.monotonic() + timeout
        assert self.process.stdout is not None
        line = self.process.stdout.readline()  # blocks until READY (or the process dies)
        if not line.startswith("READY") or time.monotonic() > deadline:
            self.stop()
            raise RuntimeError(f"mongoeco wire server did not start: {line!r}")
        self.port = int(line.split()[1])
        return self.url

    @property
    def url(self) -> str:
        return f"mongodb://127.0.0.1:{self.port}/?directConnection=true"

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process)
        if self.process is not None and self.process.stdout is not None:
            self.process.stdout.close()
        self.process = None
