"""The checker of a nemesis run: judges a recorded history (:mod:`.history`) against the properties that
docs/guarantees.md promises, one function per property, and counts what the run did.

Every time is compared on ``mono`` (one clock for the whole machine); a tick's nominal ``fire_time`` is mapped to
``mono`` through the harness's "run" start line, whose wall clock no fault moves.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from .history import Event, RunConfig
from .index import OP_GRACE, Body, Fault, History, is_tick, parse_time, ticks

PROPERTIES = ("mutual_exclusion", "once_per_tick", "exactly_once", "paused", "stale_schedule", "cancelled_task",
              "task_runs", "recovery")
LEASE_SLACK = 0.2  # a second holder this long before the first one's lease could have run out is never excused
WARM_UP, COOL_DOWN = 20.0, 5.0  # exactly_once judges the ticks between run start + WARM_UP and run end - COOL_DOWN
TASK_MARGIN = 15.0  # a task due later than run end - TASK_MARGIN may be left unrun


@dataclass
class Anomaly:
    """One violation of a property, at ``mono``, with the events that show it."""

    prop: str
    message: str
    mono: float
    events: list[Event] = field(default_factory=list)


@dataclass
class Verdict:
    """What the checker found: the anomalies (in real-time order), what the run did, and how fast it recovered."""

    anomalies: list[Anomaly] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    recovery: dict[str, list[float]] = field(default_factory=dict)  # fault kind -> seconds to the next probe run

    @property
    def ok(self) -> bool:
        return not self.anomalies

    def of(self, prop: str) -> list[Anomaly]:
        return [anomaly for anomaly in self.anomalies if anomaly.prop == prop]

    def add(self, prop: str, message: str, mono: float, events: Iterable[Event]) -> None:
        self.anomalies.append(Anomaly(prop, message, mono, list(events)))


def _group(bodies: Iterable[Body], key: Callable[[Body], Hashable]) -> dict[Any, list[Body]]:
    """The bodies by ``key``, each group in start order."""
    groups: dict[Any, list[Body]] = defaultdict(list)
    for body in sorted(bodies, key=lambda body: body.mono):
        groups[key(body)].append(body)
    return groups


def mutual_exclusion(history: History, verdict: Verdict) -> None:
    """Two bodies of one job never overlap while both leases are live: unless a fault froze or cut off the first
    holder past its lease (from the earliest it can have taken its lock: a holder stopped before its body starts
    it late), or the second is a stale holder that a stop froze between its lock and its body."""
    for bodies in _group(history.bodies, lambda body: body.job).values():
        for i, first in enumerate(bodies):
            for second in bodies[i + 1:]:
                if second.mono >= first.until:
                    break
                if _stale_start(history, first, second):
                    continue
                if second.mono < history.earliest_acquire(first) + first.lease - LEASE_SLACK:
                    why = "before the first holder's lease could have run out"
                elif not history.excused(first.proc, history.earliest_acquire(first), second.mono):
                    why = "with no fault on the first holder"
                else:
                    continue
                verdict.add("mutual_exclusion", f"{second.job}: {second.proc} started while {first.proc} ran, {why}",
                            second.mono, [*first.events, second.start])


def _stale_start(history: History, first: Body, second: Body) -> bool:
    """``second`` took its lock before ``first`` did (a lower fencing token) and its process was stopped between
    the earliest it can have taken it and its body's start: frozen past its lease after its last look at the lock
    (the check before a body cannot close that window; fenced writes make such a holder harmless). Its lease was
    no longer live when its body started, so mutual exclusion does not judge it."""
    first_token, second_token = first.start.get("token"), second.start.get("token")
    if not isinstance(first_token, int) or not isinstance(second_token, int) or second_token >= first_token:
        return False
    return history.excused(second.proc, history.earliest_acquire(second), second.mono, kinds=("stop",))


def _gave_way(history: History, body: Body) -> bool:
    """Another worker may have taken this body's tick over (docs/run-on-tasks.md): its worker was killed (no end),
    stopped past its lease (it then ends knowing it lost the lock), or cut off from the store (the store's servers,
    its link) as its body ran or after it ended, while it tried to keep its outcome until its lease ran out."""
    def during(*kinds: str, store: bool = False, after: float = 0.0) -> bool:
        return any((fault.kind in kinds or (store and fault.target != body.proc)) and fault.touches(body.proc)
                   and fault.overlaps(body.mono, body.until + after) for fault in history.faults)

    if body.end is None:
        return during("kill", "stop", store=True)
    key = (body.proc, body.job, body.fire, body.start.get("token"))
    lost = bool(body.end.get("lock_lost")) or history.lost.get(key, False)
    return (lost and during("stop", store=True)) or during(store=True, after=body.lease)


def once_per_tick(history: History, verdict: Verdict) -> None:
    """Each (job, tick, lane) runs at most once; a worker's tick may start again only after the worker that ran it
    gave way (:func:`_gave_way`)."""
    for (job, fire, lane), bodies in _group(history.bodies, lambda body: (body.job, body.fire, body.lane)).items():
        if len(bodies) < 2:
            continue
        if bodies[0].start.get("run_on") == "tasks" and all(_gave_way(history, body) for body in bodies[:-1]):
            continue
        verdict.add("once_per_tick", f"{job} {lane} {fire.isoformat()} started {len(bodies)} times",
                    bodies[1].mono, [event for body in bodies for event in body.events])


def _disturbs_schedulers(fault: Fault, config: RunConfig) -> bool:
    """The fault may cost a tick: the store's servers, a scheduler's link, a scheduler killed or stopped (it may
    hold a probe's lock until its lease runs out), or a scheduler's clock moved ahead (it may run the next tick
    before the others fire this one, which the store then refuses as already run: ticks never run out of order;
    docs/guarantees.md, "Skewed clocks"). A worker's fault, or a clock moved back (that instance fires late, the
    others on time), costs none."""
    if fault.kind == "clock_jump":
        return fault.amount > 0 and any(fault.touches(proc) for proc in config.schedulers)
    return fault.store_wide or any(fault.touches(proc) for proc in config.schedulers)


def exactly_once(history: History, verdict: Verdict) -> None:
    """Each tick of a probe job with no fault near it that may cost a tick runs exactly once; one that the run of an
    earlier tick still held when it fired (a starved machine: its release came late) is skipped by the job's
    ``on_busy="skip"``, as promised, and counted apart."""
    config, checked, excluded, busy = history.config, 0, 0, 0
    starts = _group((body for body in history.bodies if body.lane == "tick"), lambda body: (body.job, body.fire))
    first, last = history.wall_of(history.start + WARM_UP), history.wall_of(history.end - COOL_DOWN)
    for job in (job for job in config.jobs if job.probe):
        settle = job.lease + config.sync_interval + 3.0
        for fire in ticks(job.spec, first, last):
            at = history.mono_of(fire)
            # The tick was tried from its fire time (1 s early for a clock ahead) until the last instance that fired
            # it recorded its outcome, at least 2 s later: on a starved machine the fleet fires seconds late.
            tried = max([at + 2.0, *(record["mono"] for record in history.records.get((job.name, fire), []))])
            if any(_disturbs_schedulers(fault, history.config) and fault.start - 1.0 <= tried
                   and fault.end + settle >= at - 1.0 for fault in history.faults):
                excluded += 1
                continue
            bodies = starts.get((job.name, fire), [])
            if not bodies and _held_by_earlier(history, job.name, fire, at):
                busy += 1
                continue
            checked += 1
            if len(bodies) != 1:
                verdict.add("exactly_once", f"{job.name} {fire.isoformat()}, a clean tick, started {len(bodies)} times",
                            at, [body.start for body in bodies])
    verdict.counts["ticks.checked"], verdict.counts["ticks.excluded"], verdict.counts["ticks.busy"] = \
        checked, excluded, busy


def _held_by_earlier(history: History, job: str, fire: datetime, at: float) -> bool:
    """The instances that fired the tick found the lock busy (or, firing late, a later tick already run: the store
    never runs ticks out of order), and the run of an earlier tick of the job reported its end (after its release)
    only after the tick's time: that run still held the lock."""
    outcomes = {record["outcome"] for record in history.records.get((job, fire), [])}
    return "skipped_busy" in outcomes and outcomes <= {"skipped_busy", "skipped_already_ran"} and any(
        record["mono"] >= at and parse_time(record["fire_time"]) < fire and record.get("token") is not None
        and not record.get("manual") and not record.get("backfill") for record in history.records_of.get(job, []))


