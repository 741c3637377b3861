"""Each STORE of the nemesis run: private servers on free ports (never the shared ones, which other suites use),
the URLs the fleet's processes get, and the store faults the nemesis can do to them.

A server the nemesis restarts keeps what it acknowledged, as a production server must for the guarantees to hold
(docs/guarantees.md: a Redis without persistence forgets which ticks ran): Redis runs with ``appendfsync always``,
PostgreSQL and MariaDB recover from their logs. The link faults go through a TCP proxy of the harness's own
(tests/support/tcp_proxy.py) that some of the processes connect through.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.support import wait_until
from tests.support.scale_out import PrivateCluster, PrivateSentinel
from tests.support.servers import free_port, start_redis_server, stop_process
from tests.support.tcp_proxy import ProxyProcess

STORES = ("redis", "cluster", "sentinel", "postgres", "mariadb", "mongo")
PG_BIN = next(iter(sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)), Path("/usr/bin"))
Undo = Callable[[], object]  # undoes a fault (what it returns is ignored)


@dataclass
class Settings:
    """What one process of the fleet connects to (written into the run's config.json, or its environment)."""

    store_url: str
    tasks_url: str
    cancel_store: str | None = None
    django: str | None = None  # the settings module, for django:// URLs
    env: dict[str, str] = field(default_factory=dict)


class Store:
    """One STORE's servers. ``kinds``: the store faults it can take; :meth:`inject` does one and returns its undo
    (None: the fault is over when it returns)."""

    kinds: tuple[str, ...] = ()
    proxied = True  # link faults: some processes reach the store through the harness's proxy

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.proxy: ProxyProcess | None = None

    def start(self) -> None:
        raise NotImplementedError

    def target(self) -> tuple[str, int]:
        """Where the proxy forwards to."""
        raise NotImplementedError

    def settings(self, through_proxy: bool) -> Settings:
        raise NotImplementedError

    def inject(self, kind: str) -> Undo | None:
        raise NotImplementedError(f"{type(self).__name__} has no fault {kind!r}")

    def start_proxy(self) -> None:
        if self.proxied:
            self.proxy = ProxyProcess(*self.target())

    def close(self) -> None:
        if self.proxy is not None:
            self.proxy.close()


class RedisStore(Store):
    """One redis-server with an append-only file fsync'ed at every write; the task queue on it too."""

    kinds = ("store_restart",)

    def __init__(self, directory: Path) -> None:
        super().__init__(directory)
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        data = self.directory / "redis"
        data.mkdir(exist_ok=True)
        self.process = start_redis_server(self.port, "--appendonly", "yes", "--appendfsync", "always",
                                          "--dir", str(data), "--logfile", str(data / "redis.log"))

    def target(self) -> tuple[str, int]:
        return "127.0.0.1", self.port

    def settings(self, through_proxy: bool) -> Settings:
        port = self.proxy.port if through_proxy and self.proxy is not None else self.port
        return Settings(f"redis://127.0.0.1:{port}/0", f"redis://127.0.0.1:{port}/0")

    def inject(self, kind: str) -> Undo | None:
        assert kind == "store_restart" and self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)
        return self.start

    def close(self) -> None:
        super().close()
        if self.process is not None:
            stop_process(self.process)


class ClusterStore(Store):
    """A private Redis Cluster (3 masters, a replica each); acquires wait for a replica (``wait_replicas=1``), so
    a failover loses no acquire. The nemesis SIGKILLs a master and starts it again as a replica."""

    kinds = ("master_kill",)
    proxied = False  # a cluster client follows the nodes' own addresses, past any proxy

    def start(self) -> None:
        self.cluster = PrivateCluster(self.directory / "cluster").start()

    def settings(self, through_proxy: bool) -> Settings:
        url = self.cluster.url + "?wait_replicas=1"
        return Settings(url, self.cluster.url)

    def inject(self, kind: str) -> Undo | None:
        masters = [port for port in self.cluster.ports
                   if self.cluster.processes[port].poll() is None and self.cluster.role(port) == "master"]
        port = masters[int(time.monotonic() * 1000) % len(masters)]
        replica = self.cluster.replica_of(port)
        self.cluster.kill(port)

        def undo() -> None:  # once its replica took over: started earlier, the empty node would come back a master
            wait_until(lambda: self.cluster.role(replica) == "master", 30, "the cluster to promote the replica")
            self.cluster.restart(port)
            self.cluster.wait_healthy(60)

        return undo

    def close(self) -> None:
        self.cluster.close()


