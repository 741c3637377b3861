"""Where the Redis task backend's keys were before one hash tag per task type, and whether tasks still wait there.

The backend checks it when a worker starts (it warns: its workers do not look there) and ``migrate`` moves what it
finds; both import it from here, and it imports neither (see ``docs/redis-tasks.md``, "Migration from the first
layout").
"""

from __future__ import annotations

from collections.abc import Iterable

from ....redis.client import RedisClient, glob_escape
from ....redis.client import text as _text
from ....redis.cluster import scan_keys
from ....redis.urls import is_cluster

__all__ = ["HASHES_CHECKED", "HASH_TAG", "SCAN_COUNT", "first_layout_base", "old_layout_keys"]

HASH_TAG = "{tasks}"  # of the keys every type shares (types set, wake channel), and of every first-layout key
SCAN_COUNT = 1000  # keys per SCAN call: each call blocks Redis for well under a millisecond
# Written once a scan of the keyspace found no task hash of the first layout: from then on a worker's check looks
# at the old sets only (an old producer writes a task's hash and its due entry in one script).
HASHES_CHECKED = "first-layout-hashes-checked"


def first_layout_base(prefix: str) -> str:
    """Where every key of the first layout started: ``<prefix>{tasks}:``."""
    return f"{prefix}{HASH_TAG}:"


def old_layout_keys(backend: RedisClient, types: Iterable[str]) -> list[str]:
    """The keys of the first layout that still hold tasks: the due sets of ``types`` and the claims and failures
    of any type (one EXISTS each, all in the ``{tasks}`` slot); if none, the first task hash found there. That
    takes a SCAN of the whole keyspace, done until one finds no such hash (:data:`HASHES_CHECKED`); never on a
    cluster, which never held the first layout. Raises as the backend's :meth:`~RedisClient.errors`."""
    old = first_layout_base(backend.prefix)
    keys = [*(f"{old}due:{task_type}" for task_type in types), f"{old}processing", f"{old}failed"]
    client = backend.client
    with backend.errors():
        found = [key for key in keys if client.exists(key)]
        if found or is_cluster(client) or client.exists(old + HASHES_CHECKED):
            return found
        for raw_key in scan_keys(client, glob_escape(old) + "task:*", SCAN_COUNT):
            return [_text(raw_key)]
        client.set(old + HASHES_CHECKED, 1)
    return []
