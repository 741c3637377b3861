"""A client's retry of an acquire whose reply was lost gets the lock that the first try took (Redis).

redis-py sends a command again after a connection error: ``redis.Redis(...)`` built by hand retries 10 times by
default, and the cluster client retries through a failover. Had the acquire script run before the link broke,
its retry would find the tick taken (by itself) and answer ``already_ran``: the tick run by nobody. Each call
carries a random attempt id, and the script answers a repeat of it with the same acquisition.

The test puts a proxy of its own between the client and a private redis-server, and breaks the link once the
script has run on the server and while its reply is still on the way back.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import redis
from redis.backoff import ConstantBackoff
from redis.retry import Retry

from mutexcron.stores import AcquireStatus, Acquisition, RedisLockStore
from tests.support import wait_until
from tests.support.servers import PrivateRedis
from tests.support.tcp_proxy import TcpProxy

TICK = datetime(2026, 3, 1, 6, 0, 0, tzinfo=UTC)
LEASE = timedelta(seconds=30)
LATENCY = 1.0  # each way: the script runs a second after it is sent, and its reply needs another second


def test_a_retried_acquire_whose_reply_was_lost_gets_the_lock_its_first_try_took() -> None:
    with PrivateRedis() as url:
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        direct = redis.Redis(host="127.0.0.1", port=port)
        with TcpProxy("127.0.0.1", port) as proxy:
            # Retries 0.25 s apart for 5 s: the link is back well before they run out.
            client = redis.Redis(host="127.0.0.1", port=proxy.port, retry=Retry(ConstantBackoff(0.25), 20),
                                 socket_timeout=10)
            store = RedisLockStore(client, prefix="lost-reply:")
            store.seed(["job"])
            store.acquire("warm-up", owner="A", lease=LEASE, fire_time=None)  # the script is loaded: one command
            direct.config_resetstat()
            proxy.latency = LATENCY
            answers: list[Acquisition] = []
            call = threading.Thread(target=lambda: answers.append(
                store.acquire("job", owner="A", lease=LEASE, fire_time=TICK)))
            call.start()
            wait_until(lambda: direct.hget("lost-reply:{job}", "token") == b"1", timeout=10,
                       what="the acquire script to run on the server")
            proxy.cut()  # its reply is still in the proxy, a second from the client
            proxy.latency = 0.0
            proxy.restore()
            call.join(15)
        sent = direct.info("commandstats")["cmdstat_evalsha"]["calls"]
        direct.close()
    assert sent == 2, "the client did not send the acquire again once"
    assert answers == [Acquisition(AcquireStatus.ACQUIRED, token=1)]
