"""Move the Redis task backend's tasks from the first key layout (every key under one hash tag, ``{tasks}``) to
one hash tag per task type (``docs/redis-tasks.md``, "Keys"). One script per task, atomic; run it again to pick
up what an old producer added meanwhile. A worker of this version warns when its types still have tasks in the
old layout.

    python -m mutexcron.tasks.backends.redis_migrate redis://[:password@]host[:port][/db][?prefix=…] [--dry-run]
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from ..._redis import glob_escape
from ..._redis import text as _text
from ...errors import MutexcronError, StoreConfigError
from ...redis_cluster import scan_keys
from ...redis_urls import is_cluster
from . import redis_lua as lua
from .redis import HASH_TAG, RedisTaskBackend

__all__ = ["MigrationReport", "main", "migrate_layout", "old_layout_keys"]


@dataclass
class MigrationReport:
    """What :func:`migrate_layout` moved: tasks per type, and the ids left in old sets without a task (not
    counted in a dry run)."""

    moved: Counter[str] = field(default_factory=Counter)
    orphans: int = 0
    dry_run: bool = False

    def __str__(self) -> str:
        verb = "would move" if self.dry_run else "moved"
        per_type = ", ".join(f"{task_type}: {count}" for task_type, count in sorted(self.moved.items())) or "none"
        return f"{verb} {sum(self.moved.values())} tasks ({per_type}); {self.orphans} ids without a task dropped"


def _old(backend: RedisTaskBackend) -> str:
    return f"{backend.prefix}{HASH_TAG}:"


def old_layout_keys(backend: RedisTaskBackend, types: Iterable[str]) -> list[str]:
    """The keys of the first layout that still hold tasks of ``types`` (their due sets), or claims or failures of
    any type; one EXISTS per key, all in the ``{tasks}`` slot. Raises as the backend's :meth:`errors`."""
    old = _old(backend)
    keys = [*(f"{old}due:{task_type}" for task_type in types), f"{old}processing", f"{old}failed"]
    with backend.errors():
        return [key for key in keys if backend.client.exists(key)]


def migrate_layout(backend: RedisTaskBackend, *, dry_run: bool = False) -> MigrationReport:
    """Move every task of ``backend``'s prefix from the first layout to its type's hash tag, on the server (or
    the Sentinel master) that holds it; with ``dry_run``, only count. Stop the old version's workers first: a
    task one of them is running moves with its claim, which it can then no longer settle, so the task runs
    again once its visibility timeout passes."""
    if is_cluster(backend.client):
        raise StoreConfigError("the first key layout was never on a Redis Cluster: migrate on the server that "
                               "holds it (redis:// or redis+sentinel://)")
    old = _old(backend)
    move = backend.client.register_script(lua.MIGRATE)
    report = MigrationReport(dry_run=dry_run)
    with backend.errors():
        for raw_key in list(scan_keys(backend.client, glob_escape(old) + "task:*")):
            key = _text(raw_key)
            task_id = key[len(old) + len("task:"):]
            task_type = _text(backend.client.hget(key, "type"))
            if not task_type:
                continue
            if not dry_run:
                backend.client.sadd(backend.types_key, task_type)
                keys = [key, backend.task_key(task_type, task_id), f"{old}due:{task_type}", backend.due_key(task_type),
                        f"{old}processing", backend.processing_key(task_type), f"{old}failed",
                        backend.failed_key(task_type)]
                if not move(keys=keys, args=[task_id]):
                    continue
            report.moved[task_type] += 1
        for task_type in report.moved if not dry_run else ():
            backend.client.publish(backend.channel, f"0 {task_type}")  # sleeping workers of the type look now
        if not dry_run:  # what is left in the old sets are ids whose task hash is gone: they never run
            for raw_key in [*scan_keys(backend.client, glob_escape(old) + "due:*"), f"{old}processing",
                            f"{old}failed"]:
                report.orphans += int(backend.client.zcard(raw_key))
                backend.client.delete(raw_key)
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mutexcron.tasks.backends.redis_migrate",
                                     description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("url", help="the task backend's URL, with its ?prefix= if it has one")
    parser.add_argument("--dry-run", action="store_true", help="count what would move, move nothing")
    args = parser.parse_args(argv)
    try:
        backend = RedisTaskBackend.from_url(args.url)
    except MutexcronError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    try:
        print(migrate_layout(backend, dry_run=args.dry_run))
    except MutexcronError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    finally:
        backend.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