def paused(history: History, verdict: Verdict) -> None:
    """No body of a paused job starts once pause() returned, until resume() is called."""
    resumes = [op for op in history.ops if op["action"] == "resume"]  # even one that raised may have resumed
    for pause in history.done("pause"):
        job, returned = pause["target"], float(pause["returned"])
        resumed = min((op["called"] for op in resumes if op["target"] == job and op["called"] >= returned),
                      default=history.end)
        for body in history.bodies:
            if body.job == job and body.mono < resumed and history.binding(body, returned):
                verdict.add("paused", f"{job} started on {body.proc} {body.mono - returned:.2f} s after pause returned",
                            body.mono, [pause, body.start])


def stale_schedule(history: History, verdict: Verdict) -> None:
    """No tick of a replaced schedule, and no run of a redefined or removed run-time schedule, starts once the
    change returned."""
    _stale_overrides(history, verdict)
    _stale_definitions(history, verdict)


def _stale_overrides(history: History, verdict: Verdict) -> None:
    """A scheduled tick must be one of a schedule that may be in force when its body starts: the last one whose
    change returned more than OP_GRACE before, or one whose change was under way or returned since."""
    changes: dict[str, list[tuple[Event, str]]] = defaultdict(list)
    for op in history.done("set_schedule", "reset_schedule"):
        job = history.config.job(op["target"])
        spec = op.get("argument") if op["action"] == "set_schedule" else job.spec if job else None
        if isinstance(spec, str):
            changes[op["target"]].append((op, spec))
    for body in history.bodies:
        if body.lane != "tick" or body.job not in changes:
            continue
        settled = [(op, spec) for op, spec in changes[body.job] if op["returned"] + OP_GRACE < body.mono]
        if not settled:
            continue
        op, spec = settled[-1]
        recent = [spec for op, spec in changes[body.job] if op["called"] <= body.mono < op["returned"] + OP_GRACE]
        returned = float(op["returned"])
        if any(is_tick(allowed, body.fire) for allowed in (spec, *recent)) or (
                body.start.get("catch_up") and history.mono_of(body.fire) < returned):
            continue
        if history.binding(body, returned):
            verdict.add("stale_schedule", f"{body.job} ran {body.fire.isoformat()}, not a tick of {spec!r} in force",
                        body.mono, [op, body.start])


