"""The nemesis's plan: a random, seeded schedule of faults, several at once, drawn before the run starts (the same
SEED gives the same plan), and the bounds each kind is drawn in."""

from __future__ import annotations

import random
from dataclasses import dataclass

WARM_UP = 20.0  # seconds before the first fault: the fleet's first ticks run undisturbed
QUIET_END = 25.0  # seconds at the end with no fault starting: the last faults end and the fleet recovers
CALM = (20.0, 30.0)  # seconds with no fault between two storms (more than the checker's recovery bound)


@dataclass(frozen=True)
class Fault:
    """One fault: ``kind`` done to ``target`` (a process name, "proxied" for the processes behind the proxy, or
    "store") ``at`` seconds into the run, undone ``duration`` seconds later; ``amount``: the clock jump in seconds
    or the link's added latency."""

    id: str
    at: float
    kind: str
    target: str
    duration: float
    amount: float = 0.0


PROCESS_KINDS = ("kill", "stop", "clock_jump")
LINK_KINDS = ("link_cut", "link_slow")


def plan(rng: random.Random, seconds: float, *, processes: list[str], store_kinds: tuple[str, ...],
         proxied: bool, lease: float) -> list[Fault]:
    """Faults from WARM_UP to ``seconds`` - QUIET_END in storms of 30-60 s, a fault starting every 2-6 s and lasting
    up to a few leases (two or three overlap), each storm followed by a calm of CALM s with none starting: there the
    fleet must recover, and the ticks no fault could cost must each run once. A process has one fault at a time (a
    stopped process is not also killed)."""
    kinds = [*PROCESS_KINDS, *PROCESS_KINDS, *store_kinds, *(LINK_KINDS if proxied else ())]
    faults: list[Fault] = []
    busy_until: dict[str, float] = {}
    at, storm_ends = WARM_UP, WARM_UP + rng.uniform(30.0, 60.0)
    while True:
        at += rng.uniform(2.0, 6.0)
        if at > storm_ends:  # the calm: it starts once the storm's last fault ended
            at = max([at, *(fault.at + fault.duration for fault in faults)]) + rng.uniform(*CALM)
            storm_ends = at + rng.uniform(30.0, 60.0)
        if at > seconds - QUIET_END:
            return faults
        kind = rng.choice(kinds)
        amount = 0.0
        if kind in PROCESS_KINDS:
            free = [name for name in processes if busy_until.get(name, 0.0) < at]
            if not free:
                continue
            target = rng.choice(free)
            if kind == "kill":
                duration = rng.uniform(1.0, 5.0)  # down before it is started again
            elif kind == "stop":
                duration = rng.uniform(0.5, 3.0) * lease  # SIGSTOP for 0.5-3 leases, then SIGCONT
            else:
                duration, amount = rng.uniform(5.0, 20.0), rng.choice((-1, 1)) * rng.uniform(0.5, 2.0)
            busy_until[target] = at + duration + 1.0
        elif kind in LINK_KINDS:
            if busy_until.get("proxied", 0.0) >= at:
                continue
            target = "proxied"
            duration = rng.uniform(1.0, 5.0) if kind == "link_cut" else rng.uniform(3.0, 10.0)
            amount = rng.uniform(0.05, 0.4) if kind == "link_slow" else 0.0
            busy_until[target] = at + duration + 1.0
        else:
            if busy_until.get("store", 0.0) >= at:
                continue
            target = "store"
            duration = 0.0 if kind == "pg_terminate" else rng.uniform(1.0, 4.0)
            busy_until[target] = at + duration + 5.0
        faults.append(Fault(f"f{len(faults) + 1}", round(at, 3), kind, target, round(duration, 3), round(amount, 3)))
