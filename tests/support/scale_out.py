"""Redis Cluster and Sentinel for the tests: the shared ones that ``make services`` starts (scripts/redis-scale-out.sh),
their fixtures (a key prefix per test), and private ones that a failover test starts on free ports, kills a master
of, and stops (never the shared ones: two suites run beside each other in CI).

tests/conftest.py imports the fixtures, so every test module may ask for them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.cluster import ClusterNode, RedisCluster
from redis.crc import key_slot

from tests.support import wait_until
from tests.support.servers import free_port, start_redis_server, stop_process

CLUSTER_URL = os.environ.get("MUTEXCRON_TEST_CLUSTER_URL", "redis+cluster://127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002")
SENTINEL_URL = os.environ.get(
    "MUTEXCRON_TEST_SENTINEL_URL", "redis+sentinel://127.0.0.1:26380,127.0.0.1:26381,127.0.0.1:26382/mutexcron/9"
)
NOT_UP = "the shared Redis {what} of the tests is not up ({url}): run `make services` (scripts/redis-scale-out.sh)"


def _seeds(url: str) -> list[tuple[str, int]]:
    hosts = url.split("://", 1)[1].split("/", 1)[0].split("?", 1)[0].rpartition("@")[2]
    return [(host, int(port)) for host, _, port in (item.partition(":") for item in hosts.split(","))]


def cluster_client(url: str = CLUSTER_URL) -> RedisCluster:
    return RedisCluster(startup_nodes=[ClusterNode(host, port) for host, port in _seeds(url)],
                        socket_connect_timeout=1, decode_responses=True)


def sentinel_master(url: str = SENTINEL_URL) -> redis.Redis:
    sentinels = redis.sentinel.Sentinel(_seeds(url), socket_connect_timeout=1)
    service, _, db = url.split("://", 1)[1].split("?", 1)[0].split("/", 1)[1].partition("/")
    return sentinels.master_for(service, db=int(db or 0), decode_responses=True)


def delete_prefixed(client: Any, prefix: str) -> None:
    """Delete every key that starts with ``prefix`` (on a cluster, on every master; one key per call)."""
    if isinstance(client, RedisCluster):
        keys = list(client.scan_iter(match=prefix + "*", count=1000, target_nodes=RedisCluster.PRIMARIES))
    else:
        keys = list(client.scan_iter(match=prefix + "*", count=1000))
    for key in keys:
        client.delete(key)


@pytest.fixture(scope="session")
def cluster_server_url() -> str:
    try:
        client = cluster_client()
        assert client.cluster_info()["cluster_state"] == "ok"
        client.close()
    except (redis.RedisError, redis.exceptions.RedisClusterException, AssertionError):
        pytest.skip(NOT_UP.format(what="Cluster", url=CLUSTER_URL))
    return CLUSTER_URL


@pytest.fixture(scope="session")
def sentinel_server_url() -> str:
    try:
        client = sentinel_master()
        client.ping()
        client.close()
    except redis.RedisError:
        pytest.skip(NOT_UP.format(what="Sentinel group", url=SENTINEL_URL))
    return SENTINEL_URL


def _prefixed(url: str, client: Any) -> Iterator[str]:
    prefix = f"mutexcron-test:{uuid.uuid4().hex[:12]}:"
    yield f"{url}?prefix={prefix}"
    delete_prefixed(client, prefix)
    client.close()


@pytest.fixture
def cluster_url(cluster_server_url: str) -> Iterator[str]:
    """A ``redis+cluster://`` URL whose keys (under a prefix of this test's own) are deleted afterwards."""
    yield from _prefixed(cluster_server_url, cluster_client())


@pytest.fixture
def sentinel_url(sentinel_server_url: str) -> Iterator[str]:
    """A ``redis+sentinel://`` URL whose keys (under a prefix of this test's own) are deleted afterwards."""
    yield from _prefixed(sentinel_server_url, sentinel_master())


@pytest.fixture(params=["cluster", "sentinel"])
def scale_out_url(request: pytest.FixtureRequest) -> str:
    """The cluster's URL, then Sentinel's, each with a prefix of this test's own."""
    return str(request.getfixturevalue(f"{request.param}_url"))


# -- private topologies, for the tests that kill a master ----------------------------------------------------

