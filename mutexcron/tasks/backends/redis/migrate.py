"""Move the Redis task backend's tasks from the first key layout (every key under one hash tag, ``{tasks}``) to
one hash tag per task type (``docs/redis-tasks.md``, "Keys"). One script per task, atomic; an old producer's task
added during the move is moved too, or left whole for the next run. A worker of this version warns when tasks are
still in the old layout.

    python -m mutexcron.tasks.backends.redis.migrate redis://[:password@]host[:port][/db][?prefix=…] [--dry-run]
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from dataclasses import dataclass, field

from ....errors import MutexcronError, StoreConfigError
from ....redis.client import glob_escape
from ....redis.client import text as _text
from ....redis.cluster import scan_keys
from ....redis.urls import is_cluster
from . import lua
from .backend import RedisTaskBackend
from .layout import SCAN_COUNT, first_layout_base

__all__ = ["MigrationReport", "main", "migrate_layout"]

SWEEP_CHUNK = 500  # ids of an old set looked at per script call


@dataclass
class MigrationReport:
    """What :func:`migrate_layout` moved: tasks per type, the ids left in old sets without a task (not counted
    in a dry run), and the tasks found without their set entry, placed by their status."""

    moved: Counter[str] = field(default_factory=Counter)
    orphans: int = 0
    restored: int = 0
    dry_run: bool = False

    def __str__(self) -> str:
        verb = "would move" if self.dry_run else "moved"
        per_type = ", ".join(f"{task_type}: {count}" for task_type, count in sorted(self.moved.items())) or "none"
        text = f"{verb} {sum(self.moved.values())} tasks ({per_type}); {self.orphans} ids without a task dropped"
        if self.restored:
            text += f"; {self.restored} of them found without a set entry, placed by status"
        return text


class _Migration:
    """One run of :func:`migrate_layout`: moves tasks by id, and sweeps the old sets."""

    def __init__(self, backend: RedisTaskBackend, dry_run: bool) -> None:
        self.backend = backend
        self.client = backend.client
        self.old = first_layout_base(backend.prefix)
        self.report = MigrationReport(dry_run=dry_run)
        self._move = self.client.register_script(lua.MIGRATE)
        self._sweep = self.client.register_script(lua.SWEEP_OLD_SET)

    def move(self, task_id: str) -> bool:
        """Move task ``task_id`` with its set entry (or place it by its status); False: it did not move (gone,
        moved already, no type, or a task of that id already in the new layout)."""
        backend, old = self.backend, self.old
        task_type = _text(self.client.hget(f"{old}task:{task_id}", "type"))
        if not task_type:
            return False
        if self.report.dry_run:
            self.report.moved[task_type] += 1
            return True
        self.client.sadd(backend.types_key, task_type)
        keys = [f"{old}task:{task_id}", backend.task_key(task_type, task_id), f"{old}due:{task_type}",
                backend.due_key(task_type), f"{old}processing", backend.processing_key(task_type), f"{old}failed",
                backend.failed_key(task_type)]
        moved = int(self._move(keys=keys, args=[task_id]))
        if moved:
            self.report.moved[task_type] += 1
        if moved == 2:
            self.report.restored += 1
        return bool(moved)

    def sweep(self, set_key: str) -> None:
        """Drop the ids of an old set whose task hash is gone (they would never run) and move the others: tasks
        an old producer or worker added after the scan. Only ids it moved or dropped leave the set."""
        rank = 0
        while True:
            looked, dropped, live = self._sweep(keys=[set_key], args=[self.old, rank, SWEEP_CHUNK])
            self.report.orphans += int(dropped)
            rank += sum(not self.move(_text(task_id)) for task_id in live)  # left in place: skipped next time
            if int(looked) < SWEEP_CHUNK:
                return


def migrate_layout(backend: RedisTaskBackend, *, dry_run: bool = False) -> MigrationReport:
    """Move every task of ``backend``'s prefix from the first layout to its type's hash tag, on the server (or
    the Sentinel master) that holds it; with ``dry_run``, only count. Every task hash of the first layout is
    found by a scan, whether a set holds its id or not; then the old sets are swept. Stop the old version's
    workers first: a task one of them is running moves with its claim, which it can then no longer settle, so
    the task runs again once its visibility timeout passes."""
    if is_cluster(backend.client):
        raise StoreConfigError("the first key layout was never on a Redis Cluster: migrate on the server that "
                               "holds it (redis:// or redis+sentinel://)")
    run = _Migration(backend, dry_run)
    old = run.old
    with backend.errors():
        for raw_key in scan_keys(backend.client, glob_escape(old) + "task:*", SCAN_COUNT):
            run.move(_text(raw_key)[len(old) + len("task:"):])
        if not dry_run:
            due_sets = [_text(key) for key in scan_keys(backend.client, glob_escape(old) + "due:*", SCAN_COUNT)]
            for set_key in [*due_sets, f"{old}processing", f"{old}failed"]:
                run.sweep(set_key)
            for task_type in run.report.moved:
                backend.client.publish(backend.channel, f"0 {task_type}")  # sleeping workers of the type look now
    return run.report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mutexcron.tasks.backends.redis.migrate",
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
