#!/usr/bin/env python
"""Soak: N instance processes x M per-second jobs for a long while, a random instance SIGKILLed or SIGSTOPped
every ``--fault-every`` seconds, on Redis and on PostgreSQL at the same time. ``make soak`` runs the 10-minute one;
tests/test_soak.py a 60-second one.

    python bench/soak.py [--seconds 600] [--instances 8] [--jobs 20] [--stores redis,postgres]
                         [--fault-every 30] [--down 5] [--pause 5] [--lease 3] [--body-seconds 0.1]
                         [--pg-workers 4] [--seed N] [--serial] [--json]

Each instance is tests/support/fleet_instance with ``--jobs`` and ``--trace``: it writes a line before every acquire
it sends (F), its answer (A), every body's start and end (B, E) and every run record (R), each with one ``write()``,
so a SIGKILL loses nothing it had written. A killed instance is started again ``--down`` seconds later under a new
instance id (``i3-2``: the slot and its incarnation); a stopped one gets SIGCONT ``--pause`` seconds later. Redis is
a redis-server of the soak's own; PostgreSQL a database of its own (bench/fleet_settings.py, ``django://``).

Every job x tick of the window (from the warm-up to the end) is one of:

- **ran**: exactly one body started, and finished; **late** if it started more than 1 s after its tick (a
  holder paused by SIGSTOP finishing after SIGCONT);
- **duplicate**: more than one body started (must never happen);
- **lost with its holder**: no body finished because the instance that took the tick was SIGKILLed: its body was
  killed mid-run, or it had sent the acquire (and may have been granted it) but was killed before its body
  started or its answer was written; or SIGSTOPped between winning the lock and starting the body until its lease
  ran out and a later tick took the lock: it then finds the lock gone and does not start the body (its record
  says ``skipped_busy`` with ``lock_lost``). The store counts the tick as taken: no one else may run it;
- **waited out a faulted holder's lease**: nobody ran it because every instance that fired it found the job's
  lock still held by an instance that was killed or stopped (its lease, ``--lease``, had not run out yet), until
  its busy retries ended (``busy_grace``) or the next tick took the lock first once the lease ran out;
- **stalled behind a stopped instance's transaction** (SQL only): nobody ran it because a job's row was locked
  by the open transaction of a SIGSTOPped instance (stopped between its UPDATE and its COMMIT): the tick's
  acquires waited on that row lock until its SIGCONT, or were sent only then, queued behind the worker threads
  that waited on it (of any job), and the tick was refused (busy, or a later tick was taken first). Unlike a
  lease, this lasts as long as the pause, and reaches every job of the fleet once the pools are full;
- **missed**: none of the above (must be 0).

The exit status is 0 whatever the figures (tests/test_soak.py judges them).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import signal
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.fleet_support import (  # noqa: E402
    Instance,
    PrivateRedis,
    instance_command,
    load,
    postgres_database,
    postgres_env,
)
from tests.support.fleet import Launcher  # noqa: E402

WARMUP = 3  # seconds of ticks after the last instance started, before the window
STORES = ("redis", "postgres")
BUSY_GRACE = 1.0  # the Scheduler's default: how long a fire retries a busy lock
MAX_EXAMPLES = 10


@dataclass
class Options:
    """What one soak runs: sizes, durations and faults."""

    seconds: float = 600.0
    instances: int = 8
    jobs: int = 20
    fault_every: float = 30.0
    down: float = 5.0
    pause: float = 5.0
    lease: float = 3.0
    body_seconds: float = 0.1
    pg_workers: int = 4
    seed: int | None = None


@dataclass
class Incarnation:
    """One process of an instance slot: ``i<slot>-<n>``, the n-th start of that slot."""

    slot: int
    number: int
    proc: Instance
    killed_at: float | None = None
    stops: list[tuple[float, float]] = field(default_factory=list)  # (SIGSTOP, SIGCONT) times

    @property
    def name(self) -> str:
        return f"i{self.slot}-{self.number}"


@dataclass
class Fault:
    at: float
    kind: str  # "kill" or "stop"
    target: str  # the incarnation
    back_at: float | None = None  # restarted (kill) or continued (stop)


@dataclass
class Result:
    """A soak's figures; ``examples`` shows a few of each kind of tick that was not simply run."""

    store: str
    instances: int
    jobs: int
    seconds: float
    ticks: int = 0  # job x tick in the window
    runs: int = 0  # job x ticks with a body started
    duplicates: int = 0
    missed: int = 0
    lost_with_holder: int = 0
    waited_out_lease: int = 0
    stalled: int = 0  # lost because every acquire waited on a stopped instance's open transaction (SQL row lock)
    late_runs: int = 0
    lock_lost: int = 0  # runs whose lock ran out under them (a paused holder)
    unfinished: int = 0  # a body started by an instance not killed that never ended (should not happen)
    kills: int = 0
    stops: int = 0
    restarts: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    faults: list[dict[str, Any]] = field(default_factory=list)
    examples: dict[str, list[str]] = field(default_factory=dict)
    load_start: str = ""
    load_end: str = ""
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.duplicates == 0 and self.missed == 0 and self.runs > 0