# A replica that (re)connects is sent the data at once, not after Redis's default 5 s wait for other replicas.
FAST_RESYNC = ("--repl-diskless-sync-delay", "0")


def _command(port: int, *command: str) -> Any:
    """The reply of the server on ``port`` to ``command`` ("" if it cannot be reached)."""
    client = redis.Redis(port=port, socket_connect_timeout=0.5, socket_timeout=2, decode_responses=True)
    try:
        return client.execute_command(*command)
    except redis.RedisError:
        return ""
    finally:
        client.close()


def _info(port: int, section: str) -> dict[str, str]:
    client = redis.Redis(port=port, socket_connect_timeout=0.5, socket_timeout=2, decode_responses=True)
    try:
        return {k: str(v) for k, v in client.info(section).items()}
    except redis.RedisError:
        return {}
    finally:
        client.close()


class _Topology:
    """The server processes of a private topology, by port."""

    processes: dict[int, subprocess.Popen[bytes]]

    def healthy(self) -> bool:
        raise NotImplementedError

    def wait_healthy(self, timeout: float = 30) -> float:
        wait_until(self.healthy, timeout, f"the private {type(self).__name__} to be healthy", interval=0.1)
        return time.time()

    def role(self, port: int) -> str:
        """"master" or "slave", as the server on ``port`` says ("" if it does not answer)."""
        return _info(port, "replication").get("role", "")

    def linked(self, port: int) -> bool:
        """The server on ``port`` is a replica whose link to its master is up: WAIT can count it again."""
        replication = _info(port, "replication")
        return replication.get("role") == "slave" and replication.get("master_link_status") == "up"

    def replica_of(self, port: int) -> int:
        """The port of a live replica of the master on ``port``."""
        for replica in self.processes:
            replication = _info(replica, "replication")
            if replication.get("role") == "slave" and replication.get("master_port") == str(port):
                return replica
        raise AssertionError(f"no replica of {port}")

    def kill(self, port: int) -> float:
        """SIGKILL the server on ``port`` and reap it; when (time.time()) it was reaped: from then on it
        answers nothing (between the signal and the reaping it may still answer a command in flight)."""
        self.processes[port].send_signal(signal.SIGKILL)
        self.processes[port].wait(10)
        return time.time()

    def close(self) -> None:
        for process in self.processes.values():
            stop_process(process)


class PrivateCluster(_Topology):
    """A Redis Cluster of ``masters`` masters with one replica each on free ports, its files in ``directory``;
    ``node_timeout`` (ms) is how long a master may be silent before its replica takes over."""

    def __init__(self, directory: Path, masters: int = 3, node_timeout: int = 1000) -> None:
        self.directory, self.node_timeout = directory, node_timeout
        self.ports = [free_port() for _ in range(2 * masters)]
        self.bus_ports = {port: free_port() for port in self.ports}
        self.processes: dict[int, subprocess.Popen[bytes]] = {}

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"127.0.0.1:{port}" for port in self.ports)

    def start_node(self, port: int) -> None:
        directory = self.directory / f"node-{port}"
        directory.mkdir(parents=True, exist_ok=True)
        self.processes[port] = start_redis_server(
            port, "--cluster-enabled", "yes", "--cluster-config-file", str(directory / "nodes.conf"),
            "--cluster-port", str(self.bus_ports[port]), "--cluster-node-timeout", str(self.node_timeout),
            "--dir", str(directory), "--logfile", str(directory / "redis.log"), *FAST_RESYNC,
        )

    def start(self) -> PrivateCluster:
        for port in self.ports:
            self.start_node(port)
        created = subprocess.run(
            ["redis-cli", "--cluster", "create", *(f"127.0.0.1:{port}" for port in self.ports),
             "--cluster-replicas", "1", "--cluster-yes"], capture_output=True, text=True, timeout=60)
        assert created.returncode == 0, created.stdout + created.stderr
        self.wait_healthy()
        return self

    def healthy(self) -> bool:
        """Every node says the cluster is ok, and every replica is linked to its master."""
        for port in self.ports:
            if "cluster_state:ok" not in _command(port, "CLUSTER", "INFO"):
                return False
            replication = _info(port, "replication")
            if replication.get("role") == "slave" and replication.get("master_link_status") != "up":
                return False
        return True

    def master_of(self, key: str) -> int:
        """The port of the master that serves ``key``'s slot now, as a live node says."""
        slot = key_slot(key.encode())
        for port in self.ports:
            if self.processes[port].poll() is None:
                for start, end, primary, *_ in _command(port, "CLUSTER", "SLOTS") or []:
                    if int(start) <= slot <= int(end):
                        return int(primary[1])
        raise AssertionError(f"no live node knows who serves slot {slot}")

    def restart(self, port: int) -> None:
        """Start the node on ``port`` again from its nodes.conf: it rejoins, as a replica of the promoted one."""
        self.start_node(port)



