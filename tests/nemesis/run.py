"""The nemesis harness: start a STORE's private servers and a busy fleet on them, inject the seeded fault plan for
MINUTES, stop, then check the recorded history and print the report (exit 1 on any anomaly).

    python -m tests.nemesis --minutes 10 --store redis --seed 7 [--broken VARIANT] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

from tests.nemesis import broken
from tests.nemesis.checker import check
from tests.nemesis.faults import Fault, plan
from tests.nemesis.history import HistoryWriter, JobSpec, RunConfig, read_history
from tests.nemesis.report import around, render
from tests.nemesis.servers import STORES, Settings, Store, Undo, store_for
from tests.support.fleet import Launcher, LedgerMember

ROOT = Path(__file__).resolve().parents[2]
SCHEDULERS = [f"s{n}" for n in range(1, 7)]
WORKERS = ["w1", "w2", "w3"]
PROXIED = {"s5", "s6", "w3"}  # these reach the store through the harness's proxy (the link faults)
LEASE = 5.0  # the long jobs' lease: a SIGSTOP lasts 0.5-3 of it


def workload() -> list[JobSpec]:
    """The jobs every scheduler runs: quick probes (one with catch-up), a long job under each busy policy, a job
    that runs past its timeout, a job on task workers, and the job the operator acts on."""
    long_jobs = [JobSpec(f"long.{policy}", "*/3 * * * * *", LEASE, on_busy=policy, body_seconds=4.0)
                 for policy in ("skip", "wait", "buffer_one", "replace", "raise")]
    return [
        JobSpec("probe.each", "* * * * * *", 3.0, body_seconds=0.01, probe=True),
        JobSpec("probe.catchup", "*/2 * * * * *", 3.0, body_seconds=0.01, catch_up="all", probe=True),
        *long_jobs,
        JobSpec("timeout.job", "*/2 * * * * *", 4.0, body_seconds=3.0, timeout=1.0),
        JobSpec("tasks.job", "* * * * * *", 6.0, run_on="tasks", body_seconds=2.0),
        JobSpec("op.job", "* * * * * *", 3.0, body_seconds=0.05, operated=True),
    ]


class Harness:
    """The run's processes, servers and fault threads; every fault is undone and every process stopped at the end."""

    def __init__(self, config: RunConfig, store: Store, directory: Path) -> None:
        self.config, self.store, self.directory = config, store, directory
        self.history = HistoryWriter(directory / "harness.jsonl", "harness")
        self.fleet = Launcher(directory, LedgerMember)
        self.processes: dict[str, LedgerMember] = {}  # the running process of each name
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.clockshift = directory / "clockshift.so"

    # -- processes ------------------------------------------------------------------------------------

    def write_configs(self) -> None:
        for name, proxied in (("config.json", False), ("config-proxied.json", True)):
            settings = self.store.settings(proxied)
            (self.directory / name).write_text(json.dumps({"run": self.config.to_json(), **asdict(settings)}))

    def spawn(self, proc: str, role: str) -> None:
        settings: Settings = self.store.settings(proc in PROXIED)
        env = dict(settings.env)
        if role in ("scheduler", "worker"):  # its wall clock can be jumped (the clock_jump fault)
            (self.directory / f"clock-{proc}").write_text("0\n")
            env.update(LD_PRELOAD=str(self.clockshift), NEMESIS_CLOCK_FILE=str(self.directory / f"clock-{proc}"))
        config = "config-proxied.json" if proc in PROXIED else "config.json"
        member = self.fleet.spawn(proc, [sys.executable, "-m", "tests.nemesis.workload", role, "--proc", proc,
                                         "--dir", str(self.directory), "--config", config], **env)
        with self.lock:
            self.processes[proc] = member
        self.history.write("spawn", target=proc, pid=member.pid, role=role)

    def wait_ready(self, timeout: float = 180.0) -> None:
        """Until every process has written its "ready" line (a dozen imports on two CPUs take a while)."""
        self.fleet.wait_ready(list(self.processes.values()), timeout)

    def role(self, proc: str) -> str:
        return {"s": "scheduler", "w": "worker", "p": "producer"}.get(proc[0], "operator")

    def watch(self) -> None:
        """Note (and start again) a process that exits by itself: a crash is in the report."""
        while not self.stopping.wait(0.5):
            with self.lock:
                exited = [(proc, member.process) for proc, member in self.processes.items() if not member.alive()]
            for proc, process in exited:
                if self.stopping.is_set():
                    return
                self.history.write("exit", target=proc, pid=process.pid, how=f"exit {process.returncode}",
                                   crashed=True)
                self.spawn(proc, self.role(proc))

    # -- faults ---------------------------------------------------------------------------------------

    def run_fault(self, fault: Fault) -> None:
        self.history.write("fault", phase="start", fault=fault.id, kind=fault.kind, target=fault.target,
                           duration=fault.duration, amount=fault.amount)
        try:
            undo = self.inject(fault)
        except Exception as error:  # a fault that could not be done is in the history, not a crash of the run
            self.history.write("fault", phase="end", fault=fault.id, kind=fault.kind, target=fault.target,
                               error=repr(error)[:300])
            return
        self.stopping.wait(fault.duration)
        try:
            if undo is not None:
                undo()
        finally:
            self.history.write("fault", phase="end", fault=fault.id, kind=fault.kind, target=fault.target)

    def inject(self, fault: Fault) -> Undo | None:
        proc = fault.target
        if fault.kind == "kill":
            with self.lock:
                process = self.processes.pop(proc).process
            process.send_signal(signal.SIGKILL)
            process.wait(10)
            self.history.write("exit", target=proc, pid=process.pid, how="SIGKILL")
            return lambda: self.spawn(proc, self.role(proc))
        if fault.kind == "stop":
            process = self.processes[proc].process
            process.send_signal(signal.SIGSTOP)
            return lambda: process.send_signal(signal.SIGCONT)
        if fault.kind == "clock_jump":
            clock = self.directory / f"clock-{proc}"
            clock.write_text(f"{fault.amount}\n")
            return lambda: clock.write_text("0\n")
        if fault.kind in ("link_cut", "link_slow"):
            proxy = self.store.proxy
            assert proxy is not None
            if fault.kind == "link_cut":
                proxy.cut()
                return proxy.restore
            proxy.latency = fault.amount
            return lambda: setattr(proxy, "latency", 0.0)
        return self.store.inject(fault.kind)

    def nemesis(self, faults: list[Fault], started: float) -> list[threading.Thread]:
        threads = []
        for fault in faults:
            if self.stopping.wait(max(0.0, started + fault.at - time.monotonic())):
                break
            thread = threading.Thread(target=self.run_fault, args=(fault,), name=fault.id, daemon=True)
            thread.start()
            threads.append(thread)
        return threads

    def stop_all(self) -> None:
        self.stopping.set()
        with self.lock:
            processes = dict(self.processes)
        codes = self.fleet.stop(list(processes.values()), timeout=20, clean=False)
        for (proc, member), code in zip(processes.items(), codes, strict=True):
            self.history.write("exit", target=proc, pid=member.pid, how=f"exit {code}", crashed=False)