class Soak:
    """One store's soak: its instances, its faults, then the judgement of every job x tick."""

    def __init__(self, store: str, url: str, directory: Path, options: Options, env: dict[str, str],
                 extra: list[str], rng: random.Random) -> None:
        self.store, self.url, self.options = store, url, options
        self.extra, self.rng = extra, rng
        self.launcher = Launcher(directory, Instance, env, gate=directory / f"{store}.gate")
        self.incarnations: list[Incarnation] = []
        self.current: dict[int, Incarnation] = {}
        self.faults: list[Fault] = []
        self.result = Result(store, options.instances, options.jobs, options.seconds)

    def _spawn(self, slot: int) -> Incarnation:
        number = sum(1 for i in self.incarnations if i.slot == slot) + 1
        name = f"i{slot}-{number}"
        o, launcher = self.options, self.launcher
        command = instance_command(launcher.ledger(f"{self.store}-{name}"), name, o.jobs, "--store", self.url,
                                   "--trace", "--lease", str(o.lease), "--body-seconds", str(o.body_seconds),
                                   "--start-gate", str(launcher.gate), *self.extra)
        incarnation = Incarnation(slot, number, launcher.spawn(f"{self.store}-{name}", command))
        self.incarnations.append(incarnation)
        self.current[slot] = incarnation
        return incarnation

    def _check_alive(self) -> None:
        self.launcher.assert_all_alive([i.proc for i in self.current.values() if i.killed_at is None])

    def start(self) -> tuple[float, float]:
        """Start every instance together; the window of ticks (first, end)."""
        for slot in range(self.options.instances):
            self._spawn(slot)
        self.launcher.open_gate(timeout=180)
        first = float(math.ceil(self.launcher.wait_ready(timeout=60)) + WARMUP)
        return first, first + self.options.seconds

    def run(self) -> Result:
        """The whole soak, judged; never raises (an error is in the result)."""
        result = self.result
        result.load_start = load()
        try:
            first, end = self.start()
            self.fault_until(first, end)
            self.settle(end)
            result.load_end = load()
        except AssertionError as error:  # a process died (tests.support.fleet.Died), or a wait ran out
            result.error = str(error)
            return result
        finally:
            self.launcher.terminate_all(timeout=20)
        self.judge(first, end)
        return result

    def fault_until(self, first: float, end: float) -> None:
        """Every fault_every seconds after the window opened: SIGKILL or SIGSTOP a random running instance, and
        restart it (``down`` s later) or SIGCONT it (``pause`` s later)."""
        o = self.options
        pending: list[tuple[float, str, Incarnation]] = []  # (when, "restart" | "continue", whom)
        next_fault = first + o.fault_every
        while True:
            now = time.time()
            for item in sorted(p for p in pending if p[0] <= now):
                pending.remove(item)
                _, action, incarnation = item
                if action == "continue":
                    incarnation.proc.signal_group(signal.SIGCONT)
                    start, _ = incarnation.stops[-1]
                    incarnation.stops[-1] = (start, time.time())
                else:
                    self._spawn(incarnation.slot)
                    self.result.restarts += 1
                self.faults[-1].back_at = time.time()
            if now >= end:
                break
            self._check_alive()
            if now >= next_fault and not pending:
                candidates = sorted(self.current.values(), key=lambda i: i.slot)
                target = self.rng.choice(candidates)
                kind = self.rng.choice(("kill", "stop"))
                if kind == "kill":
                    target.proc.signal_group(signal.SIGKILL)
                    target.killed_at = time.time()
                    target.proc.process.wait(10)
                    pending.append((target.killed_at + o.down, "restart", target))
                    self.result.kills += 1
                else:
                    target.proc.signal_group(signal.SIGSTOP)
                    stopped = time.time()
                    target.stops.append((stopped, math.inf))
                    pending.append((stopped + o.pause, "continue", target))
                    self.result.stops += 1
                self.faults.append(Fault(time.time(), kind, target.name))
                next_fault += o.fault_every
            time.sleep(0.05)
        for _, action, incarnation in pending:  # at the end: continue a stopped one; a killed one stays down
            if action == "continue":
                incarnation.proc.signal_group(signal.SIGCONT)
                start, _ = incarnation.stops[-1]
                incarnation.stops[-1] = (start, time.time())
                self.faults[-1].back_at = time.time()

    def settle(self, end: float) -> None:
        """After the window: long enough for its last ticks, and those a paused holder still had, to be run."""
        deadline = end + max(self.options.lease, self.options.pause) + BUSY_GRACE + 3
        while time.time() < deadline:
            self._check_alive()
            time.sleep(0.2)

    # -- judging ------------------------------------------------------------------------------------------

    def judge(self, first: float, end: float) -> None:
        result, o = self.result, self.options
        lines = {i.name: i.proc.lines() for i in self.incarnations}
        by_name = {i.name: i for i in self.incarnations}
        bodies: dict[tuple[int, float], list[tuple[str, float]]] = defaultdict(list)
        records: dict[tuple[int, float], list[tuple[str, str, bool, str]]] = defaultdict(list)
        outcomes: Counter[str] = Counter()
        for name, parsed in lines.items():
            for job, fire, start in parsed.bodies:
                bodies[(job, round(fire, 3))].append((name, start))
            for (job, fire), (outcome, lost, holder) in parsed.records.items():
                records[(job, round(fire, 3))].append((name, outcome, lost, holder))
                if first <= fire < end:
                    outcomes[outcome] += 1
        result.outcomes = dict(outcomes)
        result.faults = [asdict(f) for f in self.faults]

        def faulted_holder(holder: str, tick: float) -> bool:
            incarnation = by_name.get(holder)
            if incarnation is None:
                return False
            if incarnation.killed_at is not None and incarnation.killed_at - 1 <= tick <= \
                    incarnation.killed_at + o.lease + BUSY_GRACE + 1:
                return True
            return any(s - o.lease - 1 <= tick <= c + o.lease + BUSY_GRACE + 1 for s, c in incarnation.stops)

        # Every acquire and release each instance sent, by job: (instance, sent, answered).
        spans: dict[int, list[tuple[str, float, float]]] = defaultdict(list)
        for name, parsed in lines.items():
            for (job, _), sent in parsed.fires.items():
                answered = parsed.answers.get((job, _), [])
                spans[job] += [(name, f, a[1]) for f, a in zip(sent, answered, strict=False)]
            for job, sent_at, answered_at in parsed.releases:
                spans[job].append((name, sent_at, answered_at))

        def stalled_by(key: tuple[int, float], tick: float) -> str | None:
            """The stopped instance whose open transaction held a job's row lock (an acquire or release by another
            instance was sent before its SIGCONT and answered only then), if this tick was still being decided when
            it stopped and its acquires waited on that lock too, or were all sent only once it went on: queued
            behind worker threads that waited on it. Or, on SQL stores that batch, whose row lock made this tick's
            batches by others time out while it was stopped: answered busy with no holder known
            (``BATCH_LOCK_TIMEOUT``)."""
            # When this tick's acquires were answered: a stop can only have held up a tick still being decided
            # when it began (on a loaded machine a tick's batch may still be in flight a second or more after it).
            answered_at = [answer[1] for parsed in lines.values() for answer in parsed.answers.get(key, [])]
            for incarnation in self.incarnations:
                for stopped, continued in incarnation.stops:
                    if tick > continued + o.lease + BUSY_GRACE + 1 or not any(a >= stopped for a in answered_at):
                        continue
                    timed_out = [answered for name, parsed in lines.items() if name != incarnation.name
                                 for status, answered, holder in parsed.answers.get(key, [])
                                 if status == "busy" and holder == "-"]
                    if timed_out and all(stopped <= answered <= continued + 0.5 for answered in timed_out):
                        return incarnation.name

                    def across(name: str, sent: float, answered: float, _c: float = continued,
                               _x: str = incarnation.name) -> bool:
                        return name != _x and sent < _c <= answered + 0.1 and answered - sent > 0.5

                    if not any(across(*span) for spans_of_job in spans.values() for span in spans_of_job):
                        continue
                    mine = [(name, parsed.fires[key], parsed.answers.get(key, [])) for name, parsed in lines.items()
                            if name != incarnation.name and key in parsed.fires]
                    waited_on_it = any(across(name, f, a[1]) for name, sent, answered in mine
                                       for f, a in zip(sent, answered, strict=False))
                    queued = bool(mine) and all(min(sent) >= continued - 0.1 for _, sent, _ in mine)
                    if waited_on_it or queued:
                        return incarnation.name
            return None

        def waited(record: tuple[str, str, bool, str], key: tuple[int, float], tick: float) -> bool:
            """Refused for a faulted holder's lease: busy to the end, or busy and then taken by a later tick once
            the lease ran out (the busy retries ended as the next tick fired)."""
            name, outcome, _, holder = record
            if outcome == "skipped_busy":
                return faulted_holder(holder, tick)
            return outcome == "skipped_already_ran" and any(
                status == "busy" and faulted_holder(who, tick) for status, _, who in lines[name].answers.get(key, []))

        examples: dict[str, list[str]] = defaultdict(list)

        def example(kind: str, job: int, tick: float, detail: str) -> None:
            if len(examples[kind]) < MAX_EXAMPLES:
                examples[kind].append(f"job {job} tick {time.strftime('%H:%M:%S', time.gmtime(tick))}: {detail}")

        for tick in range(int(first), int(end)):
            for job in range(o.jobs):
                key = (job, float(tick))
                result.ticks += 1
                started = bodies.get(key, [])
                if len(started) > 1:
                    result.duplicates += len(started) - 1
                    result.runs += 1
                    example("duplicate", job, tick, f"bodies by {[n for n, _ in started]}")
                    continue
                if len(started) == 1:
                    name, start = started[0]
                    if key in lines[name].ends:
                        result.runs += 1
                        result.late_runs += start - tick > 1.0
                        result.lock_lost += any(r[0] == name and r[2] for r in records.get(key, []))
                    elif by_name[name].killed_at is not None:
                        result.lost_with_holder += 1
                        example("lost with its holder", job, tick, f"{name} killed mid-body")
                    else:
                        result.runs += 1
                        result.unfinished += 1
                        example("unfinished", job, tick, f"{name}'s body never ended")
                    continue
                killed = [n for n, parsed in lines.items() if by_name[n].killed_at is not None
                          and key in parsed.fires and not any(r[0] == n for r in records.get(key, []))
                          and (len(parsed.answers.get(key, [])) < len(parsed.fires[key])
                               or parsed.answers[key][-1][0] == "acquired")]
                if killed:
                    result.lost_with_holder += 1
                    answer = lines[killed[0]].answers.get(key)
                    example("lost with its holder", job, tick,
                            f"{killed[0]} killed {'after it acquired' if answer else 'while acquiring'}")
                    continue
                seen = records.get(key, [])
                stopped = [r[0] for r in seen if r[1] == "skipped_busy" and r[2] and by_name[r[0]].stops]
                if stopped:  # it won the lock, was stopped past its lease, and found the lock gone at its body
                    result.lost_with_holder += 1
                    example("lost with its holder", job, tick, f"{stopped[0]} stopped before its body started")
                    continue
                if seen and all(waited(r, key, tick) for r in seen):
                    result.waited_out_lease += 1
                    example("waited out a faulted holder's lease", job, tick,
                            f"held by {sorted({r[3] for r in seen})}")
                    continue
                stopper = stalled_by(key, tick)
                if stopper and all(r[1] in ("skipped_busy", "skipped_already_ran") for r in seen):
                    result.stalled += 1
                    example("stalled behind a stopped instance's open transaction", job, tick,
                            f"{stopper} stopped; records " + ", ".join(f"{r[0]}: {r[1]}" for r in seen))
                    continue
                result.missed += 1
                example("missed", job, tick, "records " + (", ".join(f"{r[0]}: {r[1]} ({r[3]})" for r in seen)
                                                          or "none"))
        result.examples = dict(examples)


