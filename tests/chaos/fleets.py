"""How the chaos tests judge a fleet of scheduler processes (tests/test_fleet.py): every body ran under a lock
its instance won, no tick ran twice."""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from typing import Any

from tests.test_fleet import Fleet

RAN = ("succeeded", "failed")


def assert_every_body_ran_under_its_own_lock(fleet: Fleet) -> None:
    """Each body line matches a run record of the same instance, tick and fencing token: no body ran without
    the acquire that gave it that token."""
    won = {(r["instance"], r["fire_time"], r["token"]) for r in fleet.records() if r["outcome"] in RAN}
    unguarded = [b for b in fleet.bodies() if (b["instance"], b["fire_time"], b["token"]) not in won]
    assert unguarded == [], f"bodies without a won lock: {unguarded}"


def assert_no_tick_ran_twice(fleet: Fleet) -> None:
    runs = Counter(r["fire_time"] for r in fleet.records() if r["outcome"] in RAN)
    bodies = Counter(b["fire_time"] for b in fleet.bodies())
    assert [t for t, n in runs.items() if n > 1] == [], "ticks run by more than one instance"
    assert [t for t, n in bodies.items() if n > 1] == [], "ticks whose body ran more than once"


def first_run_after(fleet: Fleet, moment: datetime) -> dict[str, Any] | None:
    """The earliest-firing run record whose tick is after ``moment``."""
    runs = [r for r in fleet.records() if r["outcome"] in RAN and r["fire_time"] > moment]
    return min(runs, key=lambda r: r["fire_time"], default=None)
