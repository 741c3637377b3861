"""The report of a nemesis run: a Markdown summary of what the run did and what the checker found, and the history
around one anomaly with the command that replays the run."""

from __future__ import annotations

import math
from typing import Any

from .checker import PROPERTIES, Anomaly, Verdict
from .history import Event, RunConfig, run_config

# The fields worth a glance in a compact history line, in this order.
_KEY_FIELDS = ("phase", "job", "fire_time", "token", "lease", "run_on", "catch_up", "backfill", "defn", "lock_lost",
               "cancelled", "failed", "outcome", "manual", "task_id", "attempt", "due", "action", "target",
               "argument", "result", "error", "kind", "fault", "detail", "duration", "amount", "how", "pid")
_LANES = ("tick", "backfill", "manual")


def percentile(values: list[float], p: float) -> float:
    """The nearest-rank ``p``-th percentile (0 < p <= 100) of non-empty ``values``."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def _replay(config: RunConfig) -> str:
    line = f"replay: make nemesis STORE={config.store} SEED={config.seed} MINUTES={config.minutes:g}"
    return line + (f" BROKEN={config.broken}" if config.broken else "")


def _table(header: tuple[str, ...], rows: list[tuple[Any, ...]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    return lines + ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]


def _by_prefix(counts: dict[str, int], prefix: str) -> list[tuple[str, int]]:
    return sorted((key.removeprefix(prefix), value) for key, value in counts.items() if key.startswith(prefix))


def render(verdict: Verdict, config: RunConfig, events: list[Event]) -> str:
    """The Markdown report of a checked run (with the history around the first anomaly of each property)."""
    counts = verdict.counts
    broken = f", broken variant `{config.broken}`" if config.broken else ""
    state = "PASS" if verdict.ok else f"FAIL ({len(verdict.anomalies)} anomalies)"
    recovery = [(kind, len(values), f"{percentile(values, 50):.2f}", f"{percentile(values, 99):.2f}")
                for kind, values in sorted(verdict.recovery.items()) if values]
    sections = {
        "Faults injected": _table(("kind", "count"), _by_prefix(counts, "faults.")),
        "Bodies run": _table(("lane", "bodies"), [(lane, counts.get(f"bodies.{lane}", 0)) for lane in _LANES]),
        "Ticks checked exactly once": [f"{counts.get('ticks.checked', 0)} clean, "
                                       f"{counts.get('ticks.excluded', 0)} excluded (near a fault), "
                                       f"{counts.get('ticks.busy', 0)} skipped busy (an earlier tick's run held the "
                                       "lock when it fired)"],
        "Tasks": [f"{counts.get('tasks.scheduled', 0)} scheduled, {counts.get('tasks.cancelled', 0)} cancelled, "
                  f"{counts.get('tasks.run', 0)} run"],
        "Operator calls": _table(("action", "calls"), _by_prefix(counts, "ops.")),
        "Anomalies": _table(("property", "anomalies"), [(prop, len(verdict.of(prop))) for prop in PROPERTIES]),
        "Recovery": _table(("fault kind", "count", "p50 (s)", "p99 (s)"), recovery),
        "Row for docs/guarantees.md": [guarantees_row(verdict, config, events)],
    }
    lines = [f"# Nemesis run: {config.store}, seed {config.seed}, {config.minutes:g} minutes{broken}", "",
             f"**{state}**"]
    for title, body in sections.items():
        lines += ["", f"## {title}", "", *body]
    for prop in PROPERTIES:
        found = verdict.of(prop)
        if found:
            lines += ["", f"### {prop}: {found[0].message}", "", "```", around(events, found[0]), "```", ""]
            lines += [f"- {anomaly.message}" for anomaly in found[1:20]]
            lines += [f"- … and {len(found) - 20} more"] if len(found) > 20 else []
    return "\n".join(lines) + "\n"


def guarantees_row(verdict: Verdict, config: RunConfig, events: list[Event]) -> str:
    """The run as a row of docs/guarantees.md's table of published runs (recovery over every fault kind)."""
    counts, samples = verdict.counts, [value for values in verdict.recovery.values() for value in values]
    recovery = f"{percentile(samples, 50):.2f} / {percentile(samples, 99):.2f}" if samples else "-"
    cells = (str(events[0]["wall"])[:10] if events else "-", config.store + (f" (`{config.broken}`)" if config.broken
             else ""), config.seed, f"{config.minutes:g}", sum(value for _, value in _by_prefix(counts, "faults.")),
             sum(counts.get(f"bodies.{lane}", 0) for lane in _LANES), counts.get("ticks.checked", 0),
             counts.get("tasks.run", 0), len(verdict.anomalies), recovery)
    return "| " + " | ".join(str(cell) for cell in cells) + " |"


def _line(event: Event, start: float) -> str:
    """One event as a compact line: its time from the run start, its process, its kind and its key fields."""
    fields = " ".join(f"{key}={event[key]}" for key in _KEY_FIELDS
                      if key in event and event[key] is not None and event[key] is not False)
    return f"{event['mono'] - start:+10.3f} {event['proc']:<8} {event['event']:<9} {fields}".rstrip()


def around(events: list[Event], anomaly: Anomaly, seconds: float = 3.0) -> str:
    """The history around an anomaly: its events, and the faults and the events of its jobs and tasks within
    ``seconds`` of it, one line each, then the command that replays the run."""
    config = run_config(events)
    start = next(e["mono"] for e in events if e["event"] == "run" and e.get("phase") == "start")
    jobs = {e[key] for e in anomaly.events for key in ("job", "target") if e.get(key) is not None}
    tasks = {e["task_id"] for e in anomaly.events if e.get("task_id") is not None}
    own = {id(e) for e in anomaly.events}

    def near(event: Event) -> bool:
        if abs(event["mono"] - anomaly.mono) > seconds:
            return False
        return (event["event"] == "fault" or event.get("job") in jobs or event.get("task_id") in tasks
                or (event["event"] == "op" and event.get("target") in jobs))

    shown = sorted([*anomaly.events, *(e for e in events if id(e) not in own and near(e))], key=lambda e: e["mono"])
    lines = [f"{anomaly.prop}: {anomaly.message}", *(_line(event, start) for event in shown)]
    return "\n".join([*lines, _replay(config)])
