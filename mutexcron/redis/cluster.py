"""Lua scripts on a Redis Cluster as on one server: batches routed by key, scans of every master, and a scripted
write confirmed by ``WAIT`` on the connection that made it.

redis-py's cluster pipeline refuses ``EVALSHA``, so a batch there sends ``EVAL`` (the script's text; Redis caches
it by its SHA1), which the pipeline routes by the script's first key and groups by node, following ``MOVED``.
Where that costs too much (the scheduler's acquires at each instant), :func:`run_by_master` sends one plain
pipeline of ``EVALSHA`` per master instead, and :func:`run_on_masters` one script per master for all its keys (a
script that takes its keys in its arguments, on Redis 7.0 and later). Every other script's keys share one hash
tag, so each call touches one slot.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Sequence
from typing import Any

from redis.cluster import ClusterPipeline, RedisCluster
from redis.commands.core import Script
from redis.exceptions import (
    AskError,
    ClusterDownError,
    MovedError,
    NoScriptError,
    ReadOnlyError,
    RedisError,
    ResponseError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from .urls import AnyRedis, is_cluster

__all__ = ["NOT_LOCAL", "ScriptCall", "queue_script", "refresh_topology", "run_batch", "run_by_master",
           "run_on_masters", "scan_keys", "write_then_wait"]

ScriptCall = tuple[Sequence[str], Sequence[Any]]  # (keys, args) of one script call
# Replies and errors that mean the cluster's slots moved (a failover, a resharding): read its nodes again.
_TOPOLOGY_ERRORS = (AskError, ClusterDownError, TryAgainError, RedisConnectionError, RedisTimeoutError)
# A call's reply that says it did not run there: asked again through the cluster client, which follows it.
_NOT_RUN_HERE = (MovedError, AskError, TryAgainError, NoScriptError)
NOT_LOCAL = b"not_local"  # run_on_masters' reply for a call whose key that master does not serve


def queue_script(pipe: Any, script: Script, keys: Sequence[str], args: Sequence[Any]) -> None:
    """Add a call of ``script`` to ``pipe``: EVALSHA in a server's pipeline (which loads the script if need be),
    EVAL in a cluster's."""
    if isinstance(pipe, ClusterPipeline):
        pipe.execute_command("EVAL", script.script, len(keys), *keys, *args)  # type: ignore[no-untyped-call]
    else:
        script(keys=keys, args=args, client=pipe)


def run_batch(client: AnyRedis, script: Script, calls: Sequence[ScriptCall]) -> list[Any]:
    """Run ``script`` once per (keys, args) in one pipeline (one per node on a cluster); the replies in order.
    A failed call raises its error."""
    if not calls:
        return []
    pipe = client.pipeline(transaction=False)
    for keys, args in calls:
        queue_script(pipe, script, keys, args)
    return list(pipe.execute())


def run_by_master(cluster: RedisCluster, script: Script, calls: Sequence[ScriptCall]) -> list[Any]:
    """Run ``script`` once per (keys, args) on a cluster: one pipeline of EVALSHA per master, by the cluster's map of
    slots, one master after the other (a cluster pipeline would send each script's text). A call that did not run
    where it was sent (its slot moved, or that master lacks the script) is asked again through the cluster client,
    which follows the redirect. The replies in order; a call that failed has its error as its reply."""
    by_master: dict[str, tuple[Any, list[int]]] = {}
    for index, (keys, _) in enumerate(calls):
        node = cluster.get_node_from_key(keys[0])  # type: ignore[no-untyped-call]
        by_master.setdefault(node.name, (node, []))[1].append(index)
    replies: list[Any] = [None] * len(calls)
    again: list[int] = []
    for node, indexes in by_master.values():
        pipe = cluster.get_redis_connection(node).pipeline(transaction=False)
        for index in indexes:
            keys, args = calls[index]
            pipe.evalsha(script.sha, len(keys), *keys, *args)
        try:
            answers = pipe.execute(raise_on_error=False)
        except RedisError as error:  # whether they ran is unknown: each is that error
            if isinstance(error, _TOPOLOGY_ERRORS):
                refresh_topology(cluster)
            answers = [error] * len(indexes)
        for index, answer in zip(indexes, answers, strict=True):
            replies[index] = answer
            if isinstance(answer, _NOT_RUN_HERE):
                again.append(index)
    if any(isinstance(replies[index], MovedError | AskError) for index in again):
        refresh_topology(cluster)
    for index in again:
        keys, args = calls[index]
        try:
            replies[index] = script(keys=keys, args=args, client=cluster)
        except RedisError as error:
            replies[index] = error
    return replies


