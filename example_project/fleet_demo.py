"""Three instances, one job every two seconds: watch every instance fire and exactly one run each tick.

    python example_project/fleet_demo.py [--store URL] [--instances 3] [--seconds 20]

The core alone, without Django, on Redis (by default) or MongoDB. ``make demo`` runs the Django demo,
example_project/demo.py, instead.

Each instance is a separate OS process running a mutexcron Scheduler on the same store. Every run
and skip is appended to that instance's own ledger file; at the end the ledgers are merged into a
table with one row per tick.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from pathlib import Path

JOB = "demo.heartbeat"


def run_instance(store: str, name: str, ledger: Path) -> None:
    """One app instance: declare the job, start the scheduler, write each RunRecord, stop on SIGTERM."""
    from mutexcron import JobContext, Registry, RunRecord, Scheduler, mutex_cron
    from mutexcron._signals import SignalFlag

    registry = Registry()

    @mutex_cron("*/2 * * * * *", name=JOB, lease=10, registry=registry)
    def heartbeat(ctx: JobContext) -> None:
        print(f"  {ctx.instance_id} runs tick {ctx.fire_time:%H:%M:%S} (token {ctx.token})", flush=True)

    def write(record: RunRecord) -> None:
        line = {"tick": record.fire_time.isoformat(), "instance": record.instance_id, "outcome": record.outcome}
        with ledger.open("a") as file:
            file.write(json.dumps(line) + "\n")

    stop = SignalFlag()  # a threading.Event set from a signal handler can deadlock the main thread
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    scheduler = Scheduler(store, registry=registry, instance_id=name)
    scheduler.add_listener(write)
    with scheduler:
        stop.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", default=f"redis://127.0.0.1:6379/15?prefix=mutexcron-demo:{uuid.uuid4().hex[:8]}:")
    parser.add_argument("--instances", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--instance", help=argparse.SUPPRESS)
    parser.add_argument("--ledger", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.instance:
        run_instance(args.store, args.instance, Path(args.ledger))
        return 0

    workdir = Path(tempfile.mkdtemp(prefix="mutexcron-demo-"))
    print(f"Starting {args.instances} instances on {args.store.split('?')[0]} for {args.seconds:.0f} s ...")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    processes = [
        subprocess.Popen([sys.executable, __file__, "--store", args.store, "--instance", f"instance-{i}",
                          "--ledger", str(workdir / f"instance-{i}.jsonl")], env=env)
        for i in range(1, args.instances + 1)
    ]
    try:
        time.sleep(args.seconds)  # the demo's running time, not a synchronisation
    finally:
        for process in processes:
            process.send_signal(signal.SIGTERM)
        for process in processes:
            process.wait(30)

    ticks: dict[str, list[dict[str, str]]] = defaultdict(list)
    for ledger in sorted(workdir.glob("*.jsonl")):
        for line in ledger.read_text().splitlines():
            entry = json.loads(line)
            ticks[entry["tick"]].append(entry)
    print(f"\n{'tick':<10} {'ran on':<12} {'skipped by (already ran / busy)':<40} runs")
    duplicates = 0
    for tick in sorted(ticks):
        entries = ticks[tick]
        ran = [e["instance"] for e in entries if e["outcome"] in ("succeeded", "failed")]
        skipped = [e["instance"] for e in entries if e["outcome"].startswith("skipped")]
        duplicates += len(ran) > 1
        print(f"{tick[11:19]:<10} {', '.join(ran) or '-':<12} {', '.join(sorted(skipped)):<40} {len(ran)}")
    from mutexcron.stores import store_from_url

    with store_from_url(args.store) as store:  # leave no demo lock behind
        store.delete(JOB)
    verdict = "every tick ran exactly once" if duplicates == 0 else f"{duplicates} tick(s) ran more than once!"
    print(f"\n{len(ticks)} ticks, {args.instances} instances: {verdict}")
    return 0 if duplicates == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
