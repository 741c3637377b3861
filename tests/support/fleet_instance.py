"""One instance of a fleet, run as its own OS process by tests/test_fleet.py and tests/ops/test_fleet_control.py.

    python tests/support/fleet_instance.py --store URL --instance NAME --ledger PATH
        [--spec "* * * * * *"] [--lease SECONDS] [--clock-skew SECONDS] [--body-seconds SECONDS] [--hang-first]
        [--catch-up skip|latest|all] [--sync-interval SECONDS] [--start-gate PATH] [--django-settings MODULE]
        [--alert-after SECONDS] [--fail-while PATH] [--fence REDIS_URL] [--operator] [--scheme NAME=DOTTED.PATH]
        [--on-busy POLICY]

Declares one job, "fleet.tick", in a registry of its own, runs a Scheduler on it and appends one JSON line
per event to its own ledger file (opened with O_APPEND; each line is written with a single write() and
fsync'ed, so a ledger never loses, splits or merges lines, and no two processes share a file):

    {"event": "ready", ...}                  after Scheduler.start()
    {"event": "record", "outcome": ...}      one per RunRecord of a run or a skip (listener; an operator's
                                            backfills too)
    {"event": "body", "fire_time": ...}      written by the job body before it returns ("began": when it
                                            started; "cancelled": it stopped early, told by ctx.cancelled)
    {"event": "holding", "fire_time": ...}   --hang-first: the first body of the fleet, which never returns
    {"event": "alert", "kind": ...}          an "overdue", "failing" or "recovered" listener event
    {"event": "fenced", "phase": ..., "accepted": ..., "token": ..., "lock_lost": ...}
                                            --fence: the body's "begin" and "end" writes to a fencing sink
    {"event": "stopped", ...}                after a clean shutdown on SIGTERM

With ``--start-gate PATH`` it writes {"event": "waiting"} once it is built, and starts only when PATH exists
(processes started ahead of time then start together, their imports done). ``--django-settings`` configures
Django first (for the ``django://`` store; the database comes from the settings' environment).

``--operator`` runs no scheduler: it builds a never-started ``Scheduler`` on the same job, writes "ready",
then reads commands from its standard input, one a line, and answers each with a line once it returned:

    pause | resume | schedule SPEC | reset | hold | unlock
                                            ->  {"event": "operated", "action": ..., "called": ISO, ...}
    backfill START END                      ->  {"event": "operated", "action": "backfill", "ran": N, ...}

(``hold`` takes the job's lock for an hour as a hung holder would; ``unlock`` forces it open.)

("called" is the wall clock before the call, "at" after it returned), until "quit" or the end of its input.

The body's ``--body-seconds`` are its own working time, spent in steps of at most 50 ms: a SIGSTOP of the
process does not count as work (the body still has that much to do once continued). It stops early once told
to (``ctx.cancelled``: a timeout, or a newer tick with ``--on-busy replace``).

With ``--fence REDIS_URL`` the body writes its fencing token to a sink at its start and again at its end, as a
job that guards a resource with the token would. The sink (a Redis key holding the highest token it accepted,
and a list of the writes it accepted) takes a write only if its token is at least the highest one seen.

``--scheme sqlite=docs.examples.minimal_store.SQLiteLockStore`` registers a store's URL scheme first (as an app
that brings its own store does, with mutexcron.plugins.register), for a ``--store`` of that scheme.

Every line carries "instance" and "at" (this process's wall clock when the line was written, ISO UTC).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TextIO

from mutexcron._signals import SignalFlag
from mutexcron.plugins import register
from mutexcron.records import JobContext, RunRecord
from mutexcron.registry import Registry, mutex_cron
from mutexcron.scheduling.scheduler import Scheduler
from mutexcron.stores import LockState
from tests.support import Ledger

JOB_NAME = "fleet.tick"
TARGET_NAME = "fleet.target"
HANG_MARKER = "hang-first.marker"
FENCE_TOKEN_KEY = "fence:highest"  # the sink of --fence: the highest token it accepted ...
FENCE_WRITES_KEY = "fence:writes"  # ... and "<instance> <token> <phase>" for every write it accepted
# KEYS: highest, writes; ARGV: token, entry. Accepted (1) only if the token is at least the highest seen.
FENCED_WRITE = """
local highest = tonumber(redis.call('GET', KEYS[1]) or '-1')
if tonumber(ARGV[1]) < highest then return 0 end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('RPUSH', KEYS[2], ARGV[2])
return 1
"""
WORK_STEP = 0.05


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", required=True, help="lock store URL")
    parser.add_argument("--instance", required=True, help="this instance's id")
    parser.add_argument("--ledger", required=True, type=Path, help="this instance's own JSON-lines ledger")
    parser.add_argument("--spec", default="* * * * * *", help="cron spec of the job (default: every second)")
    parser.add_argument("--lease", type=float, default=10.0, help="lease in seconds (default 10)")
    parser.add_argument("--clock-skew", type=float, default=0.0, help="seconds; -2 fires every tick 2 s late")
    parser.add_argument("--body-seconds", type=float, default=0.001, help="how long the body runs (default 1 ms)")
    parser.add_argument("--hang-first", action="store_true",
                        help="the first body run in the fleet blocks forever (marker file next to the ledger)")
    parser.add_argument("--catch-up", choices=("skip", "latest", "all"), default="skip",
                        help="the job's catch_up (default skip)")
    parser.add_argument("--sync-interval", type=float, default=5.0,
                        help="seconds between reads of the store's schedules (default 5)")
    parser.add_argument("--start-gate", type=Path, help="start the scheduler only once this file exists")
    parser.add_argument("--django-settings", help="configure Django with this settings module first")
    parser.add_argument("--alert-after", type=float, help="the job's alert_after in seconds (default: None)")
    parser.add_argument("--fail-while", type=Path, help="the body raises while this file exists")
    parser.add_argument("--fence", help="Redis URL of a fencing sink the body writes its token to")
    parser.add_argument("--on-busy", default="skip", help="the job's on_busy policy (default skip)")
    parser.add_argument("--scheme", help="NAME=DOTTED.PATH: serve --store URLs of scheme NAME with that store class")
    parser.add_argument("--operator", action="store_true",
                        help="run no scheduler: pause, resume or re-time the job on commands from stdin")
    return parser.parse_args(argv)


def setup_django(settings: str | None) -> Callable[[], contextlib.AbstractContextManager[Any]] | None:
    """Configure Django for the ``django://`` store; the fire context that gives each fire fresh connections."""
    if settings is None:
        return None
    os.environ["DJANGO_SETTINGS_MODULE"] = settings
    here = Path(__file__).resolve().parent  # sys.path[0] when run as a script: modules come from the root only
    sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != here]
    import django

    django.setup()
    from mutexcron_django.per_process import fresh_connections

    return fresh_connections


