"""Specification of the nemesis report (:mod:`tests.nemesis.report`): the table of properties, the published row and
the history around an anomaly."""

from __future__ import annotations

from tests.nemesis.checker import PROPERTIES
from tests.nemesis.report import around, guarantees_row, render
from tests.nemesis.synthetic import JOB, PROBE, History


def test_the_report_lists_every_property_with_zero_anomalies_when_there_are_none() -> None:
    history = History(PROBE)
    history.probe_ticks(0, 59)
    history.fault(30.0, 31.0, "kill", "s2")
    report = render(history.check(), history.config, history.events)
    for prop in PROPERTIES:
        assert f"| {prop} | 0 |" in report
    assert "redis, seed 7, 1 minutes" in report and "| kill | 1 |" in report


def test_the_report_ends_with_the_run_as_a_row_of_the_published_table() -> None:
    history = History(PROBE)
    history.probe_ticks(0, 59)
    history.fault(30.0, 31.0, "kill", "s2")
    verdict = history.check()
    row = guarantees_row(verdict, history.config, history.events).strip("| ").split(" | ")
    assert row[1:9] == ["redis", "7", "1", "1", "60", str(verdict.counts["ticks.checked"]), "0", "0"]
    assert row[0] == history.events[0]["wall"][:10]


def test_around_an_anomaly_shows_its_events_and_ends_with_the_replay_command() -> None:
    history = History(JOB, broken="no_fencing")
    history.body(10.0, "s1", JOB, 10, seconds=5.0)
    history.body(14.0, "s2", JOB, 10, seconds=0.5, backfill=True)
    anomaly = history.check().of("mutual_exclusion")[0]
    lines = around(history.events, anomaly).splitlines()
    assert [line.split()[1] for line in lines[1:-1]] == ["s1", "s2", "s2", "s1"]
    assert lines[-1] == "replay: make nemesis STORE=redis SEED=7 MINUTES=1 BROKEN=no_fencing"
