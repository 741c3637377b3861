"""Specification of the nemesis checker (:mod:`tests.nemesis.checker`) on small synthetic histories: for each
property, a clean history passes and one with the anomaly is caught."""

from __future__ import annotations

import pytest

from tests.nemesis.synthetic import JOB, MONO0, PROBE, WORKER_JOB, History, iso, props, record


def test_an_empty_run_passes() -> None:
    assert History(JOB).check().anomalies == []


def test_two_overlapping_bodies_of_one_job_with_no_fault_break_mutual_exclusion() -> None:
    history = History(JOB)
    history.body(10.0, "s1", JOB, 10, seconds=5.0)
    history.body(14.0, "s2", JOB, 10, seconds=0.5, backfill=True)
    assert props(history.check()) == {"mutual_exclusion"}


def test_a_second_holder_within_the_first_ones_lease_breaks_mutual_exclusion_even_under_a_fault() -> None:
    history = History(JOB)
    history.fault(10.3, 30.0, "stop", "s1")
    history.body(10.0, "s1", JOB, 10, seconds=20.0, lock_lost=True)
    # The lease (3 s) from the earliest the lock can have been taken: the tick, on a clock up to 2 s early.
    history.body(10.7, "s2", JOB, 11, seconds=0.5)
    assert props(history.check()) == {"mutual_exclusion"}


def test_a_second_holder_once_a_late_first_holders_lease_may_have_run_out_is_judged_by_the_faults() -> None:
    history = History(JOB)
    history.fault(11.8, 30.0, "stop", "s1")
    history.body(11.5, "s1", JOB, 10, seconds=20.0)  # its body logged 1.5 s after the tick: the acquire was earlier
    history.body(13.9, "s2", JOB, 14, seconds=0.5)
    assert history.check().anomalies == []


def test_a_holder_stopped_past_its_lease_may_overlap_the_next_holder() -> None:
    history = History(JOB)
    history.fault(10.5, 30.0, "stop", "s1")
    history.body(10.0, "s1", JOB, 10, seconds=20.0, lock_lost=True)
    history.body(20.0, "s2", JOB, 20, seconds=0.5)
    assert history.check().anomalies == []


def test_a_stale_holder_stopped_between_its_lock_and_its_body_is_not_judged_by_mutual_exclusion() -> None:
    history = History(JOB)
    stale = history.body(25.0, "s1", JOB, 10, seconds=0.5)  # its lock taken at 10 s, then SIGSTOPped to 25 s
    history.fault(10.5, 24.98, "stop", "s1")
    history.body(22.0, "s2", JOB, 22, seconds=5.0)  # the lock taken again once s1's lease ran out
    stale["token"] = 1  # s1's token is the older one
    assert history.check().anomalies == []


def test_a_holder_stopped_between_its_lock_and_its_body_may_be_overlapped_by_the_next_holder() -> None:
    history = History(JOB)
    history.fault(10.5, 24.98, "stop", "s1")
    history.body(25.0, "s1", JOB, 10, seconds=4.0)  # its lock taken at 10 s, its body started once it went on
    history.body(27.0, "s2", JOB, 27, seconds=0.5)  # the next tick, long after s1's lease ran out
    assert history.check().anomalies == []


def test_a_holder_with_an_older_token_overlapping_a_newer_one_with_no_stop_breaks_mutual_exclusion() -> None:
    history = History(JOB)
    stale = history.body(25.0, "s1", JOB, 10, seconds=0.5)
    history.fault(10.5, 24.98, "link_cut", "s1")  # cut off, not frozen: it looked at the lock when the link came back
    history.body(22.0, "s2", JOB, 22, seconds=5.0)
    stale["token"] = 1
    assert props(history.check()) == {"mutual_exclusion"}


def test_a_body_whose_process_was_killed_ends_with_its_process() -> None:
    history = History(JOB)
    history.body(10.0, "s1", JOB, 10, seconds=None)
    history.fault(10.5, 11.0, "kill", "s1")
    history.body(20.0, "s2", JOB, 20, seconds=0.5)
    assert history.check().anomalies == []


def test_a_tick_run_twice_breaks_once_per_tick() -> None:
    history = History(JOB)
    history.body(10.0, "s1", JOB, 10, seconds=0.2)
    history.body(11.0, "s2", JOB, 10, seconds=0.2)
    assert props(history.check()) == {"once_per_tick"}


def test_a_tick_and_its_backfill_are_different_lanes() -> None:
    history = History(JOB)
    history.body(10.0, "s1", JOB, 10, seconds=0.2)
    history.body(11.0, "op", JOB, 10, seconds=0.2, backfill=True)
    assert history.check().anomalies == []


