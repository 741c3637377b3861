"""The fleet tests' instance: one job, "fleet.tick", in a registry of its own, on a Scheduler, and one JSON line per
event in its own ledger (tests.support.Ledger: one fsync'ed write() a line, so a ledger never loses, splits or merges
lines, and no two processes share a file):

    {"event": "waiting", "pid": ...}         built, waiting for --start-gate
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

Every line carries "instance" and "at" (this process's wall clock when the line was written, ISO UTC).

``--operator`` runs no scheduler: it builds a never-started ``Scheduler`` on the same job, writes "ready", then reads
commands from its standard input, one a line, and answers each with a line once it returned ("called" is the wall
clock before the call, "at" after it returned), until "quit" or the end of its input:

    pause | resume | schedule SPEC | reset | hold | unlock | add NAME SPEC | remove NAME
                                            ->  {"event": "operated", "action": ..., "called": ISO, ...}
    backfill START END                      ->  {"event": "operated", "action": "backfill", "ran": N, ...}

(``hold`` takes the job's lock for an hour as a hung holder would; ``unlock`` forces it open; ``add`` a run-time
schedule that calls "fleet.target" with its name as label.)

The body's ``--body-seconds`` are its own working time (a SIGSTOP does not count); it stops early once told to
(``ctx.cancelled``: a timeout, or a newer tick with ``--on-busy replace``). With ``--fence REDIS_URL`` it writes its
fencing token to a sink at its start and again at its end, as a job that guards a resource with the token would: the
sink (a Redis key holding the highest token it accepted, and a list of the writes it accepted) takes a write only if
its token is at least the highest one seen.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TextIO

from mutexcron.plugins import register
from mutexcron.records import JobContext, RunRecord
from mutexcron.registry import Registry, mutex_cron
from mutexcron.scheduling.scheduler import Scheduler
from mutexcron.stores import LockState, require_control
from tests.support import Ledger
from tests.support.fleet_instance import setup_django, work

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


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


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


class Stop(Exception):
    """SIGTERM, in the operator."""


def _raise_stop(signum: int, frame: object) -> None:
    raise Stop


class Tick:
    """The one job, its ledger and its scheduler (never started by an operator: see :meth:`operate`)."""

    interval = 0.5  # a bounded wait keeps the main thread responsive to signals

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.ledger = Ledger(args.ledger, lambda: datetime.now(UTC).isoformat(), instance=args.instance)
        self.hanging = threading.Event()
        registry = Registry()
        mutex_cron(args.spec, name=JOB_NAME, lease=args.lease, catch_up=args.catch_up, registry=registry,
                   alert_after=None if args.alert_after is None else timedelta(seconds=args.alert_after),
                   on_busy=args.on_busy)(self.tick)
        registry.allow(self.target, TARGET_NAME)
        self.fenced = fencing_sink(args.fence, self.ledger, args.instance)
        fire_context = setup_django(args.django_settings)
        if args.scheme is not None:  # NAME=DOTTED.PATH, as an app that brings its own store registers it
            scheme, _, path = args.scheme.partition("=")
            register("lock_store", scheme, path)
        self.scheduler = Scheduler(
            args.store, registry=registry, instance_id=args.instance, clock_skew=timedelta(seconds=args.clock_skew),
            sync_interval=timedelta(seconds=args.sync_interval), fire_context=fire_context,
            max_workers=args.max_workers)
        self.scheduler.add_listener(self.on_record)

    def first_body_in_fleet(self) -> bool:
        try:
            os.close(os.open(self.args.ledger.parent / HANG_MARKER, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
        except FileExistsError:
            return False
        return True

    def tick(self, ctx: JobContext) -> None:
        args = self.args
        fields = {"fire_time": ctx.fire_time.isoformat(), "token": ctx.token, "catch_up": ctx.catch_up,
                  "backfill": ctx.backfill, "began": datetime.now(UTC).isoformat()}
        if args.fail_while is not None and args.fail_while.exists():
            self.ledger.write("body", failed=True, **fields)
            raise RuntimeError(f"{args.fail_while.name} exists")
        if args.hang_first and self.first_body_in_fleet():
            self.ledger.write("holding", **fields)
            self.hanging.set()
            threading.Event().wait()  # holds the lock until this process is killed; the heartbeat keeps renewing it
        self.fenced(ctx, "begin")
        cancelled = work(args.body_seconds, ctx.cancelled)
        self.fenced(ctx, "end")
        self.ledger.write("body", cancelled=cancelled, **fields)

    def target(self, ctx: JobContext, label: str) -> None:  # the target of run-time schedules (operator: add)
        self.ledger.write("body", job=ctx.job_name, label=label, fire_time=ctx.fire_time.isoformat(),
                          token=ctx.token)

    def on_record(self, record: RunRecord) -> None:
        self.ledger.write("record", job=record.job_name, fire_time=_iso(record.fire_time),
                          outcome=str(record.outcome), started_at=_iso(record.started_at),
                          finished_at=_iso(record.finished_at), token=record.token, lock_lost=record.lock_lost,
                          error=record.error, catch_up=record.catch_up, backfill=record.backfill)

    def waiting(self) -> None:
        self.ledger.write("waiting", pid=os.getpid())

    def start(self) -> None:
        self.scheduler.add_listener(lambda alert: self.ledger.write("alert", kind=alert.event, incident=alert.incident),
                                    events=("overdue", "failing", "recovered"))
        self.scheduler.start()
        self.ledger.write("ready", pid=os.getpid(), clock_skew=self.args.clock_skew, lease=self.args.lease)

    def every(self) -> None:
        pass

    def stop(self, started: bool) -> None:
        self.scheduler.shutdown(wait=True, timeout=timedelta(seconds=5))
        self.ledger.write("stopped")
        self.ledger.close()
        if self.hanging.is_set():
            os._exit(0)  # the hung body's worker thread would keep the interpreter from exiting

    def operate(self, commands: TextIO) -> None:
        """Carry out the operator's commands on the never-started scheduler; stop on SIGTERM at once (the handler's
        exception ends the blocked read)."""
        signal.signal(signal.SIGTERM, _raise_stop)
        self.ledger.write("ready", pid=os.getpid(), operator=True)
        with contextlib.suppress(Stop):
            self._operate(commands)
        self.stop(started=False)

    def _operate(self, commands: TextIO) -> None:
        scheduler = self.scheduler
        actions: dict[str, Callable[[str], LockState | None]] = {
            "pause": lambda _: scheduler.pause(JOB_NAME, by="fleet-operator"),
            "resume": lambda _: scheduler.resume(JOB_NAME),
            "schedule": lambda spec: scheduler.set_schedule(JOB_NAME, spec, by="fleet-operator"),
            "reset": lambda _: scheduler.reset_schedule(JOB_NAME),
            "hold": lambda _: self.hold(),
            "unlock": lambda _: self.unlock(),
            "add": self.add,
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
                self.ledger.write("operated", action=action, argument=argument, called=called, ran=ran)
                continue
            state = actions[action](argument)
            assert state is not None
            self.ledger.write("operated", action=action, argument=argument, called=called, paused=state.paused,
                              schedule=state.schedule, schedule_version=state.schedule_version,
                              definition=state.definition)

    def hold(self) -> LockState | None:
        """Take the job's lock for an hour, as a holder that then hangs would: no instance runs a tick."""
        self.scheduler.store.acquire(JOB_NAME, owner="fleet-ghost", lease=timedelta(hours=1), fire_time=None)
        return require_control(self.scheduler.store, "hold the job's lock").lock(JOB_NAME)

    def unlock(self) -> LockState | None:
        control = require_control(self.scheduler.store, "unlock the job")
        control.force_unlock(JOB_NAME)
        return control.lock(JOB_NAME)

    def add(self, text: str) -> LockState:
        """NAME SPEC: a run-time schedule that calls TARGET_NAME with its name as label."""
        name, spec = text.split(" ", 1)
        return self.scheduler.add_schedule(name, spec, TARGET_NAME, kwargs={"label": name}, by="fleet-operator")