def _stale_definitions(history: History, verdict: Verdict) -> None:
    ops: dict[str, list[Event]] = defaultdict(list)
    for op in history.ops:
        if op["action"] in ("add_schedule", "change_schedule", "remove_schedule"):
            ops[op["target"]].append(op)
    for body in history.bodies:
        defn = body.start.get("defn")
        if defn is None:
            continue
        made = [op for op in ops[body.job] if op.get("defn") == defn and op["action"] != "remove_schedule"
                and op["called"] <= body.mono]
        if not made:
            continue
        ender = next((op for op in ops[body.job] if op["called"] > made[-1]["called"] and op.get("error") is None
                      and op.get("defn") != defn), None)
        if ender is not None and history.binding(body, float(ender["returned"])):
            verdict.add("stale_schedule", f"{body.job} ran definition {defn!r} after {ender['action']} returned",
                        body.mono, [made[-1], ender, body.start])


def cancelled_task(history: History, verdict: Verdict) -> None:
    """A task whose cancel() returned True never starts after that call."""
    for cancel in history.of("cancel"):
        if cancel.get("cancelled") is True:
            for start in history.task_starts.get(cancel["task_id"], []):
                if start["mono"] > cancel["called"]:
                    verdict.add("cancelled_task", f"task {cancel['task_id']} started after it was cancelled",
                                start["mono"], [cancel, start])