def test_a_tick_backfilled_twice_by_one_range_breaks_once_per_tick_but_by_two_ranges_does_not() -> None:
    history = History(JOB)
    history.body(11.0, "op", JOB, 10, seconds=0.2, backfill=True, range="A")
    history.body(12.0, "op", JOB, 10, seconds=0.2, backfill=True, range="B")  # another range: runs it again
    history.body(13.0, "op", JOB, 10, seconds=0.2, backfill=True, range="A")
    assert [(a.prop, a.mono) for a in history.check().anomalies] == [("once_per_tick", MONO0 + 13)]


def test_a_run_now_is_a_manual_run_not_a_second_run_of_the_tick() -> None:
    history = History(JOB)
    history.body(10.0, "s1", JOB, 10, seconds=0.2)
    manual = history.body(11.0, "op", JOB, 10, seconds=0.2)
    history.add(11.3, "op", "record", job="job", fire_time=iso(10), outcome="succeeded", token=manual["token"],
                manual=True)
    verdict = history.check()
    assert verdict.anomalies == []
    assert (verdict.counts["bodies.tick"], verdict.counts["bodies.manual"]) == (1, 1)


def test_a_worker_tick_runs_again_after_its_worker_was_stopped_and_keeps_one_outcome() -> None:
    history = History(WORKER_JOB)
    history.fault(10.5, 20.0, "stop", "w1")
    history.body(10.0, "w1", WORKER_JOB, 10, seconds=10.5, lock_lost=True)
    history.body(16.0, "w2", WORKER_JOB, 10, seconds=0.5)
    assert history.check().anomalies == []


def test_a_worker_tick_that_keeps_two_outcomes_breaks_once_per_tick() -> None:
    history = History(WORKER_JOB)
    history.fault(10.5, 20.0, "stop", "w1")
    history.body(10.0, "w1", WORKER_JOB, 10, seconds=10.5)
    history.body(16.0, "w2", WORKER_JOB, 10, seconds=0.5)
    assert props(history.check()) == {"once_per_tick"}


def test_a_worker_tick_runs_again_after_its_worker_was_cut_off_from_the_store_as_its_body_ended() -> None:
    history = History(WORKER_JOB)
    history.fault(10.2, 20.0, "store_restart", "store")  # longer than the lease: its outcome could not be kept
    history.body(10.0, "w1", WORKER_JOB, 10, seconds=1.0)
    history.body(21.0, "w2", WORKER_JOB, 10, seconds=0.5)
    assert history.check().anomalies == []


def test_a_worker_tick_runs_again_after_its_worker_lost_the_store_before_it_kept_its_outcome() -> None:
    """The body ended before the store went down, but within its lease: the worker kept trying to store the outcome
    until the lease ran out, and the task came back."""
    history = History(WORKER_JOB)
    history.body(10.0, "w1", WORKER_JOB, 10, seconds=1.0)
    history.fault(12.5, 20.0, "store_restart", "store")
    history.body(21.0, "w1", WORKER_JOB, 10, seconds=0.5)
    assert history.check().anomalies == []


def test_a_store_fault_after_a_worker_bodys_lease_does_not_excuse_its_tick_running_again() -> None:
    history = History(WORKER_JOB)
    history.body(10.0, "w1", WORKER_JOB, 10, seconds=1.0)
    history.fault(14.5, 20.0, "store_restart", "store")  # the outcome had 3 s after the body's end to be kept
    history.body(21.0, "w2", WORKER_JOB, 10, seconds=0.5)
    assert props(history.check()) == {"once_per_tick"}


def test_a_worker_tick_run_again_with_no_fault_on_its_first_worker_breaks_once_per_tick() -> None:
    history = History(WORKER_JOB)
    history.fault(10.2, 20.0, "stop", "w2")  # a fault elsewhere
    history.body(10.0, "w1", WORKER_JOB, 10, seconds=1.0)
    history.body(21.0, "w3", WORKER_JOB, 10, seconds=0.5)
    assert props(history.check()) == {"once_per_tick"}


def test_every_clean_probe_tick_run_once_passes_exactly_once() -> None:
    history = History(PROBE)
    history.probe_ticks(0, 59)
    verdict = history.check()
    assert verdict.anomalies == []
    assert (verdict.counts["ticks.checked"], verdict.counts["ticks.excluded"]) == (36, 0)  # 20 s .. 55 s


def test_a_clean_probe_tick_with_no_body_breaks_exactly_once() -> None:
    history = History(PROBE)
    history.probe_ticks(0, 29)
    history.probe_ticks(31, 59)
    assert [(a.prop, a.mono) for a in history.check().anomalies] == [("exactly_once", MONO0 + 30)]


