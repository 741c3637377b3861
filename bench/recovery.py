#!/usr/bin/env python
"""Recovery benchmark: a fleet knocked behind by a burst of CPU load, and how soon it runs every tick again.
A benchmark report, not a test. Each run measures bench/fleet.py's mutexcron fleet (N instances x M per-second
jobs on a private Redis), and unless ``--skip-floor`` the APScheduler floor before it, with ``--hogs`` CPU-bound
processes started ``--at`` seconds into the window for ``--for`` seconds. Reported for each: the ticks missed in
each second of the window, the last second with a miss (how long the fleet took to catch up), the outcomes of
the fires (``skipped_busy``: a tick given up because an earlier tick still held its lock), lateness and CPU.

    python bench/recovery.py [--instances N] [--jobs M] [--workers W] [--seconds S] [--hogs K] [--at S]
                             [--for S] [--runs R] [--skip-floor] [--json-file PATH]

The exit status is 0 whatever the figures.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.fleet import During, Measure, apscheduler_floor, mutexcron_redis, say  # noqa: E402
from bench.fleet_support import PrivateRedis, load, sleep_until  # noqa: E402


def hogs(count: int, at: float, seconds: float) -> During:
    """``during`` for a measurement: ``count`` busy-looping processes from ``at`` s into the window for ``seconds``."""

    def disturb(first: float, end: float) -> None:
        sleep_until(first + at)
        procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
        try:
            sleep_until(first + at + seconds)
        finally:
            for proc in procs:
                proc.kill()
                proc.wait()

    return disturb


def summary(measure: Measure) -> dict[str, Any]:
    missed = measure.missed_by_second
    last = max((second for second, count in enumerate(missed) if count), default=None)
    return {**asdict(measure), "last_second_missed": last}


def line(measure: Measure, last: int | None) -> str:
    late = measure.lateness_ms
    seconds = " ".join(str(count) for count in measure.missed_by_second)
    return (f"{measure.label:<28} missed {measure.missed:>6,} (last in second {'-' if last is None else last}) "
            f"dup {measure.duplicates}  p50 {late.get('p50') or 0:,.0f} p99 {late.get('p99') or 0:,.0f} ms  "
            f"cpu/min {measure.cpu_per_instance_min or 0:.2f}  outcomes {measure.outcomes}\n    by second: {seconds}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--instances", type=int, default=8, metavar="N")
    parser.add_argument("--jobs", type=int, default=2000, metavar="M")
    parser.add_argument("--workers", type=int, default=10, metavar="W")
    parser.add_argument("--seconds", type=int, default=30, metavar="S", help="the window (default 30)")
    parser.add_argument("--hogs", type=int, default=4, metavar="K", help="busy-looping processes (default 4)")
    parser.add_argument("--at", type=float, default=5.0, metavar="S", help="their start in the window (default 5)")
    parser.add_argument("--for", dest="duration", type=float, default=6.0, metavar="S", help="how long (default 6)")
    parser.add_argument("--runs", type=int, default=1, metavar="R")
    parser.add_argument("--skip-floor", action="store_true")
    parser.add_argument("--json-file", type=Path, metavar="PATH")
    args = parser.parse_args(argv)
    if args.at + args.duration >= args.seconds:
        parser.error(f"--at {args.at:g} + --for {args.duration:g} must end inside the window "
                     f"(--seconds {args.seconds})")
    during = hogs(args.hogs, args.at, args.duration)
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="mutexcron-bench-recovery-") as tmp:
        directory = Path(tmp)
        for run in range(1, args.runs + 1):
            measures = []
            if not args.skip_floor:
                measures.append(apscheduler_floor(directory, args.instances, args.jobs, args.seconds, args.workers,
                                                  during=during))
            server = PrivateRedis(directory)
            try:
                measures.append(mutexcron_redis(directory, args.instances, args.jobs, args.seconds, server.url(0),
                                                server, workers=args.workers, during=during))
            finally:
                server.close()
            for measure in measures:
                result = {"run": run, **summary(measure)}
                results.append(result)
                say(f"run {run}: " + line(measure, result["last_second_missed"]))
    header = {"benchmark": "mutexcron recovery", "instances": args.instances, "jobs": args.jobs,
              "workers": args.workers, "seconds": args.seconds, "hogs": args.hogs, "at": args.at,
              "for": args.duration, "load_end": load()}
    if args.json_file:
        args.json_file.write_text(json.dumps({**header, "results": results}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