# -- the stores ---------------------------------------------------------------------------------------------


@contextmanager
def store_setup(store: str, directory: Path, options: Options) -> Iterator[tuple[str, dict[str, str], list[str]]]:
    """(store URL, environment, extra instance options) for a soak on ``store``, torn down afterwards."""
    if store == "redis":
        server = PrivateRedis(directory)
        try:
            yield server.url(0) + "?prefix=mutexcron-soak:", {}, []
        finally:
            server.close()
    elif store == "postgres":
        with postgres_database(directory) as name:
            yield "django://default", postgres_env(name), [
                "--django-settings", "bench.fleet_settings", "--max-workers", str(options.pg_workers)]
    else:
        raise ValueError(f"unknown store {store!r}")


def run_soaks(stores: list[str], options: Options, *, parallel: bool = True,
              directory: Path | None = None) -> list[Result]:
    """Soak each store (at the same time unless ``parallel`` is false); the results in ``stores`` order."""
    seed = options.seed if options.seed is not None else random.randrange(1 << 30)
    options.seed = seed
    results: dict[str, Result] = {}
    with ExitStack() as stack:
        if directory is None:
            directory = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="mutexcron-soak-")))

        def one(store: str, index: int) -> None:
            try:
                with store_setup(store, directory, options) as (url, env, extra):
                    soak = Soak(store, url, directory, options, env, extra, random.Random(seed + index))
                    results[store] = soak.run()
            except Exception as error:
                failed = Result(store, options.instances, options.jobs, options.seconds)
                failed.error = f"{type(error).__name__}: {error}"
                results[store] = failed

        if parallel:
            threads = [threading.Thread(target=one, args=(store, n), name=f"soak-{store}")
                       for n, store in enumerate(stores)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        else:
            for n, store in enumerate(stores):
                one(store, n)
    return [results[store] for store in stores]


# -- report -------------------------------------------------------------------------------------------------


def report(results: list[Result], options: Options) -> str:
    """The soak's table and its legend, as Markdown (it goes in the README as it is)."""
    o = options
    lines = [
        f"Soak: {o.instances} instances x {o.jobs} jobs x one-second ticks for {o.seconds:g} s; every "
        f"{o.fault_every:g} s a random instance is SIGKILLed (started again {o.down:g} s later) or SIGSTOPped "
        f"(SIGCONT {o.pause:g} s later); lease {o.lease:g} s, {o.body_seconds * 1000:g} ms bodies, seed {o.seed}",
        "",
        "| store | job x ticks | runs | duplicates | missed | lost with their holder | waited out a faulted "
        "holder's lease | stalled behind a stopped transaction | kills / stops | late runs | lock lost | "
        "load at start / end |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | --- |",
    ]
    for r in results:
        if r.error:
            lines.append(f"| {r.store} | error: {r.error.splitlines()[0]} | | | | | | | | | | |")
            continue
        lines.append(f"| {r.store} | {r.ticks:,} | {r.runs:,} | {r.duplicates} | {r.missed} | {r.lost_with_holder} "
                     f"| {r.waited_out_lease} | {r.stalled} | {r.kills} / {r.stops} | {r.late_runs} | {r.lock_lost} "
                     f"| {r.load_start} / {r.load_end} |")
    lines += [
        "",
        "- runs: job x ticks whose body started (and finished); late runs: started more than 1 s after the tick "
        "(a paused holder finishing after SIGCONT); lock lost: runs whose lease ran out under them.",
        "- lost with their holder: the instance that took the tick was SIGKILLed before its body finished (or "
        "while its acquire was in flight), or SIGSTOPped before its body started until its lease ran out and the "
        "lock was taken (it then starts no body): the store counts the tick as taken, so nobody else runs it.",
        "- waited out a faulted holder's lease: every instance that fired the tick found the job's lock still held "
        "by a killed or stopped instance, within its lease, until its retries ended or the next tick took the lock.",
        "- stalled behind a stopped transaction (SQL): the tick's acquires waited on a row lock held by the open "
        "transaction of an instance SIGSTOPped between its UPDATE and COMMIT, or were queued behind worker threads "
        "waiting on it, until its SIGCONT; the tick was refused then.",
        "- missed: a tick nobody ran for any other reason. Duplicates and misses must be 0.",
    ]
    for r in results:
        for kind, found in r.examples.items():
            lines.append(f"- {r.store}, {kind}: " + "; ".join(found[:3]))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    defaults = Options()
    parser.add_argument("--seconds", type=float, default=defaults.seconds, help="the window (default 600)")
    parser.add_argument("--instances", type=int, default=defaults.instances, help="instance processes (default 8)")
    parser.add_argument("--jobs", type=int, default=defaults.jobs, help="per-second jobs (default 20)")
    parser.add_argument("--stores", default=",".join(STORES), help="comma-separated: redis, postgres (default both)")
    parser.add_argument("--fault-every", type=float, default=defaults.fault_every, help="seconds (default 30)")
    parser.add_argument("--down", type=float, default=defaults.down, help="a killed instance's restart delay (5)")
    parser.add_argument("--pause", type=float, default=defaults.pause, help="how long a SIGSTOP lasts (default 5)")
    parser.add_argument("--lease", type=float, default=defaults.lease, help="the jobs' lease (default 3 s)")
    parser.add_argument("--body-seconds", type=float, default=defaults.body_seconds, help="each body's work (0.1)")
    parser.add_argument("--pg-workers", type=int, default=defaults.pg_workers,
                        help="max_workers of each instance on PostgreSQL (default 4)")
    parser.add_argument("--seed", type=int, help="the faults' random seed (printed)")
    parser.add_argument("--serial", action="store_true", help="one store after the other, not at the same time")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)
    stores = [s.strip() for s in args.stores.split(",") if s.strip()]
    if not stores or set(stores) - set(STORES):
        parser.error(f"--stores takes {', '.join(STORES)}")
    if args.down >= args.fault_every or args.pause >= args.fault_every:
        parser.error("--down and --pause must be shorter than --fault-every")
    options = Options(args.seconds, args.instances, args.jobs, args.fault_every, args.down, args.pause, args.lease,
                      args.body_seconds, args.pg_workers, args.seed)

    def interrupted(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupted)
    started = time.monotonic()
    results: list[Result] = []
    with suppress(KeyboardInterrupt):
        results = run_soaks(stores, options, parallel=not args.serial)
    if args.json:
        print(json.dumps({"options": asdict(options), "results": [asdict(r) | {"ok": r.ok} for r in results]},
                         indent=2))
    else:
        print(report(results, options))
        print(f"\n(took {time.monotonic() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
