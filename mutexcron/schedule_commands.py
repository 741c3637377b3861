"""The ``schedules`` subcommand of both CLIs (``python -m mutexcron`` and ``manage.py mutexcron``): add, remove
and list run-time schedules (:meth:`Scheduler.add_schedule`); :data:`mutexcron.cli.CONTROL` declares it."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from .definitions import ScheduleDefinition
from .errors import JobDefinitionError
from .registry import BUSY_POLICIES

if TYPE_CHECKING:
    from .scheduling.scheduler import Scheduler
    from .stores import LockState

__all__ = ["ARGUMENTS", "run_schedules"]

_RUN_OPTIONS = ("on_busy", "timeout", "start_deadline", "pause_on_failure")  # shown by list --json, as stored

ARGUMENTS: tuple[tuple[tuple[str, ...], dict[str, Any]], ...] = (
    (("verb",), {"choices": ("add", "remove", "list"), "metavar": "add|remove|list",
                 "help": "add NAME SPEC --target T [--kwargs JSON]: store (or redefine) a schedule; remove NAME; "
                         "list."}),
    (("name",), {"nargs": "?", "metavar": "NAME", "help": "The schedule's name (a job name)."}),
    (("spec",), {"nargs": "?", "metavar": "SPEC", "help": 'The cron spec, quoted: "0 6 * * *".'}),
    (("--target",), {"metavar": "TARGET", "help": "An allowed target's name (@callable_target)."}),
    (("--kwargs",), {"metavar": "JSON", "default": "{}", "help": "The target's keyword arguments, a JSON object."}),
    (("--timezone",), {"metavar": "TZ", "help": "The zone SPEC is read in (default: the scheduler's)."}),
    (("--lease",), {"type": float, "default": 600.0, "metavar": "SECONDS", "help": "The run's lease (default 600)."}),
    (("--catch-up",), {"dest": "catch_up", "choices": ("skip", "latest", "all"), "default": "skip",
                       "help": "What runs of the ticks missed while no instance ran (default skip)."}),
    (("--run-on",), {"dest": "run_on", "choices": ("here", "tasks"), "default": "here",
                     "help": "here: the instance that wins the lock runs it; tasks: a task worker does."}),
    # The run options of @mutex_cron, checked by add_schedule as mutex_cron checks them (its errors, exit 2).
    (("--timeout",), {"type": float, "metavar": "SECONDS",
                      "help": "A body still running this long is told to stop (ctx.cancelled) and recorded "
                              "timed_out (default: none)."}),
    (("--start-deadline",), {"dest": "start_deadline", "type": float, "metavar": "SECONDS",
                             "help": "A tick whose body would start later than this after its time is recorded "
                                     "skipped_late instead (default: none)."}),
    (("--on-busy",), {"dest": "on_busy", "default": "skip", "metavar": "|".join(BUSY_POLICIES),
                      "help": "What a tick does while an earlier run holds the lock (default skip; "
                              "docs/overlap.md)."}),
    (("--pause-on-failure",), {"dest": "pause_on_failure", "type": int, "metavar": "N",
                               "help": "Pause it on every instance after N failed runs in a row (default: never)."}),
    (("--json",), {"action": "store_true", "dest": "as_json", "help": "list: print JSON instead of a table."}),
)


def run_schedules(scheduler: Scheduler, options: dict[str, Any], by: str | None) -> str:
    """Do ``schedules VERB``; ValueError (a usage error) for arguments that do not go with the verb."""
    verb, name, spec = options["verb"], options.get("name"), options.get("spec")
    if verb == "list":
        if name is not None:
            raise ValueError("schedules list takes no NAME")
        return _listed(scheduler.schedules(), as_json=options.get("as_json", False))
    if name is None:
        raise ValueError(f"schedules {verb} needs the schedule's NAME")
    if verb == "remove":
        scheduler.remove_schedule(name, by=by)
        return f"removed run-time schedule {name!r} on every instance (no tick of it starts from now on)"
    if spec is None or not options.get("target"):
        raise ValueError('schedules add needs NAME, SPEC (quoted: "0 6 * * *") and --target')
    try:
        kwargs = json.loads(options.get("kwargs") or "{}")
    except ValueError as error:
        raise JobDefinitionError(f"schedule {name!r}: --kwargs is not JSON: {error}") from None
    state = scheduler.add_schedule(name, spec, options["target"], kwargs=kwargs, timezone=options.get("timezone"),
                                   lease=options.get("lease", 600.0), catch_up=options.get("catch_up", "skip"),
                                   run_on=options.get("run_on", "here"), timeout=options.get("timeout"),
                                   start_deadline=options.get("start_deadline"),
                                   on_busy=options.get("on_busy", "skip"),
                                   pause_on_failure=_failures(options.get("pause_on_failure")), by=by)
    return (f"run-time schedule {name!r} calls {options['target']!r} on {spec!r} on every instance (schedule "
            f"version {state.schedule_version}; they follow within their sync interval)")


def _listed(states: list[LockState], *, as_json: bool) -> str:
    rows = []
    for state in states:
        definition = ScheduleDefinition.from_json(state.definition or "{}")
        stored = definition.as_dict()
        rows.append({"name": state.name, "target": definition.target, "spec": state.schedule or definition.spec,
                     "timezone": state.schedule_timezone or definition.timezone, "kwargs": definition.kwargs,
                     "run_on": definition.run_on, **{key: stored[key] for key in _RUN_OPTIONS},
                     "paused": state.paused, "by": state.schedule_by})
    if as_json:
        return json.dumps(rows, indent=2)
    if not rows:
        return "No run-time schedules (add one with: schedules add NAME SPEC --target TARGET)."
    lines = [f"{'NAME':<30} {'SPEC':<18} {'TARGET':<30} KWARGS"]
    for row in rows:
        flags = " (paused)" if row["paused"] else ""
        lines.append(f"{row['name']:<30} {row['spec']:<18} {row['target']:<30} "
                     f"{json.dumps(row['kwargs'])}{flags}")
    return "\n".join(lines)


def _failures(value: int | None) -> int | bool:
    """``--pause-on-failure``: absent is False (never); a number goes to add_schedule's check as given."""
    return False if value is None else value
