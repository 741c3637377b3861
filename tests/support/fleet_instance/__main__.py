"""The instance's options and its lifecycle: built, waiting at the gate if any, started, stopped on SIGTERM."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from pathlib import Path

from mutexcron._signals import SignalFlag
from tests.support import fleet_instance
from tests.support.fleet_instance import Instance, jobs, tick


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.support.fleet_instance",
                                     description="\n".join((fleet_instance.__doc__ or "", tick.__doc__ or "",
                                                            jobs.__doc__ or "")),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--instance", required=True, help="this instance's id")
    parser.add_argument("--ledger", required=True, type=Path,
                        help="this instance's own ledger: JSON lines, or with --jobs compact lines")
    parser.add_argument("--store", default="memory://", help="lock store URL (default memory://)")
    parser.add_argument("--lease", type=float, default=10.0, help="the job's lease in seconds (default 10)")
    parser.add_argument("--body-seconds", type=float, default=0.001, help="how long a body works (default 1 ms)")
    parser.add_argument("--max-workers", type=int, default=10, help="worker threads (default 10, as Scheduler's)")
    parser.add_argument("--start-gate", type=Path, help="start the scheduler only once this file exists")
    parser.add_argument("--django-settings", help="configure Django with this settings module first")
    one = parser.add_argument_group("the fleet tests' one job")
    one.add_argument("--spec", default="* * * * * *", help="cron spec of the job (default: every second)")
    one.add_argument("--clock-skew", type=float, default=0.0, help="seconds; -2 fires every tick 2 s late")
    one.add_argument("--hang-first", action="store_true",
                     help="the first body run in the fleet blocks forever (marker file next to the ledger)")
    one.add_argument("--catch-up", choices=("skip", "latest", "all"), default="skip",
                     help="the job's catch_up (default skip)")
    one.add_argument("--sync-interval", type=float, default=5.0,
                     help="seconds between reads of the store's schedules (default 5)")
    one.add_argument("--alert-after", type=float, help="the job's alert_after in seconds (default: None)")
    one.add_argument("--fail-while", type=Path, help="the body raises while this file exists")
    one.add_argument("--fence", help="Redis URL of a fencing sink the body writes its token to")
    one.add_argument("--on-busy", default="skip", help="the job's on_busy policy (default skip)")
    one.add_argument("--scheme", help="NAME=DOTTED.PATH: serve --store URLs of scheme NAME with that store class")
    one.add_argument("--operator", action="store_true",
                     help="run no scheduler: pause, resume or re-time the job on commands from stdin")
    many = parser.add_argument_group("the benchmarks' jobs")
    many.add_argument("--jobs", type=int, metavar="M", help="M per-second jobs instead of the one job")
    many.add_argument("--mode", choices=("mutexcron", "apscheduler"), default="mutexcron",
                      help="apscheduler: the floor, a plain BackgroundScheduler and no lock")
    many.add_argument("--trace", action="store_true", help="write F, A, L and R lines (the soak's)")
    many.add_argument("--stats-every", type=float, default=1.0, help="seconds between S lines (default 1)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(  # the benchmarks' jobs: warnings alone, a line per run would weigh on what they measure
        level=logging.INFO if args.jobs is None else logging.WARNING, stream=sys.stderr,
        format=f"%(asctime)s {args.instance} %(threadName)s %(name)s %(levelname)s %(message)s",
    )
    stop = SignalFlag()  # a threading.Event set from a signal handler can deadlock the main thread
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
    signal.signal(signal.SIGINT, lambda signum, frame: stop.set())
    if args.operator:
        tick.Tick(args).operate(sys.stdin)
        return 0
    instance: Instance = tick.Tick(args) if args.jobs is None else jobs.Jobs(args)
    if args.start_gate is not None:
        instance.waiting()
        while not args.start_gate.exists():
            if stop.wait(0.01):
                instance.stop(started=False)
                return 0
    instance.start()
    while not stop.wait(instance.interval):
        instance.every()
    instance.stop(started=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