class SentinelStore(Store):
    """A private Sentinel group (a master, a replica, three sentinels); acquires wait for the replica."""

    kinds = ("failover",)
    proxied = False  # sentinel clients connect to the addresses the sentinels give

    def start(self) -> None:
        self.group = PrivateSentinel(self.directory / "sentinel").start()

    def settings(self, through_proxy: bool) -> Settings:
        return Settings(self.group.url + "/0?wait_replicas=1", self.group.url + "/0")

    def inject(self, kind: str) -> Undo | None:
        master = self.group.master()
        if master is None:
            return None
        self.group.kill(master)

        def undo() -> None:
            wait_until(lambda: self.group.master() not in (None, master), 30, "the sentinels to promote the replica")
            self.group.restart(master)
            self.group.wait_healthy(60)

        return undo

    def close(self) -> None:
        self.group.close()


class PostgresStore(Store):
    """A private PostgreSQL server (initdb in the run's directory) that the nemesis restarts (an immediate stop:
    it recovers from its WAL) and whose backends it terminates; the Django store and SQL task backend on it."""

    kinds = ("pg_terminate", "pg_restart")

    def __init__(self, directory: Path) -> None:
        super().__init__(directory)
        self.port = free_port()
        # Its own temporary directory, not the run's: as root the server runs as the postgres user, which may not
        # enter the run's directory (pytest's tmp_path is private to root).
        self.home = Path(tempfile.mkdtemp(prefix="mutexcron-nemesis-pg-"))
        self.data = self.home / "data"

    def _as_postgres(self, *command: str) -> None:
        prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        done = subprocess.run([*prefix, *command], capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} exited {done.returncode}: {done.stdout}{done.stderr}")

    def start(self) -> None:
        if not self.data.exists():
            if os.geteuid() == 0:
                shutil.chown(self.home, "postgres")
            self._as_postgres(str(PG_BIN / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust", "-N")
        self._as_postgres(str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-l", str(self.home / "postgres.log"),
                          "-w", "-o", f"-p {self.port} -k {self.data} -c listen_addresses=127.0.0.1 -c fsync=off "
                                      "-c max_connections=300", "start")

    def stop(self) -> None:
        self._as_postgres(str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop")

    def target(self) -> tuple[str, int]:
        return "127.0.0.1", self.port

    def settings(self, through_proxy: bool) -> Settings:
        port = self.proxy.port if through_proxy and self.proxy is not None else self.port
        env = {"NEMESIS_DB_ENGINE": "postgresql", "NEMESIS_DB_NAME": "postgres", "NEMESIS_DB_PORT": str(port)}
        return Settings("django://", "django://", django="tests.nemesis.django_settings", env=env)

    def inject(self, kind: str) -> Undo | None:
        if kind == "pg_restart":
            self.stop()
            return self.start
        import psycopg

        with psycopg.connect(host="127.0.0.1", port=self.port, user="postgres", dbname="postgres",
                             autocommit=True, connect_timeout=5) as connection:
            connection.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                               "WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()")
        return None

    def close(self) -> None:
        super().close()
        with contextlib.suppress(RuntimeError, subprocess.SubprocessError):
            self.stop()
        with contextlib.suppress(OSError):
            shutil.copy(self.home / "postgres.log", self.directory / "postgres.log")
        shutil.rmtree(self.home, ignore_errors=True)


class MariaDBStore(Store):
    """A private MariaDB server (mariadb-install-db in the run's directory) that the nemesis SIGKILLs and starts
    again (InnoDB recovers from its redo log) and whose connections it kills; the Django store and task backend."""

    kinds = ("mariadb_kill", "mariadb_restart")

    def __init__(self, directory: Path) -> None:
        super().__init__(directory)
        self.port = free_port()
        self.data = directory / "mariadb"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        if not self.data.exists():
            subprocess.run(["mariadb-install-db", "--no-defaults", f"--datadir={self.data}", "--user=root",
                            "--auth-root-authentication-method=normal", "--skip-test-db"],
                           check=True, capture_output=True, timeout=120)
        self.process = subprocess.Popen(
            ["mariadbd", "--no-defaults", f"--datadir={self.data}", f"--port={self.port}",
             f"--socket={self.directory / 'mariadb.sock'}", "--bind-address=127.0.0.1", "--user=root",
             f"--log-error={self.directory / 'mariadb.log'}", "--max-connections=300"])
        wait_until(lambda: self._query("SELECT 1") is not None, 60, "the private MariaDB to answer")
        self._query("CREATE DATABASE IF NOT EXISTS nemesis")

    def _query(self, sql: str) -> object:
        import MySQLdb

        try:
            connection = MySQLdb.connect(host="127.0.0.1", port=self.port, user="root", connect_timeout=2)
        except MySQLdb.OperationalError:
            assert self.process is not None and self.process.poll() is None, "mariadbd exited"
            return None
        try:
            cursor = connection.cursor()
            cursor.execute(sql)
            return cursor.fetchall()
        finally:
            connection.close()

    def target(self) -> tuple[str, int]:
        return "127.0.0.1", self.port

    def settings(self, through_proxy: bool) -> Settings:
        port = self.proxy.port if through_proxy and self.proxy is not None else self.port
        env = {"NEMESIS_DB_ENGINE": "mysql", "NEMESIS_DB_NAME": "nemesis", "NEMESIS_DB_PORT": str(port)}
        return Settings("django://", "django://", django="tests.nemesis.django_settings", env=env)

    def inject(self, kind: str) -> Undo | None:
        if kind == "mariadb_restart":
            assert self.process is not None
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)
            return self.start
        ids = self._query("SELECT id FROM information_schema.processlist WHERE db = 'nemesis' "
                          "AND id <> CONNECTION_ID()")
        for (session,) in ids or ():  # type: ignore[attr-defined]
            with contextlib.suppress(Exception):  # a session that ended meanwhile
                self._query(f"KILL CONNECTION {int(session)}")
        return None

    def close(self) -> None:
        super().close()
        if self.process is not None:
            stop_process(self.process, timeout=30)


class MongoStore(Store):
    """The mongoeco wire server keeping its data in a SQLite file (a restart loses nothing it acknowledged), and
    the delayed tasks on a RabbitMQ vhost of the run's own with cancel marks on a private Redis: the nemesis
    restarts the server and closes the workers' broker connections."""

    kinds = ("store_restart", "rabbit_close")

    def __init__(self, directory: Path) -> None:
        super().__init__(directory)
        from tests.support.servers import MongoWireServer

        self.server = MongoWireServer()
        self.port = free_port()
        self.redis_port = free_port()
        self.vhost = f"mutexcron-nemesis-{directory.name[-12:]}-{os.getpid()}"

    def start(self) -> None:
        from tests.chaos.faults import rabbitmqctl

        self.server.start(self.port, path=self.directory / "mongo.sqlite3")
        if not hasattr(self, "redis"):
            self.redis = start_redis_server(self.redis_port)
            rabbitmqctl("add_vhost", self.vhost)
            rabbitmqctl("set_permissions", "-p", self.vhost, "guest", ".*", ".*", ".*")

    def target(self) -> tuple[str, int]:
        return "127.0.0.1", self.port

    def settings(self, through_proxy: bool) -> Settings:
        port = self.proxy.port if through_proxy and self.proxy is not None else self.port
        return Settings(f"mongodb://127.0.0.1:{port}/nemesis?directConnection=true",
                        f"amqp://guest:guest@127.0.0.1:5672/{self.vhost}",
                        cancel_store=f"redis://127.0.0.1:{self.redis_port}/0")

    def inject(self, kind: str) -> Undo | None:
        if kind == "rabbit_close":
            from tests.chaos.faults import close_vhost_connections

            close_vhost_connections(self.vhost, "nemesis")
            return None
        assert self.server.process is not None
        self.server.process.send_signal(signal.SIGKILL)
        self.server.process.wait(10)
        self.server.process = None

        def undo() -> None:
            self.server.start(self.port, path=self.directory / "mongo.sqlite3")

        return undo

    def close(self) -> None:
        from tests.chaos.faults import rabbitmqctl

        super().close()
        self.server.stop()
        if hasattr(self, "redis"):
            stop_process(self.redis)
            with contextlib.suppress(AssertionError, subprocess.SubprocessError):
                rabbitmqctl("delete_vhost", self.vhost)


def store_for(name: str, directory: Path) -> Store:
    stores: dict[str, Callable[[Path], Store]] = {
        "redis": RedisStore, "cluster": ClusterStore, "sentinel": SentinelStore, "postgres": PostgresStore,
        "mariadb": MariaDBStore, "mongo": MongoStore,
    }
    if name not in stores:
        raise SystemExit(f"STORE={name!r}: one of {', '.join(stores)}")
    return stores[name](directory)

