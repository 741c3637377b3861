"""A nemesis run's history indexed for the checker (:mod:`.checker`): its clocks, the fault windows, the bodies with
their ends and lanes, the operator calls, and the ticks of a cron spec as the scheduler fires them."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Container, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cache
from typing import Any

from mutexcron.cron import CronTrigger, iter_fire_times, parse_cron

from .history import Event, RunConfig

STORE = "store"  # the target of a fault done to the store's servers: it touches every process
PROXIED = "proxied"  # the target of a link fault: it touches the processes behind the proxy (RunConfig.proxied)
OP_GRACE = 1.0  # seconds after an operator call returned until every instance must obey it
MAX_SKEW = 2.0  # seconds: the most a clock_jump fault moves an instance's clock
_MICROSECOND = timedelta(microseconds=1)


@dataclass(frozen=True)
class Fault:
    """One fault window, from its start line to its end line (or the run's end when it has none)."""

    kind: str
    target: str
    start: float
    end: float
    events: tuple[Event, ...]
    ended: bool
    proxied: frozenset[str] = frozenset()  # the processes behind the proxy, which a link fault touches

    @property
    def store_wide(self) -> bool:
        return self.target == STORE

    def touches(self, proc: str) -> bool:
        return self.target == proc or self.store_wide or (self.target == PROXIED and proc in self.proxied)

    def overlaps(self, lo: float, hi: float) -> bool:
        return self.start <= hi and self.end >= lo

    @property
    def amount(self) -> float:
        """How far a clock_jump moved the target's clock (seconds, + ahead); 0 for other kinds."""
        return float(self.events[0].get("amount") or 0.0)


@dataclass(frozen=True)
class Body:
    """One run of a job's body: its start line, its end line if any, and when it stopped (end, death or run end)."""

    start: Event
    end: Event | None
    until: float
    lane: str  # "tick", "manual" or "backfill START END" (a backfill runs each tick of its range once)
    job: str
    proc: str
    mono: float
    fire: datetime  # the tick (fire_time)
    lease: float

    @property
    def events(self) -> list[Event]:
        return [self.start] if self.end is None else [self.start, self.end]


def parse_time(text: str) -> datetime:
    """An ISO time as an aware UTC datetime (a naive one is taken as UTC)."""
    moment = datetime.fromisoformat(text)
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


class History:
    """The events of a run indexed for the properties: its clocks, fault windows, bodies, operator calls."""

    def __init__(self, events: list[Event], config: RunConfig) -> None:
        self.events = sorted(events, key=lambda event: event["mono"])
        self.config = config
        self._kinds: dict[str, list[Event]] = defaultdict(list)
        for event in self.events:
            self._kinds[event["event"]].append(event)
        run = self.of("run")
        start = next((event for event in run if event.get("phase") == "start"), None)
        if start is None:
            raise ValueError("the history has no run start line")
        self.start, self.wall0 = float(start["mono"]), parse_time(start["wall"])
        end = next((event for event in run if event.get("phase") == "end"), None)
        self.end = float(end["mono"] if end else self.events[-1]["mono"])
        self.faults = self._faults()
        self.ops = self.of("op")
        self.records: dict[tuple[str, datetime], list[Event]] = defaultdict(list)  # (job, tick) -> its records
        self.records_of: dict[str, list[Event]] = defaultdict(list)  # job -> its records
        for record in self.of("record"):
            self.records[(record["job"], parse_time(record["fire_time"]))].append(record)
            self.records_of[record["job"]].append(record)
        # What each run's record says of its lock at the end (the body's own end line comes before the last renewal).
        self.lost = {(r["proc"], r["job"], parse_time(r["fire_time"]), r.get("token")): bool(r.get("lock_lost"))
                     for r in self.of("record") if r.get("token") is not None}
        self.bodies = self._bodies()
        # A schedule() that raised may or may not have stored its task: such a task is not judged.
        self.scheduled = [event for event in self.of("scheduled") if event.get("error") is None and event.get("due")]
        self.task_starts: dict[str, list[Event]] = defaultdict(list)
        for event in self.of("task"):
            if event.get("phase") == "start":
                self.task_starts[event["task_id"]].append(event)

    def of(self, kind: str) -> list[Event]:
        return self._kinds.get(kind, [])

    def mono_of(self, wall: datetime) -> float:
        """The real time (mono) of a nominal wall time."""
        return self.start + (wall - self.wall0).total_seconds()

    def wall_of(self, mono: float) -> datetime:
        return self.wall0 + timedelta(seconds=mono - self.start)

    def earliest_acquire(self, body: Body) -> float:
        """The earliest its lock can have been taken: not before its tick on an instance clock up to MAX_SKEW early
        (the body's own start line comes after the acquire, late on a busy or stopped process). A backfill's past
        tick says nothing: the body's start."""
        if body.lane.startswith("backfill"):
            return body.mono - body.lease
        return min(body.mono, self.mono_of(body.fire) - MAX_SKEW)

    def excused(self, proc: str, lo: float, hi: float, kinds: Container[str] | None = None) -> bool:
        """The fault excuse: a fault (of ``kinds``, if given) touching ``proc`` (or the whole store) overlaps
        [lo, hi]."""
        return any((kinds is None or fault.kind in kinds) and fault.touches(proc) and fault.overlaps(lo, hi)
                   for fault in self.faults)

    def binding(self, body: Body, returned: float) -> bool:
        """The ops excuse, reversed: ``body`` started after an operator call that returned at ``returned`` had to
        hold everywhere, and no fault explains a process that acted on what it knew before."""
        return body.mono > returned + OP_GRACE and not self.excused(body.proc, returned - 1.0, body.mono)

    def done(self, *actions: str) -> list[Event]:
        """The operator calls of these actions that returned without raising."""
        return [op for op in self.ops if op["action"] in actions and op.get("error") is None]

    def _faults(self) -> list[Fault]:
        lines: dict[Any, dict[str, Event]] = defaultdict(dict)  # fault id -> phase -> its line
        for event in self.of("fault"):
            lines[event["fault"]].setdefault(event.get("phase", ""), event)
        pairs = [(line["start"], line.get("end")) for line in lines.values() if "start" in line]
        faults = [Fault(start["kind"], str(start.get("target")), float(start["mono"]),
                        self.end if end is None else float(end["mono"]), (start,) if end is None else (start, end),
                        end is not None, frozenset(self.config.proxied)) for start, end in pairs]
        return sorted(faults, key=lambda fault: fault.start)

    def _bodies(self) -> list[Body]:
        deaths: dict[str, list[float]] = defaultdict(list)  # when each process was SIGKILLed or exited
        for event in self.events:
            if event["event"] == "exit" or (event["event"], event.get("kind"), event.get("phase")) == (
                    "fault", "kill", "start"):
                deaths[str(event.get("target"))].append(float(event["mono"]))
        manual = {(r["job"], parse_time(r["fire_time"]), r.get("token")) for r in self.of("record") if r.get("manual")}
        running: dict[tuple[Any, ...], list[int]] = defaultdict(list)  # where in pairs each running body is
        pairs: list[list[Any]] = []  # [start, end or None]
        for event in self.of("body"):
            key = (event["proc"], event["job"], event["fire_time"], event.get("token"), bool(event.get("backfill")))
            if event.get("phase") == "start":
                running[key].append(len(pairs))
                pairs.append([event, None])
            elif running[key]:
                pairs[running[key].pop(0)][1] = event
        bodies = []
        for start, end in pairs:
            died = min((m for m in deaths[start["proc"]] if m >= start["mono"]), default=self.end)
            job, fire, token = str(start["job"]), parse_time(start["fire_time"]), start.get("token")
            lane = (f"backfill {start.get('range')}" if start.get("backfill") else
                    "manual" if start.get("manual") or (job, fire, token) in manual else "tick")
            bodies.append(Body(start, end, died if end is None else float(end["mono"]), lane, job, str(start["proc"]),
                               float(start["mono"]), fire, float(start.get("lease") or 0.0)))
        return bodies


@cache
def _trigger(spec: str) -> CronTrigger:
    return CronTrigger(parse_cron(spec))


def ticks(spec: str, first: datetime, last: datetime) -> Iterator[datetime]:
    """The fire times of a cron spec (UTC, with seconds) in [first, last], as the scheduler fires them."""
    for fire in iter_fire_times(_trigger(spec), first - _MICROSECOND):
        if fire > last:
            return
        yield fire


def is_tick(spec: str, moment: datetime) -> bool:
    return _trigger(spec).next_after(moment - _MICROSECOND) == moment
