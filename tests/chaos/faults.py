"""The faults of the chaos tests, each on a server of the test's own: a redis-server that can be SIGKILLed and
started again on its port, a RabbitMQ vhost whose connections the broker closes, the backends of a PostgreSQL
database terminated; and how to read what the processes logged about them."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.support.fleet import Member
from tests.support.servers import free_port, start_redis_server, stop_process

UNREACHABLE = "lock store unreachable"  # mutexcron.ops.health.StoreHealth: the one error of an outage
BACK = "lock store reachable again"  # ... and its one line once the store answers again


class RedisServer:
    """A ``redis-server`` of one test's own on a free port, without persistence (``--save "" --appendonly no``),
    that the test can SIGKILL and start again on the same port: it comes back empty, as such a server does."""

    def __init__(self, directory: Path) -> None:
        self.port = free_port()
        self.directory = directory
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> float:
        """Start it and wait until it answers; returns when it did (time.time())."""
        assert self.process is None or self.process.poll() is not None, "redis-server is already running"
        self.starts += 1
        log = self.directory / f"redis-{self.port}-{self.starts}.log"
        self.process = start_redis_server(self.port, "--logfile", str(log))
        return time.time()

    def kill(self) -> float:
        """SIGKILL it (no shutdown, nothing saved) and reap it; returns when (time.time())."""
        assert self.process is not None and self.process.poll() is None, "redis-server is not running"
        self.process.send_signal(signal.SIGKILL)
        killed_at = time.time()
        self.process.wait(10)
        return killed_at

    def close(self) -> None:
        if self.process is not None:
            stop_process(self.process)
        self.process = None


@contextmanager
def redis_server(directory: Path) -> Iterator[RedisServer]:
    server = RedisServer(directory)
    server.start()
    try:
        yield server
    finally:
        server.close()


# -- RabbitMQ: a vhost of the test's own ----------------------------------------------------------------------


def rabbitmqctl(*args: str, timeout: float = 60) -> str:
    """Run ``rabbitmqctl -q ARGS`` (as root it reads the broker's Erlang cookie); its output, or fail the test."""
    assert shutil.which("rabbitmqctl"), "rabbitmqctl is not installed"
    done = subprocess.run(["rabbitmqctl", "-q", *args], capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"rabbitmqctl {' '.join(args)} exited {done.returncode}: {done.stderr}{done.stdout}"
    return done.stdout


@contextmanager
def rabbitmq_vhost() -> Iterator[str]:
    """A new vhost, ``mutexcron-chaos-<hex>``, that guest may use; deleted (with all it holds) afterwards."""
    name = f"mutexcron-chaos-{uuid.uuid4().hex[:10]}"
    rabbitmqctl("add_vhost", name)
    try:
        rabbitmqctl("set_permissions", "-p", name, "guest", ".*", ".*", ".*")
        yield name
    finally:
        rabbitmqctl("delete_vhost", name)


def vhost_connections(vhost: str) -> list[dict[str, Any]]:
    """The client connections of ``vhost`` (name, user_provided_name, state)."""
    listed = rabbitmqctl("list_connections", "-p", vhost, "--formatter", "json", "name", "state")
    return [entry for entry in json.loads(listed or "[]") if isinstance(entry, dict)]


def close_vhost_connections(vhost: str, why: str = "chaos") -> None:
    """The broker closes every client connection of ``vhost`` (connection.close with ``why``)."""
    rabbitmqctl("close_all_connections", "-p", vhost, why)


# -- PostgreSQL ---------------------------------------------------------------------------------------------


def terminate_backends(dbname: str) -> int:
    """``pg_terminate_backend`` every other connection to ``dbname``; how many were terminated."""
    import psycopg

    from tests.django.fleet_support import pg_params

    with psycopg.connect(**pg_params(dbname), autocommit=True) as connection:
        rows = connection.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            (dbname,),
        ).fetchall()
    return sum(1 for (terminated,) in rows if terminated)


# -- logs ---------------------------------------------------------------------------------------------------


def log_lines(process: Member, text: str) -> list[str]:
    """The lines of ``process``'s log (stdout and stderr) that contain ``text``, as the process's own logging
    wrote them (``<time> <name> <thread> …``; a Django site's LOGGING may write each record a second time)."""
    return [line for line in process.text().splitlines() if text in line and f" {process.name} " in line]