def build(args: argparse.Namespace) -> tuple[RunConfig, Path]:
    directory = Path(args.out or ROOT / ".nemesis") / f"{args.store}-{args.seed}-{datetime.now(UTC):%Y%m%dT%H%M%S}"
    directory.mkdir(parents=True)
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-o", str(directory / "clockshift.so"),
                    str(Path(__file__).with_name("clockshift.c")), "-ldl"], check=True)
    config = RunConfig(store=args.store, seed=args.seed, minutes=args.minutes, jobs=workload(), broken=args.broken,
                       proxied=sorted(PROXIED), schedulers=SCHEDULERS)
    return config, directory


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--store", choices=STORES, default="redis")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--broken", choices=broken.VARIANTS, help="run a deliberately broken variant")
    parser.add_argument("--out", help="where the run's directory goes (default .nemesis/)")
    parser.add_argument("--check", metavar="DIR", help="check a recorded run's history again, with the checker as it "
                        "is now, and print its report (the other options are then ignored)")
    args = parser.parse_args(argv)
    if args.check:
        return report_on(Path(args.check))
    # SIGTERM ends the run as Ctrl-C would: the fleet and the private servers are stopped on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    config, directory = build(args)
    print(f"nemesis: {args.store}, seed {args.seed}, {args.minutes} min -> {directory}", flush=True)
    store = store_for(args.store, directory)
    store.start()
    store.start_proxy()
    harness = Harness(config, store, directory)
    seconds = args.minutes * 60
    faults = plan(random.Random(args.seed), seconds, processes=SCHEDULERS + WORKERS, store_kinds=store.kinds,
                  proxied=store.proxy is not None, lease=LEASE)
    try:
        harness.write_configs()
        if config_uses_django(store):
            done = subprocess.run([sys.executable, "-m", "tests.nemesis.workload", "migrate", "--proc", "migrate",
                                   "--dir", str(directory), "--config", "config.json"], cwd=ROOT,
                                  env={**os.environ, **store.settings(False).env, "PYTHONPATH": str(ROOT)})
            assert done.returncode == 0, "migrate failed"
        for proc in [*SCHEDULERS, *WORKERS, "p1", "op"]:
            harness.spawn(proc, harness.role(proc))
        harness.wait_ready()
        # The run starts once every process is up: the plan's times, and the checker's warm-up, count from here.
        harness.history.write("run", phase="start", config=config.to_json(), plan=[asdict(f) for f in faults])
        started = time.monotonic()
        threading.Thread(target=harness.watch, name="watch", daemon=True).start()
        threads = harness.nemesis(faults, started)
        for thread in threads:
            thread.join(timeout=max(1.0, started + seconds - time.monotonic() + 60))
        harness.stopping.wait(max(0.0, started + seconds - time.monotonic()))
        harness.history.write("run", phase="end")
    finally:
        harness.stop_all()
        store.close()
    return report_on(directory, config)


def report_on(directory: Path, config: RunConfig | None = None) -> int:
    """Check the run's recorded history, write report.md beside it and print it, with the history around the first
    anomalies; 1 if any."""
    events = read_history(directory)
    if config is None:
        start = next((e for e in events if e["event"] == "run" and e.get("phase") == "start"), None)
        if start is None:
            raise SystemExit(f"{directory}: no run start in its history (a run that never started, or no run)")
        config = RunConfig.from_json(start["config"])
    verdict = check(events, config)
    report = render(verdict, config, events)
    (directory / "report.md").write_text(report)
    print(report)
    for anomaly in verdict.anomalies[:10]:
        print(around(events, anomaly))
    return 1 if verdict.anomalies else 0


def config_uses_django(store: Store) -> bool:
    return store.settings(False).django is not None


if __name__ == "__main__":
    sys.exit(main())