def test_a_probe_tick_near_a_fault_is_excluded_not_judged() -> None:
    history = History(PROBE)
    history.probe_ticks(0, 29)
    history.probe_ticks(33, 59)
    history.fault(30.0, 31.0, "stop", "s1")
    verdict = history.check()
    assert verdict.anomalies == []
    # 27 s .. 39 s: the fault's window, 1 s before and lease + sync + 3 s after, meets the tick's [-1 s, +2 s]
    assert verdict.counts["ticks.excluded"] == 13


@pytest.mark.parametrize(("kind", "target", "amount"), [("stop", "w1", 0.0), ("kill", "w2", 0.0),
                                                     ("clock_jump", "s1", -1.5), ("clock_jump", "w1", 1.5)])
def test_a_fault_that_cannot_cost_a_tick_does_not_excuse_a_missing_one(kind: str, target: str, amount: float) -> None:
    history = History(PROBE)
    history.probe_ticks(0, 29)
    history.probe_ticks(31, 59)
    history.fault(29.0, 32.0, kind, target, amount=amount)
    assert [a.prop for a in history.check().anomalies] == ["exactly_once"]


def test_a_tick_fired_late_into_a_fault_is_excluded() -> None:
    """A starved fleet fires tick 30 3 s late, as the store restarts: the attempt, not the fire time, met it."""
    history = History(PROBE)
    history.probe_ticks(0, 29)
    history.probe_ticks(31, 59)
    history.fault(33.2, 36.0, "store_restart")
    for proc in ("s1", "s2"):
        record(history, 33.3, proc, 30, "skipped_store_error")
    assert history.check().anomalies == []


def test_a_late_fire_does_not_excuse_a_tick_with_no_fault_while_it_was_tried() -> None:
    history = History(PROBE)
    history.probe_ticks(0, 29)
    history.probe_ticks(31, 59)
    record(history, 33.3, "s1", 30, "skipped_store_error")
    assert [a.prop for a in history.check().anomalies] == ["exactly_once"]


def test_a_tick_near_a_schedulers_clock_moved_ahead_is_excluded() -> None:
    """That scheduler may run the next tick before the others fire this one, which the store refuses as run."""
    history = History(PROBE)
    history.probe_ticks(0, 29)
    history.probe_ticks(31, 59)
    history.fault(29.5, 36.0, "clock_jump", "s4", amount=1.2)
    assert history.check().anomalies == []



def test_a_probe_tick_skipped_busy_while_an_earlier_ticks_late_run_held_the_lock_is_counted_apart() -> None:
    history = History(PROBE)
    history.probe_ticks(0, 29)
    history.probe_ticks(32, 59)
    record(history, 30.1, "s2", 30, "skipped_busy")  # s1's run of tick 29 ends only at 31.5: it held the lock
    record(history, 31.1, "s2", 31, "skipped_busy")
    record(history, 33.9, "s3", 31, "skipped_already_ran")  # fired late: tick 32 had run
    record(history, 31.5, "s1", 29, "succeeded", token=29)
    verdict = history.check()
    assert verdict.anomalies == [] and verdict.counts["ticks.busy"] == 2


def test_a_probe_tick_skipped_busy_with_no_earlier_run_holding_the_lock_is_an_anomaly() -> None:
    history = History(PROBE)
    history.probe_ticks(0, 29)
    history.probe_ticks(31, 59)
    record(history, 30.1, "s2", 30, "skipped_busy")  # a lock held by nobody's run: a release that never came
    record(history, 29.2, "s1", 29, "succeeded", token=29)
    assert [a.prop for a in history.check().anomalies] == ["exactly_once"]

def test_a_body_after_pause_returned_breaks_paused() -> None:
    history = History(JOB)
    history.op(10.0, "pause", "job")
    history.body(20.0, "s1", JOB, 20)
    history.op(30.0, "resume", "job")
    history.body(40.0, "s1", JOB, 40)
    assert [(a.prop, a.mono) for a in history.check().anomalies] == [("paused", MONO0 + 20)]


def test_a_body_of_a_process_stopped_across_the_pause_is_excused() -> None:
    history = History(JOB)
    history.fault(9.5, 19.0, "stop", "s1")
    history.op(10.0, "pause", "job")
    history.body(20.0, "s1", JOB, 20)
    assert history.check().anomalies == []


def test_a_pause_that_raised_does_not_count() -> None:
    history = History(JOB)
    history.op(10.0, "pause", "job", error="StoreError")
    history.body(20.0, "s1", JOB, 20)
    assert history.check().anomalies == []


