"""The soak (bench/soak.py), 60 seconds of it: 8 instance processes x 10 per-second jobs on Redis and, at the same
time, on PostgreSQL (``django://``), a random instance SIGKILLed (restarted) or SIGSTOPped (continued) every 10 s.
No tick may run twice, and every tick nobody ran must be explained by a fault: lost with a killed holder, skipped
while a killed or stopped holder's lease ran out, or (SQL) stalled behind a stopped instance's open transaction.
``make soak`` runs the 10-minute one.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.soak import Options, report, run_soaks

pytestmark = pytest.mark.fleet

# Seed 2 gives both stores at least one kill and one stop among their five faults (kill, stop, stop, kill, kill
# on Redis; kill, stop, kill, stop, kill on PostgreSQL).
OPTIONS = Options(seconds=60, instances=8, jobs=10, fault_every=10, down=4, pause=5, lease=3, body_seconds=0.1,
                  seed=2)


@pytest.mark.timeout(300)
def test_a_minute_of_kills_and_pauses_runs_no_tick_twice_and_misses_none(tmp_path: Path) -> None:
    # Both stores at once. On PostgreSQL a SIGSTOP inside a batch's transaction holds its rows until SIGCONT; the
    # others' batches answer busy after BATCH_LOCK_TIMEOUT (README, "Frozen process (SQL)"): counted as stalled.
    results = run_soaks(["redis", "postgres"], OPTIONS, directory=tmp_path)
    print(report(results, OPTIONS))
    for result in results:
        assert result.error is None, f"{result.store}: {result.error}"
        assert result.kills >= 1 and result.stops >= 1, f"{result.store}: {result.faults}"
        assert result.restarts == result.kills, f"{result.store}: a killed instance was not started again"
        assert result.ticks == OPTIONS.jobs * OPTIONS.seconds
        assert result.duplicates == 0, f"{result.store}: {result.examples.get('duplicate')}"
        assert result.missed == 0, f"{result.store}: {result.examples.get('missed')}"
        assert result.runs + result.lost_with_holder + result.waited_out_lease + result.stalled == result.ticks
        assert result.unfinished == 0, f"{result.store}: {result.examples.get('unfinished')}"
        # What the faults may cost, at most: a killed holder's ticks in flight, and a lease of ticks of the jobs
        # it held; a paused holder's lease (or, on SQL, pause) of ticks of the jobs it held.
        allowed = (result.kills + result.stops) * OPTIONS.jobs * (max(OPTIONS.lease, OPTIONS.pause) + 2)
        assert result.lost_with_holder + result.waited_out_lease + result.stalled <= allowed, result.examples
        if result.store == "redis":
            assert result.stalled == 0, result.examples  # nothing blocks on Redis: a paused client holds no lock
