"""The short slice of the nemesis run that the test suite runs (the long runs are ``make nemesis``): 90 seconds of
random faults against the busy fleet on Redis, then on PostgreSQL, and no anomaly in the checked history.

The seeds are fixed, so that a failure replays (the report prints the command); ``NEMESIS_SEED`` picks another.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

# A fleet test, but never run beside the others: its dozen processes and their faults would starve their start-up.
pytestmark = [pytest.mark.fleet, pytest.mark.nemesis]

ROOT = Path(__file__).resolve().parents[2]
SECONDS = 90


@pytest.mark.timeout(SECONDS + 300)
@pytest.mark.parametrize(("store", "seed"), [("redis", 11), ("postgres", 12)])
def test_ninety_seconds_of_faults_leave_no_anomaly_in_the_history(store: str, seed: int, tmp_path: Path) -> None:
    seed = int(os.environ.get("NEMESIS_SEED", seed))
    command = [sys.executable, "-m", "tests.nemesis", "--minutes", str(SECONDS / 60), "--store", store, "--seed",
               str(seed), "--out", str(tmp_path)]
    with subprocess.Popen(command, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True) as harness:
        try:
            output, _ = harness.communicate(timeout=SECONDS + 240)
        except subprocess.TimeoutExpired:
            harness.terminate()  # SIGTERM: the harness stops its fleet and servers before it exits
            output, _ = harness.communicate(timeout=60)
    assert harness.returncode == 0, f"the nemesis run found anomalies (or failed):\n{output[-16000:]}"
    assert "**PASS" in output, output[-4000:]