def operate(scheduler: Scheduler, ledger: Ledger, commands: TextIO) -> None:
    """Carry out the operator's commands from ``commands`` on a scheduler that never starts."""
    actions: dict[str, Callable[[str], LockState]] = {
        "pause": lambda _: scheduler.pause(JOB_NAME, by="fleet-operator"),
        "resume": lambda _: scheduler.resume(JOB_NAME),
        "schedule": lambda spec: scheduler.set_schedule(JOB_NAME, spec, by="fleet-operator"),
        "reset": lambda _: scheduler.reset_schedule(JOB_NAME),
        "hold": lambda _: hold(scheduler),
        "unlock": lambda _: unlock(scheduler),
        # run-time schedules: "add NAME SPEC" calls TARGET_NAME with its name as label; "remove NAME"
        "add": lambda text: scheduler.add_schedule(*text.split(" ", 1), TARGET_NAME,  # type: ignore[call-arg]
                                                   kwargs={"label": text.split(" ", 1)[0]}, by="fleet-operator"),
        "remove": lambda name: scheduler.remove_schedule(name, by="fleet-operator"),
    }
    for line in commands:
        action, _, argument = line.strip().partition(" ")
        if action == "quit":
            return
        called = datetime.now(UTC).isoformat()
        if action == "backfill":  # START END, ISO-8601: the job's ticks between them, in this thread
            start, end = (datetime.fromisoformat(part) for part in argument.split())
            ran = scheduler.backfill(JOB_NAME, start, end, by="fleet-operator")
            ledger.write("operated", action=action, argument=argument, called=called, ran=ran)
            continue
        state = actions[action](argument)
        ledger.write("operated", action=action, argument=argument, called=called, paused=state.paused,
                     schedule=state.schedule, schedule_version=state.schedule_version, definition=state.definition)


def work(seconds: float, cancelled: threading.Event) -> bool:
    """``seconds`` of the body's own time, in steps of at most WORK_STEP (time stopped does not count), or less if
    ``cancelled`` is set meanwhile; True if it was."""
    remaining = seconds
    while remaining > 0:
        step = min(remaining, WORK_STEP)
        if cancelled.wait(step):
            return True
        remaining -= step
    return False


def fencing_sink(url: str | None, ledger: Ledger, instance: str) -> Callable[[JobContext, str], None]:
    """The body's write to the --fence sink: ``write(ctx, phase)``, each logged as a "fenced" line."""
    if url is None:
        return lambda ctx, phase: None
    import redis

    client = redis.Redis.from_url(url)
    script = client.register_script(FENCED_WRITE)

    def write(ctx: JobContext, phase: str) -> None:
        accepted = script(keys=[FENCE_TOKEN_KEY, FENCE_WRITES_KEY], args=[ctx.token, f"{instance} {ctx.token} {phase}"])
        ledger.write("fenced", phase=phase, accepted=bool(accepted), token=ctx.token,
                     fire_time=ctx.fire_time.isoformat(), lock_lost=ctx.lock_lost)

    return write


def hold(scheduler: Scheduler) -> LockState:
    """Take the job's lock for an hour, as a holder that then hangs would: no instance runs a tick."""
    scheduler.store.acquire(JOB_NAME, owner="fleet-ghost", lease=timedelta(hours=1), fire_time=None)
    state = scheduler.store.lock(JOB_NAME)
    assert state is not None
    return state


