"""Jobs with a known history for the Timeline tests (test-client and headless Chromium): ticks that fall a few
minutes before now (so no tick comes or goes while a test runs), each written in the state asked for the way
the schedulers write it (:func:`mutexcron_django.history.write`: three instances fire every tick; paused fires
become a pause span), on the SQL lock store of the test database."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from mutexcron import Outcome, RunRecord
from mutexcron_django import history
from mutexcron_django.models import Lock
from mutexcron_django.sql.store import DjangoLockStore
from tests.django.jobhelpers import Declarations

JOB = "timeline.hourly_report"
# The state of each tick, oldest first: the latest tick is minutes old, so still within its alert delay.
EXPECTED = ["succeeded", "failed", "missed", "paused", "paused", "caught_up", "skipped", "succeeded", "missed",
            "unrecorded", "pending"]
ALERT_AFTER = timedelta(minutes=20)
INSTANCES = ("web-1", "web-2", "web-3")


@dataclass(frozen=True)
class Known:
    job: str
    ticks: list[datetime]  # oldest first, one per state asked for


def fire(tick: datetime, instance: str, outcome: Outcome, *, late: float = 0.02, took: float = 0.0,
         catch_up: bool = False, error: str | None = None, token: int | None = None, job: str = JOB) -> RunRecord:
    started = tick + timedelta(seconds=late)
    return RunRecord(job, tick, instance, outcome, started, started + timedelta(seconds=took), error=error,
                     token=token, catch_up=catch_up)


def known_history(declare: Declarations, states: Sequence[str] = EXPECTED, *, job: str = JOB,
                  every: timedelta = timedelta(hours=1), now: datetime | None = None) -> Known:
    """Declare ``job`` (every hour, or every 10 minutes, its latest tick 5 minutes before ``now``'s minute)
    and write the history of one tick per state, oldest first."""
    now = now or datetime.now(UTC)
    latest = now.replace(second=0, microsecond=0) - timedelta(minutes=5)
    spec = f"{latest.minute} * * * *" if every == timedelta(hours=1) else f"{latest.minute % 10}-59/10 * * * *"
    declare(spec, name=job, alert_after=ALERT_AFTER, lease=timedelta(minutes=5))
    ticks = [latest - every * n for n in range(len(states) - 1, -1, -1)]
    ran = [tick for tick, state in zip(ticks, states, strict=True) if state not in ("missed", "paused", "pending")]
    DjangoLockStore().seed([job])
    Lock.objects.filter(name=job).update(
        created_at=ticks[0] - every / 2, last_fire_time=max(ran, default=None), last_outcome="succeeded",
        last_success_at=ticks[-1], last_finished_at=ticks[-1])
    for number, (tick, state) in enumerate(zip(ticks, states, strict=True)):
        for record in _fires(job, number, tick, state):
            history.write(record)
    return Known(job, ticks)


def duration(number: int) -> float:
    """How long the run of tick ``number`` took: a wave, and a spike now and then."""
    return round(1.0 + 0.6 * math.sin(number / 4) + (1.5 if number % 17 == 5 else 0), 3)


def _fires(job: str, number: int, tick: datetime, state: str) -> list[RunRecord]:
    """What the three instances wrote for a tick in ``state`` (the runner last: it writes when it finished)."""
    runner = INSTANCES[number % 3]
    skip = [fire(tick, other, Outcome.SKIPPED_ALREADY_RAN, late=0.01 + 0.4 * n, job=job)
            for n, other in enumerate(i for i in INSTANCES if i != runner)]
    took = duration(number)
    if state in ("succeeded", "failed", "caught_up", "timed_out", "replaced"):
        failed = state == "failed"
        late = 330.5 if state == "caught_up" else 0.004 + number % 5 / 100
        outcome = {"failed": Outcome.FAILED, "timed_out": Outcome.TIMED_OUT, "replaced": Outcome.REPLACED}.get(
            state, Outcome.SUCCEEDED)
        run = fire(tick, runner, outcome, late=late,
                   took=took, token=number + 1, catch_up=state == "caught_up", job=job,
                   error="Traceback (most recent call last):\nValueError: boom" if failed else None)
        if state == "caught_up":
            return [run]  # the instance that came back ran the missed tick late
        return [*skip, run]
    if state == "paused":
        return [fire(tick, instance, Outcome.SKIPPED_PAUSED, job=job) for instance in INSTANCES]
    if state == "skipped":
        return [fire(tick, instance, Outcome.SKIPPED_BUSY, error="lock held by web-9:1", job=job)
                for instance in INSTANCES]
    if state == "unrecorded":
        return skip
    assert state in ("missed", "pending"), state
    return []