class PrivateSentinel(_Topology):
    """A master, one replica and three sentinels (quorum 2) on free ports, service ``mutexcron``; a master that
    is silent ``down_after`` ms is failed over."""

    SERVICE = "mutexcron"

    def __init__(self, directory: Path, down_after: int = 1000, failover_timeout: int = 3000) -> None:
        self.directory = directory
        self.down_after, self.failover_timeout = down_after, failover_timeout
        self.data_ports = [free_port(), free_port()]
        self.sentinel_ports = [free_port() for _ in range(3)]
        self.processes: dict[int, subprocess.Popen[bytes]] = {}

    @property
    def url(self) -> str:
        return "redis+sentinel://" + ",".join(f"127.0.0.1:{port}" for port in self.sentinel_ports) + "/" + self.SERVICE

    def start_data(self, port: int, replica_of: int | None) -> None:
        directory = self.directory / f"redis-{port}"
        directory.mkdir(parents=True, exist_ok=True)
        options = ["--dir", str(directory), "--logfile", str(directory / "redis.log"), *FAST_RESYNC]
        if replica_of is not None:
            options += ["--replicaof", "127.0.0.1", str(replica_of)]
        self.processes[port] = start_redis_server(port, *options)

    def start(self) -> PrivateSentinel:
        master, replica = self.data_ports
        self.start_data(master, None)
        self.start_data(replica, master)
        for port in self.sentinel_ports:
            directory = self.directory / f"sentinel-{port}"
            directory.mkdir(parents=True, exist_ok=True)
            config = directory / "sentinel.conf"
            config.write_text(
                f"port {port}\nbind 127.0.0.1\ndir {directory}\nlogfile {directory / 'sentinel.log'}\n"
                f"sentinel monitor {self.SERVICE} 127.0.0.1 {master} 2\n"
                f"sentinel down-after-milliseconds {self.SERVICE} {self.down_after}\n"
                f"sentinel failover-timeout {self.SERVICE} {self.failover_timeout}\n"
            )
            self.processes[port] = subprocess.Popen(["redis-server", str(config), "--sentinel"],
                                                    stdout=subprocess.DEVNULL)
        self.wait_healthy()
        return self

    def _sentinel(self, port: int) -> redis.Redis:
        return redis.Redis(port=port, socket_connect_timeout=0.5, socket_timeout=2, decode_responses=True)

    def master(self) -> int | None:
        """The master's port as every sentinel names it (None while they disagree or cannot say)."""
        named = set()
        for port in self.sentinel_ports:
            client = self._sentinel(port)
            try:
                address = client.sentinel_get_master_addr_by_name(self.SERVICE)
                named.add(int(address[1]) if address else None)
            except redis.RedisError:
                named.add(None)
            finally:
                client.close()
        return named.pop() if len(named) == 1 else None

    def healthy(self) -> bool:
        """Every sentinel knows the two others and the same master, which has its replica linked."""
        for port in self.sentinel_ports:
            client = self._sentinel(port)
            try:
                if int(client.sentinel_master(self.SERVICE)["num-other-sentinels"]) != 2:
                    return False
            except (redis.RedisError, KeyError):
                return False
            finally:
                client.close()
        master = self.master()
        if master is None or _info(master, "replication").get("role") != "master":
            return False
        replicas = [port for port in self.data_ports if port != master]
        return all(_info(port, "replication").get("master_link_status") == "up" for port in replicas)

    def restart(self, port: int) -> None:
        """Start the data node on ``port`` again, empty, as a replica of the new master (as an operator would)."""
        master = self.master()
        assert master is not None and master != port, "the sentinels have not failed over yet"
        self.start_data(port, master)

    def close(self) -> None:
        for process in self.processes.values():
            stop_process(process)
