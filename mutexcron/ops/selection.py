"""Which jobs ``list`` shows (``--state``, ``--match``, ``--limit``, ``--offset``): a page of a listing, chosen by
what each job's lock and runs say, judged as ``health`` and the schedulers' alerts judge them."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from fnmatch import fnmatchcase
from typing import Any

from ..stores import LockState
from .alerts import job_problems
from .checkup import DEFAULT_MISFIRE_GRACE_TIME
from .listing import JobLine, Listing

__all__ = ["LIST_OPTIONS", "LIST_STATES", "Selection", "job_states", "lock_states", "select", "selection_of"]

# failing: its latest run failed or timed out; overdue: a tick no instance ran in time (both as `health` says);
# paused: an operator's pause is in force; running: its lock is held (a live lease)
LIST_STATES = ("failing", "overdue", "paused", "running")


@dataclass(frozen=True)
class Selection:
    """The jobs in any of ``states`` whose name matches the glob ``match`` (case-sensitive, ``reports.*``), from
    the ``offset``-th on, at most ``limit`` of them; the defaults choose every job."""

    states: frozenset[str] = frozenset()
    match: str | None = None
    limit: int | None = None
    offset: int = 0

    def __post_init__(self) -> None:
        unknown = sorted(set(self.states) - set(LIST_STATES))
        if unknown:
            raise ValueError(f"unknown job state(s) {', '.join(map(repr, unknown))}: choose from "
                             f"{', '.join(LIST_STATES)}")
        if self.limit is not None and (isinstance(self.limit, bool) or not isinstance(self.limit, int)
                                       or self.limit < 1):
            raise ValueError(f"limit must be a whole number of at least 1, not {self.limit!r}")
        if isinstance(self.offset, bool) or not isinstance(self.offset, int) or self.offset < 0:
            raise ValueError(f"offset must be a whole number of at least 0, not {self.offset!r}")

    @property
    def narrows(self) -> bool:
        """Whether it leaves any job out (a listing then says how many it chose)."""
        return bool(self.states or self.match is not None or self.limit is not None or self.offset)

    def matches(self, name: str) -> bool:
        """Whether ``name`` matches the glob (every name does without one)."""
        return self.match is None or fnmatchcase(name, self.match)

    def __str__(self) -> str:
        """As the command line's options: ``--state failing --match 'reports.*' --limit 50``."""
        words = [f"--state {state}" for state in LIST_STATES if state in self.states]
        words += [f"--match {self.match!r}"] if self.match is not None else []
        words += [f"--limit {self.limit}"] if self.limit is not None else []
        words += [f"--offset {self.offset}"] if self.offset else []
        return " ".join(words)


def lock_states(state: LockState | None, now: datetime) -> set[str]:
    """``running`` and ``paused``, as a lock document shows them at ``now`` (an orphan lock's too)."""
    found = set()
    if state is not None and state.is_held(now):
        found.add("running")
    if state is not None and state.is_paused(now):
        found.add("paused")
    return found


def job_states(line: JobLine, now: datetime) -> set[str]:
    """The :data:`LIST_STATES` a listed job is in at ``now`` (a job whose store was not read is in none)."""
    problems = job_problems(line.job, line.state, line.trigger, now=now,
                            misfire_grace_time=DEFAULT_MISFIRE_GRACE_TIME, known_since=now)
    return lock_states(line.state, now) | {problem.kind for problem in problems}


def select(listing: Listing, selection: Selection) -> Listing:
    """``listing`` narrowed to the jobs ``selection`` chooses, paged, with ``chosen`` counting them before the
    page; its orphan locks chosen by name and lock state alone (they are few, and not paged)."""
    if not selection.narrows:
        return listing
    states, now = selection.states, listing.now
    jobs = [line for line in listing.jobs
            if selection.matches(line.job.name) and (not states or states & job_states(line, now))]
    orphans = [state for state in listing.orphans
               if selection.matches(state.name) and (not states or states & lock_states(state, now))]
    end = None if selection.limit is None else selection.offset + selection.limit
    return dataclasses.replace(listing, jobs=jobs[selection.offset:end], orphans=orphans, chosen=len(jobs),
                               chosen_by=str(selection))


def _whole(least: int) -> Callable[[str], int]:
    """An argparse type: a whole number of at least ``least``."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if value < least:
            raise argparse.ArgumentTypeError(f"must be at least {least}, not {value}")
        return value

    return parse


# The options of both command lines' ``list``, as (flags, add_argument's options); :func:`selection_of` reads them.
LIST_OPTIONS: list[tuple[tuple[str, ...], dict[str, Any]]] = [
    (("--state",), {"action": "append", "choices": LIST_STATES, "dest": "states", "metavar": "STATE",
                    "help": "Only the jobs in this state: failing, overdue, paused or running (repeat it for any of "
                            "several)."}),
    (("--match",), {"metavar": "GLOB", "help": "Only the jobs whose name matches this glob (case-sensitive, such as "
                                               "'reports.*')."}),
    (("--limit",), {"type": _whole(1), "metavar": "N", "help": "At most N jobs: a page (the next with --offset)."}),
    (("--offset",), {"type": _whole(0), "default": 0, "metavar": "N", "help": "Leave out the first N jobs chosen."}),
]


def selection_of(options: Mapping[str, Any]) -> Selection:
    """The selection that parsed :data:`LIST_OPTIONS` give."""
    return Selection(frozenset(options.get("states") or ()), options.get("match"), options.get("limit"),
                     options.get("offset") or 0)
