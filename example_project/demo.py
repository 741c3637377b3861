"""The mutexcron demo: three instances of one Django site, one SQLite file, each tick run exactly once.

    python example_project/demo.py [--instances 3] [--seconds 20] [--exit] [--ports 8001,8002,8003]

Migrates example_project/db.sqlite3, creates (or resets) the admin user with a random password, starts
every instance as its own ``manage.py runserver 127.0.0.1:<port> --noreload`` process (DEMO_INSTANCE names
it), lets them run, then prints one row per tick of the 5-second job: the instance that ran it (from the
demo's ``Tick`` table, where the body writes one row per run) and what every instance's scheduler did
with that tick (from mutexcron's ``JobRun`` history). Then it keeps the servers running until Ctrl-C.

Environment (for CI and tests): DEMO_SECONDS=12 (running time before the table), DEMO_EXIT=1 (stop the
servers and exit after the table; the exit status says whether every tick ran exactly once),
DEMO_PORTS=8001,8002,8003, DEMO_DB=/path/to/file.sqlite3 (default example_project/db.sqlite3),
DEMO_LOG_DIR=/path (the instances' logs; default a new temporary directory).
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from mutexcron._signals import SignalFlag

HERE = Path(__file__).resolve().parent
TICK_JOB = "ticks.record_tick"
TICK_EVERY = 5  # seconds, the spec of ticks.record_tick
ADMIN_USER = "admin"
STARTED_LINE = "mutexcron scheduler started in process"


# -- arguments ----------------------------------------------------------------------------------------


def env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--instances", type=int, default=3, help="how many instances (default 3)")
    parser.add_argument("--seconds", type=float, default=float(os.environ.get("DEMO_SECONDS", 20)),
                        help="how long to run before printing the table (default 20, or $DEMO_SECONDS)")
    parser.add_argument("--exit", action="store_true", default=env_flag("DEMO_EXIT"),
                        help="stop the servers after printing the table (or DEMO_EXIT=1)")
    parser.add_argument("--ports", default=os.environ.get("DEMO_PORTS", ""),
                        help="comma-separated ports, one per instance (default 8001, 8002, ...; free ones if taken)")
    parser.add_argument("--log-dir", type=Path, default=os.environ.get("DEMO_LOG_DIR") or None,
                        help="where the instances write their logs (default: a new temporary directory)")
    args = parser.parse_args(argv)
    if args.instances < 1:
        parser.error("--instances must be at least 1")
    args.ports = pick_ports(parser, args.ports, args.instances)
    return args


def port_is_free(port: int) -> bool:
    with socket.socket() as probe:
        # As runserver binds: SO_REUSEADDR, so that connections of a previous run in TIME_WAIT do not count.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def pick_ports(parser: argparse.ArgumentParser, given: str, count: int) -> list[int]:
    if given:
        ports = [int(p) for p in given.split(",") if p.strip()]
        if len(ports) != count:
            parser.error(f"--ports names {len(ports)} port(s) for {count} instance(s)")
        return ports
    preferred = [8001 + n for n in range(count)]
    if all(port_is_free(port) for port in preferred):
        return preferred
    ports = [free_port() for _ in range(count)]
    print(f"(ports {preferred[0]}-{preferred[-1]} are taken; using {', '.join(map(str, ports))})")
    return ports


# -- the database, from this process (it runs no scheduler: it is not a serving process) ---------------


def setup_django() -> None:
    sys.path.insert(0, str(HERE))
    os.environ["DJANGO_SETTINGS_MODULE"] = "demo_site.settings"  # here and in the instances, whatever was set
    import django

    django.setup()


def prepare_database() -> tuple[str, str]:
    """Migrate, and create the admin user or give it a new random password; return (database, password)."""
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connections

    database = settings.DATABASES["default"]["NAME"]
    print(f"Migrating {display_path(database)} ...")
    call_command("migrate", interactive=False, verbosity=0)
    password = secrets.token_urlsafe(12)
    user, _ = get_user_model().objects.get_or_create(username=ADMIN_USER, defaults={"email": "admin@example.com"})
    user.is_staff = user.is_superuser = True
    user.set_password(password)
    user.save()
    print(f"Admin user: {ADMIN_USER} / {password}")
    connections.close_all()
    return str(database), password


def display_path(path: str | Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


# -- the instances ------------------------------------------------------------------------------------


@dataclass
class Instance:
    name: str
    port: int
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def scheduler_started(self) -> bool:
        return STARTED_LINE in self.log_text()

    def serves(self) -> bool:
        try:
            with urllib.request.urlopen(self.url, timeout=2) as response:
                return response.status == 200
        except (urllib.error.URLError, OSError):
            return False


def start_instances(ports: list[int], logs: Path) -> list[Instance]:
    instances = []
    for number, port in enumerate(ports, start=1):
        name = f"instance-{number}"
        log = logs / f"{name}.log"
        env = {**os.environ, "DEMO_INSTANCE": name, "PYTHONUNBUFFERED": "1"}
        with log.open("wb") as output:
            # A session of its own: Ctrl-C reaches only this driver, which stops every instance cleanly.
            process = subprocess.Popen(
                [sys.executable, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"],
                cwd=HERE, env=env, stdout=output, stderr=subprocess.STDOUT, start_new_session=True,
            )
        instances.append(Instance(name, port, process, log))
        print(f"  {name}: http://127.0.0.1:{port}/  (pid {process.pid}, log {display_path(log)})")
    return instances


class Died(Exception):
    pass


def check_alive(instances: list[Instance]) -> None:
    for instance in instances:
        if instance.process.poll() is not None:
            raise Died(f"{instance.name} exited with status {instance.process.returncode}:\n{instance.log_tail()}")


def wait_ready(instances: list[Instance], stop: SignalFlag, timeout: float = 60) -> None:
    """Until every instance answers HTTP and has started its scheduler (polled, with a deadline)."""
    deadline = time.monotonic() + timeout
    waiting = list(instances)
    while waiting:
        check_alive(instances)
        waiting = [i for i in waiting if not (i.scheduler_started() and i.serves())]
        if not waiting:
            return
        if time.monotonic() > deadline:
            raise Died(f"{', '.join(i.name for i in waiting)} not ready after {timeout:.0f} s")
        if stop.wait(0.2):
            raise KeyboardInterrupt


def stop_instances(instances: list[Instance], timeout: float = 20) -> None:
    """SIGINT (runserver's Ctrl-C: exits 0, and the scheduler shuts down at exit), then SIGKILL if stuck."""
    for instance in instances:
        if instance.process.poll() is None:
            instance.process.send_signal(signal.SIGINT)
    deadline = time.monotonic() + timeout
    for instance in instances:
        try:
            code = instance.process.wait(max(0.1, deadline - time.monotonic()))
            print(f"  {instance.name} stopped (exit status {code})")
        except subprocess.TimeoutExpired:
            os.killpg(instance.process.pid, signal.SIGKILL)
            instance.process.wait()
            print(f"  {instance.name} did not stop within {timeout:.0f} s; killed")


# -- the report ---------------------------------------------------------------------------------------


def next_tick_after(moment: datetime) -> datetime:
    """The first fire time of ``*/5 * * * * *`` strictly after ``moment``."""
    base = moment.replace(microsecond=0)
    return base + timedelta(seconds=TICK_EVERY - base.second % TICK_EVERY)


def fires_of(run: Any) -> list[tuple[str, str]]:
    """(instance, lateness) of every fire a JobRun row holds: one row per tick holds every instance's fire
    (``fired_by``); a row of its own (a manual run, a busy skip) holds its instance's."""
    return run.fires or [(run.instance_id, "")]


def tick_history(first: datetime, last: datetime) -> tuple[dict[datetime, list[Any]], dict[datetime, list[Any]]]:
    """(Tick rows, JobRun rows of the tick job) by fire time, for fire times in [first, last]."""
    from django.db import connections
    from ticks.models import Tick

    from mutexcron_django.models import JobRun

    rows: dict[datetime, list[Any]] = defaultdict(list)
    runs: dict[datetime, list[Any]] = defaultdict(list)
    try:
        for tick in Tick.objects.filter(fire_time__gte=first, fire_time__lte=last).order_by("fire_time", "id"):
            rows[tick.fire_time].append(tick)
        for run in JobRun.objects.filter(job_name=TICK_JOB, fire_time__gte=first, fire_time__lte=last):
            runs[run.fire_time].append(run)
    finally:
        connections.close_all()  # hold no SQLite lock between polls
    return rows, runs


def pause_line() -> str:
    """How the tick job's lock reads now: paused (by whom, until when) or running."""
    from django.db import connections

    from mutexcron_django.models import Lock

    try:
        lock = Lock.objects.filter(name=TICK_JOB).first()
    finally:
        connections.close_all()
    if lock is None or not lock.paused or (lock.paused_until and lock.paused_until <= datetime.now(UTC)):
        return f"  {TICK_JOB} runs"
    until = f" until {lock.paused_until:%H:%M:%S}" if lock.paused_until else ""
    return f"  {TICK_JOB} PAUSED by {lock.paused_by or 'someone'}{until}: no instance runs its ticks"


def watch(instances: list[Instance], first: datetime, until: float, stop: SignalFlag) -> None:
    """Print each tick as it is run, and every pause or resume of the job, until the monotonic time ``until``."""
    shown: set[datetime] = set()
    state = pause_line()
    while time.monotonic() < until:
        check_alive(instances)
        rows, _ = tick_history(first, first + timedelta(days=1))
        for fire_time in sorted(set(rows) - shown):
            shown.add(fire_time)
            ran = ", ".join(f"{t.instance_id} (pid {t.pid})" for t in rows[fire_time])
            print(f"  tick {fire_time:%H:%M:%S} ran on {ran}")
        if (now := pause_line()) != state:
            state = now
            print(state)
        if stop.wait(min(0.25, max(0.0, until - time.monotonic()))):
            raise KeyboardInterrupt


def lock_of_tick_job() -> Any:
    from django.db import connections

    from mutexcron_django.models import Lock

    try:
        return Lock.objects.filter(name=TICK_JOB).first()
    finally:
        connections.close_all()


def wait_for(condition: Any, instances: list[Instance], stop: SignalFlag, what: str, timeout: float = 30) -> Any:
    """Poll ``condition()`` (bounded) while the instances live until it is truthy; None if ``timeout`` passed."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        check_alive(instances)
        if found := condition():
            return found
        if stop.wait(0.25):
            raise KeyboardInterrupt
    print(f"  (gave up waiting for {what} after {timeout:.0f} s)")
    return None


def health_status(instance: Instance) -> int:
    """The HTTP status of the instance's health check (mutexcron_django.urls): 200, or 503 with a problem."""
    try:
        with urllib.request.urlopen(f"{instance.url}mutexcron/health/", timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return error.code


def missed_tick(instances: list[Instance], stop: SignalFlag) -> bool:
    """A deliberately missed tick: hold the tick job's lock as a hung instance would, until the fleet raises
    the job's overdue alert (red on the Locks page), then let go and see it recover (green). True if both."""
    from mutexcron_django.sql.store import DjangoLockStore

    store = DjangoLockStore()
    print(f"\nA deliberately missed tick: this script now holds {TICK_JOB}'s lock, as a hung instance would, so "
          "no instance can run its next tick ...")
    store.acquire(TICK_JOB, owner="demo.py (a hung instance)", lease=timedelta(minutes=1), fire_time=None)
    overdue = wait_for(lambda: (lock := lock_of_tick_job()) and lock.incident and lock, instances, stop,
                       "the overdue alert")
    if overdue is not None:
        print(f"  {TICK_JOB} is OVERDUE (red on the Locks page), raised once for the fleet: {overdue.incident}")
        print(f"  {instances[0].url}mutexcron/health/ answers {health_status(instances[0])} meanwhile "
              "(what a load balancer or a Kubernetes probe sees)")
    store.force_unlock(TICK_JOB)
    print("  ... released the lock; the next tick runs on one instance again")
    # A run that succeeds after the incident opened closes it: its instance tells the fleet once.
    recovered = wait_for(lambda: (lock := lock_of_tick_job()) and lock.incident is None and lock, instances, stop,
                         "the recovery") if overdue is not None else None
    if recovered is not None:
        print(f"  {TICK_JOB} RECOVERED (green again): its tick of {recovered.last_fire_time:%H:%M:%S} ran on "
              f"{recovered.locked_by or 'an instance'}")
    return overdue is not None and recovered is not None


def report(instances: list[Instance], first: datetime, last: datetime) -> bool:
    """Print the table of ticks and the history summary; True if every tick ran once and every instance fired it."""
    from django.db import connections

    from mutexcron_django.models import JobRun

    names = [i.name for i in instances]
    expected = []
    moment = first
    while moment <= last:
        expected.append(moment)
        moment += timedelta(seconds=TICK_EVERY)

    # A tick's last records are written just after it ran: wait (bounded) until every instance recorded it.
    deadline = time.monotonic() + 10
    while True:
        rows, runs = tick_history(first, last)
        complete = all({i for r in runs[t] for i, _ in fires_of(r)} >= set(names) for t in expected)
        if complete or time.monotonic() > deadline:
            break
        time.sleep(0.2)  # polling interval of a bounded wait

    def what_did(name: str, fire_time: datetime) -> str:
        """What instance ``name`` did with the tick, and how late it fired, from the JobRun rows."""
        done = []
        for run in runs[fire_time]:
            for instance, late in fires_of(run):
                if instance == name:
                    ran = run.instance_id == name and run.outcome in ("succeeded", "failed")
                    done.append(f"{run.outcome if ran or not run.tick_key else 'skipped_already_ran'} {late}".strip())
        return ", ".join(sorted(done)) or "no record"

    table = [["tick (UTC)", "ran on (Tick rows)", "runs", "JobRun rows", *names]]
    good = bool(expected)
    for fire_time in expected:
        ran = rows[fire_time]
        fired = Counter(i for r in runs[fire_time] for i, _ in fires_of(r))
        ok = len(ran) == 1 and all(fired[name] == 1 for name in names) and len(runs[fire_time]) == 1
        good = good and ok
        table.append([
            f"{fire_time:%H:%M:%S}" + ("" if ok else " <-- !"),
            ", ".join(f"{t.instance_id} (pid {t.pid})" for t in ran) or "-",
            str(len(ran)),
            str(len(runs[fire_time])),
            *(what_did(name, fire_time) for name in names),
        ])
    widths = [max(len(row[column]) for row in table) for column in range(len(table[0]))]
    print()
    for number, row in enumerate(table):
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
        if number == 0:
            print("  ".join("-" * width for width in widths))

    # Every job, every instance: how many fires it ran and how many it skipped since all were up.
    totals: Counter[tuple[str, str, str]] = Counter()
    written: Counter[str] = Counter()
    for run in JobRun.objects.filter(fire_time__gte=first, fire_time__lte=last, manual=False):
        written[run.job_name] += 1
        ran = run.outcome in ("succeeded", "failed")
        for instance, _ in fires_of(run):
            kind = "ran" if ran and instance == run.instance_id else "skipped"
            totals[(run.job_name, instance, kind)] += 1
        if run.outcome == "failed":
            totals[(run.job_name, run.instance_id, "failed")] += 1
    connections.close_all()
    print(f"\nJobRun history of every job, fires from {first:%H:%M:%S} to {last:%H:%M:%S} UTC (ran / skipped):")
    summary = [["job", *names]]
    for job in sorted({job for job, _, _ in totals}):
        summary.append([job, *(
            f"{totals[(job, name, 'ran')]} / {totals[(job, name, 'skipped')]}"
            + (f" ({totals[(job, name, 'failed')]} failed)" if totals[(job, name, "failed")] else "")
            for name in names
        )])
    widths = [max(len(row[column]) for row in summary) for column in range(len(summary[0]))]
    for row in summary:
        print("  " + "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    tick_rows = sum(len(runs[fire_time]) for fire_time in expected)
    print(f"JobRun rows written for {TICK_JOB}: {tick_rows} for {len(expected)} ticks of {len(names)} instances "
          f"({tick_rows / max(1, len(expected)):.1f} per tick); all jobs: {sum(written.values())} rows")

    runs_per_instance = Counter(t.instance_id for fire_time in expected for t in rows[fire_time])
    shares = ", ".join(f"{name} {runs_per_instance[name]}" for name in names)
    if good:
        print(f"\n{len(expected)} ticks, {len(names)} instances: every tick ran exactly once, and every instance "
              f"fired every tick. Runs per instance: {shares}.")
    else:
        print(f"\n{len(expected)} ticks, {len(names)} instances: NOT every tick ran exactly once with every "
              "instance firing it (rows marked <-- !).")
    return good


# -- main ---------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]  # in order with the logs, when piped
    args = parse_args(argv)
    stop = SignalFlag()  # a threading.Event set from a signal handler can deadlock the main thread

    def on_signal(signum: int, frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)

    setup_django()
    _, password = prepare_database()
    logs = args.log_dir or Path(tempfile.mkdtemp(prefix="mutexcron-demo-"))
    logs.mkdir(parents=True, exist_ok=True)
    print(f"Starting {args.instances} instances sharing that database:")
    instances = start_instances(args.ports, logs)
    status = 0
    try:
        wait_ready(instances, stop)
        ready_at = datetime.now(UTC)
        first = next_tick_after(ready_at)
        print(f"All {len(instances)} instances serve and run a scheduler; watching the 5-second job for "
              f"{args.seconds:.0f} s ...")
        until = time.monotonic() + args.seconds
        watch(instances, first, until, stop)
        last = ready_at + timedelta(seconds=args.seconds)
        last = last.replace(microsecond=0) - timedelta(seconds=last.second % TICK_EVERY)
        status = 0 if report(instances, first, last) else 1
        if not missed_tick(instances, stop):
            status = 1
        if not args.exit:
            print(f"\nAdmin: {instances[0].url}admin/  user {ADMIN_USER}  password {password}")
            print("       (every instance serves it: " + ", ".join(i.url for i in instances) + ")")
            print(f"Health: {instances[0].url}mutexcron/health/  metrics: {instances[0].url}mutexcron/metrics/")
            print(f"Pause the job from the admin's Locks page (or: cd example_project && python manage.py mutexcron "
                  f"pause {TICK_JOB} --for 30s) and watch its ticks stop; the instances keep running until Ctrl-C.")
            watch(instances, last + timedelta(seconds=TICK_EVERY), float("inf"), stop)
    except KeyboardInterrupt:
        pass
    except Died as error:
        print(f"\n{error}", file=sys.stderr)
        status = 1
    finally:
        print("Stopping the instances ...")
        stop_instances(instances)
    return status


if __name__ == "__main__":
    sys.exit(main())