def _hits_workers(fault: Fault) -> bool:
    """The fault may lose a worker's ack or claim (a clock jump does not), so its task may legitimately run again."""
    return fault.kind != "clock_jump" and any(fault.touches(worker) for worker in ("w1", "w2", "w3"))


def task_runs(history: History, verdict: Verdict) -> None:
    """Every scheduled, uncancelled task due well before the end runs; twice only when a fault hit the workers."""
    cancelled = {cancel["task_id"] for cancel in history.of("cancel") if cancel.get("cancelled") is True}
    for scheduled in history.scheduled:
        task_id, due = scheduled["task_id"], history.mono_of(parse_time(scheduled["due"]))
        starts = history.task_starts.get(task_id, [])
        if not starts and task_id not in cancelled and due <= history.end - TASK_MARGIN:
            verdict.add("task_runs", f"lost task {task_id}: due, never started", due, [scheduled])
        elif len(starts) > 1:
            first, last = starts[0]["mono"] - 1.0, starts[-1]["mono"]
            if not any(_hits_workers(fault) and fault.overlaps(first, last) for fault in history.faults):
                verdict.add("task_runs", f"task {task_id} started {len(starts)} times with no fault on the workers",
                            starts[1]["mono"], [scheduled, *starts])


def recovery(history: History, verdict: Verdict) -> None:
    """After a fault ends (and no other one follows), a probe runs its next tick within the bound."""
    probes = [job for job in history.config.jobs if job.probe]
    if not probes:
        return
    bound = max(job.lease for job in probes) + history.config.sync_interval + 10.0
    names = {job.name for job in probes}
    runs = sorted((body for body in history.bodies if body.job in names and body.lane == "tick"), key=lambda b: b.mono)
    for fault in (fault for fault in history.faults if fault.ended):
        end = fault.end
        if end + bound > history.end or any(other is not fault and other.start < end + bound and other.end > end
                                            for other in history.faults):
            continue
        first = next((body for body in runs if history.mono_of(body.fire) >= end), None)
        if first is None or first.mono - end > bound:
            verdict.add("recovery", f"no probe ran within {bound:.1f} s after {fault.kind} on {fault.target} ended",
                        end, list(fault.events))
        else:
            verdict.recovery.setdefault(fault.kind, []).append(max(0.0, first.mono - end))


def _counts(history: History) -> dict[str, int]:
    counts: Counter[str] = Counter({f"bodies.{lane}": 0 for lane in ("tick", "backfill", "manual")})
    counts.update(f"bodies.{body.lane.split()[0]}" for body in history.bodies)
    counts.update(f"faults.{fault.kind}" for fault in history.faults)
    counts.update(f"ops.{op['action']}" for op in history.ops)
    counts["faults"], counts["ops"] = len(history.faults), len(history.ops)
    counts["tasks.scheduled"] = len({event["task_id"] for event in history.scheduled})
    counts["tasks.cancelled"] = len({e["task_id"] for e in history.of("cancel") if e.get("cancelled") is True})
    counts["tasks.run"] = len(history.task_starts)
    return dict(counts)


CHECKS: tuple[Callable[[History, Verdict], None], ...] = (
    mutual_exclusion, once_per_tick, exactly_once, paused, stale_schedule, cancelled_task, task_runs, recovery)


def check(events: list[Event], config: RunConfig) -> Verdict:
    """Judge a run's history against every property (:data:`PROPERTIES`)."""
    history = History(events, config)
    verdict = Verdict(counts=_counts(history))
    for prop in CHECKS:
        prop(history, verdict)
    verdict.anomalies.sort(key=lambda anomaly: anomaly.mono)
    return verdict