def test_a_tick_of_the_old_schedule_after_set_schedule_returned_breaks_stale_schedule() -> None:
    history = History(JOB)
    history.op(12.0, "set_schedule", "job", argument="*/15 * * * * *")
    history.body(15.0, "s1", JOB, 15)
    history.body(20.0, "s2", JOB, 20)
    assert [(a.prop, a.mono) for a in history.check().anomalies] == [("stale_schedule", MONO0 + 20)]


def test_a_tick_of_the_schedule_a_change_just_put_back_is_not_stale() -> None:
    history = History(JOB)
    history.op(12.0, "set_schedule", "job", argument="*/15 * * * * *")
    history.op(20.5, "reset_schedule", "job")
    history.body(21.0, "s1", JOB, 21)  # a tick of neither "*/15" nor the "*/10" the reset is putting back
    history.body(30.2, "s2", JOB, 30)  # "*/10": the schedule the reset put back, 9.6 s after it returned
    history.op(39.5, "set_schedule", "job", argument="*/15 * * * * *")
    history.body(40.1, "s3", JOB, 40)  # the old "*/10" while the change settles: allowed either way
    assert [(a.prop, a.mono) for a in history.check().anomalies] == [("stale_schedule", MONO0 + 21)]


def test_a_caught_up_tick_from_before_the_change_is_not_stale() -> None:
    history = History(JOB)
    history.op(12.0, "set_schedule", "job", argument="*/15 * * * * *")
    history.body(14.0, "s1", JOB, 10, catch_up=True)
    history.op(30.0, "reset_schedule", "job")
    history.body(40.0, "s1", JOB, 40)
    assert history.check().anomalies == []


def test_a_body_of_a_removed_schedule_definition_breaks_stale_schedule() -> None:
    history = History()
    history.op(5.0, "add_schedule", "nightly", argument="* * * * * *", defn="d1")
    history.body(8.0, "s1", "nightly", 8, defn="d1")
    history.op(10.0, "remove_schedule", "nightly")
    history.body(13.1, "s2", "nightly", 13, defn="d1")
    assert [(a.prop, a.mono) for a in history.check().anomalies] == [("stale_schedule", MONO0 + 13.1)]


def test_a_body_of_the_new_definition_after_a_change_passes() -> None:
    history = History()
    history.op(5.0, "add_schedule", "nightly", argument="* * * * * *", defn="d1")
    history.op(10.0, "change_schedule", "nightly", argument="*/2 * * * * *", defn="d2")
    history.body(10.5, "s1", "nightly", 10, defn="d1")  # within the grace after the change returned
    history.body(14.0, "s1", "nightly", 14, defn="d2")
    assert history.check().anomalies == []


def test_a_task_started_after_a_successful_cancel_breaks_cancelled_task() -> None:
    history = History()
    history.task("t1", due=20.0, starts=(20.1,), cancel=15.0)
    assert props(history.check()) == {"cancelled_task"}


def test_a_task_due_well_before_the_end_and_never_run_is_lost() -> None:
    history = History()
    history.task("t1", due=20.0)
    history.task("t2", due=50.0)  # due in the last 15 s: may be left unrun
    history.task("t3", due=20.0, cancel=10.0)
    assert [a.message for a in history.check().anomalies] == ["lost task t1: due, never started"]


def test_a_task_whose_schedule_call_raised_is_not_judged() -> None:
    history = History()
    history.add(10.0, "p1", "scheduled", task_id="t1", error="ConnectionError()", called=MONO0 + 9.9,
                returned=MONO0 + 10.0)
    verdict = history.check()
    assert verdict.anomalies == []
    assert verdict.counts["tasks.scheduled"] == 0


def test_a_task_run_twice_with_no_fault_on_the_workers_breaks_task_runs() -> None:
    history = History()
    history.task("t1", due=20.0, starts=(20.1, 25.0))
    assert props(history.check()) == {"task_runs"}


def test_a_task_run_again_after_its_worker_was_killed_passes() -> None:
    history = History()
    history.fault(20.5, 22.0, "kill", "w1")
    history.task("t1", due=20.0, starts=(20.1, 25.0))
    assert history.check().anomalies == []


def test_a_probe_run_soon_after_a_fault_ended_measures_recovery() -> None:
    history = History(PROBE)
    history.probe_ticks(0, 9)
    history.fault(10.0, 12.0, "store_restart")
    history.probe_ticks(14, 59)
    verdict = history.check()
    assert verdict.anomalies == []
    assert verdict.recovery == {"store_restart": [pytest.approx(2.05)]}


def test_no_probe_run_after_a_fault_ended_breaks_recovery() -> None:
    history = History(PROBE)
    history.probe_ticks(0, 9)
    history.fault(10.0, 12.0, "store_restart")
    assert "recovery" in props(history.check())