def unlock(scheduler: Scheduler) -> LockState:
    scheduler.store.force_unlock(JOB_NAME)
    state = scheduler.store.lock(JOB_NAME)
    assert state is not None
    return state


class Stop(Exception):
    """SIGTERM, in the operator."""


def _raise_stop(signum: int, frame: object) -> None:
    raise Stop


def stopped(scheduler: Scheduler, ledger: Ledger) -> int:
    """The end of a process whose scheduler never started."""
    scheduler.shutdown()
    ledger.write("stopped")
    ledger.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr,
        format=f"%(asctime)s {args.instance} %(threadName)s %(name)s %(levelname)s %(message)s",
    )
    ledger = Ledger(args.ledger, lambda: datetime.now(UTC).isoformat(), instance=args.instance)
    marker = args.ledger.parent / HANG_MARKER
    never = threading.Event()
    hanging = threading.Event()

    def first_body_in_fleet() -> bool:
        try:
            os.close(os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
        except FileExistsError:
            return False
        return True

    registry = Registry()
    fenced = fencing_sink(args.fence, ledger, args.instance)

    alert_after = None if args.alert_after is None else timedelta(seconds=args.alert_after)

    @mutex_cron(args.spec, name=JOB_NAME, lease=args.lease, catch_up=args.catch_up, registry=registry,
                alert_after=alert_after, on_busy=args.on_busy)
    def tick(ctx: JobContext) -> None:
        fields = {"fire_time": ctx.fire_time.isoformat(), "token": ctx.token, "catch_up": ctx.catch_up,
                  "backfill": ctx.backfill, "began": datetime.now(UTC).isoformat()}
        if args.fail_while is not None and args.fail_while.exists():
            ledger.write("body", failed=True, **fields)
            raise RuntimeError(f"{args.fail_while.name} exists")
        if args.hang_first and first_body_in_fleet():
            ledger.write("holding", **fields)
            hanging.set()
            never.wait()  # holds the lock until this process is killed; the heartbeat keeps renewing it
        fenced(ctx, "begin")
        cancelled = work(args.body_seconds, ctx.cancelled)
        fenced(ctx, "end")
        ledger.write("body", cancelled=cancelled, **fields)

    def target(ctx: JobContext, label: str) -> None:  # the target of run-time schedules (operator: add)
        ledger.write("body", job=ctx.job_name, label=label, fire_time=ctx.fire_time.isoformat(), token=ctx.token)

    registry.allow(target, TARGET_NAME)

    def on_record(record: RunRecord) -> None:
        ledger.write(
            "record",
            job=record.job_name,
            fire_time=_iso(record.fire_time),
            outcome=str(record.outcome),
            started_at=_iso(record.started_at),
            finished_at=_iso(record.finished_at),
            token=record.token,
            lock_lost=record.lock_lost,
            error=record.error,
            catch_up=record.catch_up,
            backfill=record.backfill,
        )

    stop = SignalFlag()  # a threading.Event set from a signal handler can deadlock the main thread
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
    signal.signal(signal.SIGINT, lambda signum, frame: stop.set())

    fire_context = setup_django(args.django_settings)
    if args.scheme is not None:
        scheme, _, path = args.scheme.partition("=")
        register("lock_store", scheme, path)
    scheduler = Scheduler(
        args.store, registry=registry, instance_id=args.instance, clock_skew=timedelta(seconds=args.clock_skew),
        sync_interval=timedelta(seconds=args.sync_interval), fire_context=fire_context,
    )
    if args.operator:
        # Blocked reading its input, it stops on SIGTERM at once (the handler's exception ends the read).
        signal.signal(signal.SIGTERM, _raise_stop)
        scheduler.add_listener(on_record)  # the runs and skips of its backfills
        ledger.write("ready", pid=os.getpid(), operator=True)
        with contextlib.suppress(Stop):
            operate(scheduler, ledger, sys.stdin)
        return stopped(scheduler, ledger)
    scheduler.add_listener(on_record)
    scheduler.add_listener(lambda alert: ledger.write("alert", kind=alert.event, incident=alert.incident),
                           events=("overdue", "failing", "recovered"))
    if args.start_gate is not None:
        ledger.write("waiting", pid=os.getpid())
        while not args.start_gate.exists():
            if stop.wait(0.01):
                return stopped(scheduler, ledger)
    scheduler.start()
    ledger.write("ready", pid=os.getpid(), clock_skew=args.clock_skew, lease=args.lease)
    while not stop.wait(0.5):  # a bounded wait keeps the main thread responsive to signals
        pass
    scheduler.shutdown(wait=True, timeout=timedelta(seconds=5))
    ledger.write("stopped")
    ledger.close()
    if hanging.is_set():
        os._exit(0)  # the hung body's worker thread would keep the interpreter from exiting
    return 0


if __name__ == "__main__":
    sys.exit(main())
