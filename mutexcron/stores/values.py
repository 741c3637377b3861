"""The values a store keeps for operators, checked before any store is asked: a run's outcome and error line, a
pause note, an incident, a run-time schedule definition, with the bounds every store holds them to."""

from __future__ import annotations

import json

OUTCOMES = ("succeeded", "failed", "timed_out", "replaced")  # what release(outcome=) takes
FAILING = ("failed", "timed_out")  # the outcomes whose error a store keeps, and that alerts call failing
MAX_ERROR_LINE = 500


def check_outcome(outcome: str | None, error: str | None) -> str | None:
    """The ``error`` a store keeps for ``outcome``: one line, clipped (None on success); ValueError for an
    outcome release() does not take."""
    if outcome is not None and outcome not in OUTCOMES:
        raise ValueError(f"release outcome must be one of {OUTCOMES} or None, not {outcome!r}")
    if outcome not in FAILING or not error:
        return None
    lines = [line for line in error.strip().splitlines() if line.strip()]
    line = lines[-1].strip() if lines else ""  # a traceback's last line names the exception
    return line[:MAX_ERROR_LINE]


MAX_INCIDENT = 255  # the longest incident text a store keeps
MAX_TEXT = 255  # the longest schedule spec or ``by`` a store keeps (the SQL store's columns)
MAX_PAUSE_NOTE = 1_000  # the longest pause note a store keeps, in characters


def check_pause_note(note: object) -> str | None:
    """``note`` if a store can keep it: None, or a string of at most MAX_PAUSE_NOTE characters (empty: None)."""
    if note is None or note == "":
        return None
    if not isinstance(note, str) or len(note) > MAX_PAUSE_NOTE:
        raise ValueError(f"a pause note must be a string of at most {MAX_PAUSE_NOTE} characters, not {note!r:.80}")
    return note


def check_incident(incident: object) -> str:
    """``incident`` if a store can keep it: a non-empty string of at most MAX_INCIDENT characters."""
    if not isinstance(incident, str) or not incident or len(incident) > MAX_INCIDENT:
        raise ValueError(f"an incident must be a non-empty string of at most {MAX_INCIDENT} characters, "
                         f"not {incident!r:.80}")
    return incident


MAX_DEFINITION = 16_384  # the longest run-time schedule definition a store keeps, in characters


def check_definition(definition: object) -> str:
    """``definition`` if a store can keep it: a non-empty string of at most MAX_DEFINITION characters holding a
    JSON object; ValueError naming the problem otherwise."""
    if not isinstance(definition, str) or not definition or len(definition) > MAX_DEFINITION:
        raise ValueError(f"a schedule definition must be a non-empty string of at most {MAX_DEFINITION} characters, "
                         f"not {definition!r:.80}")
    try:
        parsed = json.loads(definition)
    except ValueError as error:
        raise ValueError(f"a schedule definition must be JSON: {error} in {definition!r:.80}") from None
    if not isinstance(parsed, dict):
        raise ValueError(f"a schedule definition must be a JSON object ({{...}}), not {definition!r:.80}")
    return definition
