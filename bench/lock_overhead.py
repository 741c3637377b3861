#!/usr/bin/env python
"""How much does mutexcron add on top of the cheapest possible lock? A benchmark report, not a test.

For each store it times N guarded no-op runs through ``Scheduler.run_now`` (acquire, body that does
nothing, release) against the raw limit of the same store driven directly by its client library:

* Redis: ``SET key value NX PX 10000`` plus a Lua compare-and-delete (``register_script``: EVALSHA);
* MongoDB: a ``find_one_and_update`` acquire (filter ``locked: false``, set ``locked: true``) plus a
  ``find_one_and_update`` release.

Both sides are warmed up, then timed over several rounds (alternating which side goes first); the
report gives the median per-operation time in µs and the ratio mutexcron / raw against the target.
The exit status is 0 whatever the ratios: it is a report.

    python bench/lock_overhead.py [--runs N] [--rounds R] [--redis URL] [--mongo URL] [--json]

Then it times what ``metrics=True`` and ``tracing=True`` add to a guarded run (bench/telemetry_cost.py;
``--skip telemetry`` leaves that out).

Without ``--mongo`` a mongoeco wire server (tests/support/servers.py) is started for the run. Redis keys go
under a unique prefix and the MongoDB data into a unique database; both are removed afterwards.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # for tests.support.servers (the mongoeco wire server) and an uninstalled mutexcron

TARGET_RATIO = 1.5
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/10"
DEFAULT_RUNS = {"redis": 2000, "mongo": 300}
JOB_NAME = "bench.noop"
BLOCKS = 10  # turns each side takes per round

# KEYS[1]: the lock key; ARGV[1]: the value this holder set. Deletes the key only if it is still ours.
COMPARE_AND_DELETE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class BenchError(RuntimeError):
    """An operation under measurement did not do what it should (the lock was not taken or not freed)."""


@dataclass
class Timing:
    """Per-operation times in µs, one per round."""

    rounds_us: list[float] = field(default_factory=list)

    @property
    def median_us(self) -> float:
        return statistics.median(self.rounds_us)


@dataclass
class StoreResult:
    store: str
    runs: int = 0
    rounds: int = 0
    warmup: int = 0
    cpu: int | None = None
    server: str = ""
    mutexcron: Timing = field(default_factory=Timing)
    raw: Timing = field(default_factory=Timing)
    error: str | None = None

    @property
    def ratio(self) -> float | None:
        if self.error or not self.mutexcron.rounds_us or not self.raw.rounds_us:
            return None
        return self.mutexcron.median_us / self.raw.median_us

    @property
    def overhead_us(self) -> float | None:
        """What mutexcron adds per run, in µs: median guarded run minus median raw acquire + release."""
        if self.ratio is None:
            return None
        return self.mutexcron.median_us - self.raw.median_us

    @property
    def verdict(self) -> str:
        ratio = self.ratio
        if ratio is None:
            return "ERROR"
        return "PASS" if ratio <= TARGET_RATIO else "MISS"

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"store": self.store, "server": self.server, "runs": self.runs,
                                "rounds": self.rounds, "warmup": self.warmup, "pinned_cpu": self.cpu}
        if self.error:
            data["error"] = self.error
        for side in ("mutexcron", "raw"):
            timing: Timing = getattr(self, side)
            data[f"{side}_us"] = {
                "median": round(timing.median_us, 2) if timing.rounds_us else None,
                "rounds": [round(t, 2) for t in timing.rounds_us],
            }
        data["overhead_us"] = round(self.overhead_us, 2) if self.overhead_us is not None else None
        data["ratio"] = round(self.ratio, 3) if self.ratio is not None else None
        data["target_ratio"] = TARGET_RATIO
        data["verdict"] = self.verdict
        return data


# -- measuring ---------------------------------------------------------------------------------------


def _seconds(operation: Callable[[], None], n: int) -> float:
    clock = time.perf_counter
    start = clock()
    for _ in range(n):
        operation()
    return clock() - start


@contextmanager
def pinned(cpu: int | None) -> Iterator[None]:
    """Run this thread (and threads it starts meanwhile) on ``cpu`` only; servers started before keep theirs."""
    if cpu is None:
        yield
        return
    previous = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})
    try:
        yield
    finally:
        os.sched_setaffinity(0, previous)


def measure(result: StoreResult, guarded: Callable[[], None], raw: Callable[[], None], *, runs: int, rounds: int,
            warmup: int, cpu: int | None) -> None:
    """Warm both sides up, then time ``rounds`` rounds of ``runs`` operations per side.

    Within a round the two sides take turns in blocks of about ``runs / BLOCKS`` operations, so that both
    see the same machine: on a small VM the loopback round trip can change by 2x from one second to the
    next (which CPU the server and the client wake up on), and a side timed in one piece would not.
    """
    result.runs, result.rounds, result.warmup, result.cpu = runs, rounds, warmup, cpu
    sizes = [runs // BLOCKS + (1 if i < runs % BLOCKS else 0) for i in range(BLOCKS)]
    with pinned(cpu):
        for operation in (guarded, raw, guarded, raw):
            _seconds(operation, max(1, warmup // 2))
        for _ in range(rounds):
            total = {"mutexcron": 0.0, "raw": 0.0}
            for block, size in enumerate(sizes):
                sides = [("mutexcron", guarded), ("raw", raw)]
                if block % 2:
                    sides.reverse()
                for side, operation in sides:
                    total[side] += _seconds(operation, size)
            for side, seconds in total.items():
                getattr(result, side).rounds_us.append(seconds / runs * 1e6)


def _scheduler_op(store: Any, **options: Any) -> tuple[Any, Callable[[], None]]:
    """A scheduler on ``store`` with one no-op job, and the operation that runs it once under its lock
    (``options`` for the Scheduler: metrics, tracing)."""
    from mutexcron.records import Outcome
    from mutexcron.registry import Registry, mutex_cron
    from mutexcron.scheduling.scheduler import Scheduler

    registry = Registry()

    @mutex_cron("0 0 1 1 *", name=JOB_NAME, registry=registry)
    def noop() -> None:
        pass

    scheduler = Scheduler(store, registry=registry, instance_id="bench-instance", **options)  # store: not closed
    scheduler.seed()
    run_now, succeeded = scheduler.run_now, Outcome.SUCCEEDED

    def guarded() -> None:
        record = run_now(JOB_NAME)
        if record.outcome is not succeeded:
            raise BenchError(f"run_now({JOB_NAME!r}) gave {record.outcome}: {record.error}")

    return scheduler, guarded


# -- Redis -------------------------------------------------------------------------------------------


def _with_query(url: str, **options: str) -> str:
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True) + list(options.items())
    return urlunsplit(parts._replace(query=urlencode(query)))


def bench_redis(url: str, *, runs: int, rounds: int, warmup: int, cpu: int | None) -> StoreResult:
    import redis

    from mutexcron.stores import store_from_url

    result = StoreResult("redis")
    prefix = f"mutexcron-bench:{uuid.uuid4().hex[:12]}:"
    client = redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=5)
    store = scheduler = None
    connected = False
    try:
        info = client.info("server")
        connected = True
        result.server = f"Redis {info.get('redis_version', '?')} at {_where(url)}"
        store = store_from_url(_with_query(url, prefix=prefix))
        scheduler, guarded = _scheduler_op(store)

        raw_key = prefix + "raw"
        release = client.register_script(COMPARE_AND_DELETE)
        counter = itertools.count()
        owner = "bench-instance"

        def raw() -> None:
            value = f"{owner}:{next(counter)}"
            if not client.set(raw_key, value, nx=True, px=10_000):
                raise BenchError(f"raw SET NX on {raw_key!r} found the key held")
            if release(keys=[raw_key], args=[value]) != 1:
                raise BenchError(f"raw compare-and-delete on {raw_key!r} did not delete it")

        measure(result, guarded, raw, runs=runs, rounds=rounds, warmup=warmup, cpu=cpu)
    except Exception as error:  # a report, not a test: say what failed and go on with the other store
        result.error = f"{type(error).__name__}: {error}"
    finally:
        try:
            keys = list(client.scan_iter(match=prefix + "*", count=1000)) if connected else []
            if keys:
                client.delete(*keys)
        except Exception as error:
            print(f"warning: could not delete the Redis keys {prefix}*: {error}", file=sys.stderr)
        if scheduler is not None:
            scheduler.shutdown()  # stops its heartbeat thread
        if store is not None:
            store.close()
        client.close()
    return result


# -- MongoDB -----------------------------------------------------------------------------------------


@contextmanager
def mongo_server(url: str | None) -> Iterator[str]:
    """``url`` if given, else the URL of a mongoeco wire server started for the run (stopped after)."""
    if url:
        yield url
        return
    from tests.support.servers import MongoWireServer

    server = MongoWireServer()
    try:
        yield server.start()
    finally:
        server.stop()


def bench_mongo(url: str | None, *, runs: int, rounds: int, warmup: int, cpu: int | None) -> StoreResult:
    result = StoreResult("mongo")
    try:
        with mongo_server(url) as server_url:
            _bench_mongo(server_url, result, runs=runs, rounds=rounds, warmup=warmup, cpu=cpu)
        if not url:
            result.server += " (mongoeco wire server, started for this run)"
    except Exception as error:
        result.error = f"{type(error).__name__}: {error}"
    return result


def _bench_mongo(server_url: str, result: StoreResult, *, runs: int, rounds: int, warmup: int,
                 cpu: int | None) -> None:
    import pymongo
    import pymongo.errors
    from pymongo import ReturnDocument

    from mutexcron.stores import store_from_url

    database = f"mutexcron_bench_{uuid.uuid4().hex[:12]}"
    store_url = urlunsplit(urlsplit(server_url)._replace(path="/" + database))
    client: pymongo.MongoClient[dict[str, Any]] = pymongo.MongoClient(server_url, serverSelectionTimeoutMS=5000)
    store = scheduler = None
    try:
        client.admin.command("ping")
        try:
            version = "MongoDB " + str(client.server_info().get("version", "?"))
        except pymongo.errors.OperationFailure:  # mongoeco has no buildInfo
            version = "MongoDB wire server"
        result.server = f"{version} at {_where(server_url)}"
        store = store_from_url(store_url)
        scheduler, guarded = _scheduler_op(store)

        locks = client[database]["bench_raw_locks"]
        raw_id, owner = "raw", "bench-instance"
        locks.insert_one({"_id": raw_id, "locked": False, "owner": None})
        acquire, release = locks.find_one_and_update, locks.find_one_and_update
        free, held = {"_id": raw_id, "locked": False}, {"_id": raw_id, "locked": True, "owner": owner}
        take, give = {"$set": {"locked": True, "owner": owner}}, {"$set": {"locked": False, "owner": None}}

        def raw() -> None:
            if acquire(free, take, return_document=ReturnDocument.BEFORE) is None:
                raise BenchError("raw find_one_and_update acquire found the lock held")
            if release(held, give, return_document=ReturnDocument.BEFORE) is None:
                raise BenchError("raw find_one_and_update release found the lock not ours")

        measure(result, guarded, raw, runs=runs, rounds=rounds, warmup=warmup, cpu=cpu)
    finally:
        if scheduler is not None:
            scheduler.shutdown()  # stops its heartbeat thread
        if store is not None:
            store.close()
        try:
            client.drop_database(database)
        except Exception as error:
            print(f"warning: could not drop the MongoDB database {database}: {error}", file=sys.stderr)
        client.close()


# -- report ------------------------------------------------------------------------------------------


def _where(url: str) -> str:
    parts = urlsplit(url)
    return parts.hostname + (f":{parts.port}" if parts.port else "") if parts.hostname else "?"


def _us(value: float | None) -> str:
    return f"{value:,.1f}" if value is not None else "-"


def print_table(results: list[StoreResult]) -> None:
    print(f"mutexcron lock overhead: guarded no-op runs (Scheduler.run_now) vs the raw lock; target ratio "
          f"<= {TARGET_RATIO}x")
    cpus = {result.cpu for result in results}
    pin = f"benchmark pinned to CPU {cpus.pop()}" if len(cpus) == 1 and None not in cpus else "not pinned"
    print(f"Python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs, {pin}; times are the "
          "median of the rounds, per operation (acquire + release)")
    print()
    header = f"{'store':<6} {'path':<10} {'runs x rounds':>13} {'median us/op':>13} {'min':>9} {'max':>9}"
    print(header)
    print("-" * len(header))
    for result in results:
        if result.error and not result.mutexcron.rounds_us:
            print(f"{result.store:<6} ERROR: {result.error}")
            continue
        for side in ("mutexcron", "raw"):
            timing: Timing = getattr(result, side)
            shape = f"{result.runs} x {result.rounds}"
            print(f"{result.store:<6} {side:<10} {shape:>13} {_us(timing.median_us):>13} "
                  f"{_us(min(timing.rounds_us)):>9} {_us(max(timing.rounds_us)):>9}")
    print()
    for result in results:
        server = f"  [{result.server}]" if result.server else ""
        if result.ratio is None:
            print(f"{result.store:<6} ratio mutexcron/raw: -      ERROR: {result.error or 'no timings'}{server}")
        else:
            print(f"{result.store:<6} ratio mutexcron/raw: {result.ratio:.2f}x  {result.verdict} "
                  f"(target <= {TARGET_RATIO}x); mutexcron adds {_us(result.overhead_us)} us/run{server}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=None,
                        help=f"operations per round for every store (default: redis {DEFAULT_RUNS['redis']}, "
                             f"mongo {DEFAULT_RUNS['mongo']})")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds per side; the median is reported")
    parser.add_argument("--warmup", type=int, default=None, help="warm-up operations per side (default: runs / 5)")
    parser.add_argument("--redis", metavar="URL", default=DEFAULT_REDIS_URL, help=f"default {DEFAULT_REDIS_URL}")
    parser.add_argument("--mongo", metavar="URL", default=None,
                        help="a MongoDB server URL (default: start a mongoeco wire server for the run)")
    parser.add_argument("--skip", action="append", choices=("redis", "mongo", "telemetry"), default=[],
                        help="leave a store (or the telemetry cost) out")
    parser.add_argument("--cpu", type=int, default=None,
                        help="pin the benchmark (not the servers) to this CPU while timing: steadier figures")
    parser.add_argument("--json", action="store_true", help="print the results as JSON instead of a table")
    args = parser.parse_args(argv)
    if (args.runs is not None and args.runs < 1) or args.rounds < 1:
        parser.error("--runs and --rounds must be at least 1")

    results = []
    for store, bench in (("redis", bench_redis), ("mongo", bench_mongo)):
        if store in args.skip:
            continue
        runs = args.runs or DEFAULT_RUNS[store]
        warmup = args.warmup if args.warmup is not None else max(20, runs // 5)
        url = args.redis if store == "redis" else args.mongo
        if not args.json:
            print(f"[{store}] {warmup} warm-up + {args.rounds} x {runs} runs per side ...", file=sys.stderr)
        results.append(bench(url, runs=runs, rounds=args.rounds, warmup=warmup, cpu=args.cpu))

    costs = []
    if "telemetry" not in args.skip:
        import telemetry_cost  # bench/ is sys.path[0] when this file runs as a script

        if not args.json:
            print(f"[telemetry] {len(telemetry_cost.VARIANTS)} variants x {args.rounds} rounds ...", file=sys.stderr)
        costs = telemetry_cost.run(None if "redis" in args.skip else args.redis, runs=args.runs,
                                   rounds=args.rounds, warmup=args.warmup, cpu=args.cpu)

    if args.json:
        print(json.dumps({
            "benchmark": "mutexcron lock overhead",
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "target_ratio": TARGET_RATIO,
            "results": [result.to_json() for result in results],
            "telemetry": [cost.to_json() for cost in costs],
        }, indent=2))
    else:
        print_table(results)
        if costs:
            print()
            telemetry_cost.print_costs(costs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