def run_on_masters(cluster: RedisCluster, script: Script, calls: Sequence[tuple[str, Sequence[str]]]) -> list[Any]:
    """Run ``script`` (flagged ``allow-cross-slot-keys``, taking ``[key, args...]`` a call as one JSON argument)
    once per master, with the calls whose key it serves by the cluster's map of slots. The replies in order: a
    call whose key that master does not serve (the map is stale, or the master is a replica now) answers
    NOT_LOCAL, and a master's error is each of its calls' reply."""
    by_master: dict[str, tuple[Any, list[int]]] = {}
    for index, (key, _) in enumerate(calls):
        node = cluster.get_node_from_key(key)  # type: ignore[no-untyped-call]
        by_master.setdefault(node.name, (node, []))[1].append(index)
    replies: list[Any] = [None] * len(calls)
    for node, indexes in by_master.values():
        argument = json.dumps([[calls[index][0], *calls[index][1]] for index in indexes], separators=(",", ":"))
        answers: list[Any]
        try:
            answers = script(keys=[], args=[argument], client=cluster.get_redis_connection(node))
        except ReadOnlyError:  # a master turned replica (a failover) refuses it before it runs: not local
            refresh_topology(cluster)
            answers = [NOT_LOCAL] * len(indexes)
        except RedisError as error:  # whether it ran is unknown: each call is that error
            if isinstance(error, _TOPOLOGY_ERRORS):
                refresh_topology(cluster)
            answers = [error] * len(indexes)
        for index, answer in zip(indexes, answers, strict=True):
            replies[index] = answer
    return replies


def scan_keys(client: AnyRedis, match: str, count: int = 500) -> Iterator[Any]:
    """Every key matching ``match``: on a cluster, on every master."""
    if is_cluster(client):
        return iter(client.scan_iter(match=match, count=count, target_nodes=client.PRIMARIES))
    return iter(client.scan_iter(match=match, count=count))


def refresh_topology(client: AnyRedis) -> None:
    """Read a cluster's nodes and slots again (best effort: while a failover is under way it may fail too)."""
    if is_cluster(client):
        with contextlib.suppress(Exception):
            client.nodes_manager.initialize()


def write_then_wait(client: AnyRedis, script: Script, keys: Sequence[str], args: Sequence[Any], replicas: int,
                    timeout_ms: int) -> tuple[Any, int]:
    """Run ``script`` on the master of ``keys`` and ``WAIT replicas timeout_ms`` right behind it on the same
    connection (WAIT counts the replicas that acknowledged this connection's writes). Returns the script's reply
    and how many replicas acknowledged it; errors raise. On a cluster, the key's master is asked directly, so
    a reply that the slot moved reads the cluster's nodes again and tries again, twice at most (just after a
    failover the first node asked may still have the old map)."""
    attempts = 3
    for attempt in range(attempts):
        node = client
        if is_cluster(client):
            node = client.get_redis_connection(client.get_node_from_key(keys[0]))  # type: ignore[no-untyped-call]
        try:
            pipe = node.pipeline(transaction=False)
            pipe.evalsha(script.sha, len(keys), *keys, *args)
            pipe.execute_command("WAIT", replicas, timeout_ms)
            reply, acknowledged = pipe.execute(raise_on_error=False)
        except _TOPOLOGY_ERRORS:
            refresh_topology(client)
            raise
        if isinstance(reply, NoScriptError):  # a new master (after a failover) has not seen the script yet
            node.script_load(script.script)
            continue
        if isinstance(reply, _TOPOLOGY_ERRORS) and attempt < attempts - 1 and is_cluster(client):
            refresh_topology(client)
            continue
        for answer in (reply, acknowledged):
            if isinstance(answer, ResponseError | RedisError):
                raise answer
        return reply, int(acknowledged)
    raise ResponseError("the script's slot kept moving while WAIT was asked for")
