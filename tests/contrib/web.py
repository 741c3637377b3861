"""The example apps (examples/fastapi_app, examples/flask_app) served by real servers in their own process
groups: their logs, the pids that started a scheduler, and the ticks their job noted in Redis. Every wait polls
a condition with a deadline."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import redis

from tests.support import next_whole_second_after, wait_until, whole_seconds

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
BIN = Path(sys.executable).parent
STARTED = re.compile(r"mutexcron scheduler started in process (\d+)")  # the lifespan's and the extension's line
# The servers' logging: mutexcron's INFO lines (and gunicorn's own) on stderr, into the server's log file.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(process)d %(name)s %(levelname)s %(message)s"}},
    "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "plain", "stream": "ext://sys.stderr"}},
    "root": {"level": "WARNING", "handlers": ["stderr"]},
    "loggers": {name: {"level": "INFO", "handlers": ["stderr"], "propagate": False}
                for name in ("mutexcron", "gunicorn.error", "uvicorn.error")},
}


@dataclass
class Reply:
    status: int
    body: str
    content_type: str


def http_get(url: str, headers: dict[str, str] | None = None, timeout: float = 5) -> Reply | None:
    """The reply to a GET (an HTTP error status too); None when the server does not answer."""
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return Reply(response.status, response.read().decode(), response.headers.get("Content-Type", ""))
    except urllib.error.HTTPError as error:
        return Reply(error.code, error.read().decode(), error.headers.get("Content-Type", ""))
    except OSError:
        return None


@dataclass
class WebServer:
    """A server process (uvicorn or gunicorn) of an example app, its log, and the Redis list of its ticks."""

    name: str
    process: subprocess.Popen[bytes]
    log: Path
    port: int
    ticks: redis.Redis
    ticks_key: str
    pids_seen: set[int] = field(default_factory=set)

    @classmethod
    def spawn(cls, name: str, command: list[str], *, port: int, env: dict[str, str], tmp: Path,
              ticks: tuple[redis.Redis, str]) -> WebServer:
        log = tmp / f"{name}.log"
        with log.open("wb") as out:
            process = subprocess.Popen(command, cwd=ROOT, env={**os.environ, **env}, stdout=out,
                                       stderr=subprocess.STDOUT, start_new_session=True)
        return cls(name, process, log, port, ticks[0], ticks[1])

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def tail(self, lines: int = 60) -> str:
        return "\n".join(self.text().splitlines()[-lines:])

    def assert_alive(self) -> None:
        assert self.process.poll() is None, f"{self.name} exited with {self.process.returncode}:\n{self.tail()}"

    def started_pids(self) -> list[int]:
        """The pids that logged "mutexcron scheduler started in process <pid>" (the Flask extension's line)."""
        return [int(pid) for pid in STARTED.findall(self.text())]

    def entries(self) -> list[dict[str, object]]:
        return [json.loads(entry) for entry in self.ticks.lrange(self.ticks_key, 0, -1)]

    def ticks_run(self) -> Counter[datetime]:
        return Counter(datetime.fromisoformat(str(entry["tick"])).astimezone(UTC) for entry in self.entries())

    def wait_for_ticks(self, count: int) -> list[datetime]:
        """Wait until ``count`` ticks from the next whole second on have run; the window of ticks to judge (it
        ends a second before now: every scheduler has fired every tick of it)."""
        first = next_whole_second_after(datetime.now(UTC))

        def enough() -> bool:
            self.assert_alive()
            return sum(1 for tick in self.ticks_run() if tick >= first) >= count + 1

        wait_until(enough, timeout=count + 15, what=f"{count + 1} ticks to run in {self.name}")
        last = (datetime.now(UTC) - timedelta(seconds=1)).replace(microsecond=0)
        return whole_seconds(first, last)

    def assert_each_tick_once(self, window: list[datetime]) -> dict[str, object]:
        """Every tick of ``window`` ran exactly once; no tick ever ran twice."""
        counts = self.ticks_run()
        assert [tick for tick, seen in counts.items() if seen > 1] == [], "ticks that ran twice"
        assert [tick for tick in window if counts[tick] != 1] == [], "ticks of the window that did not run"
        runners = Counter(int(str(entry["pid"])) for entry in self.entries())
        return {"ticks": len(window), "runs_per_pid": dict(runners)}

    def stop(self, timeout: float = 20) -> int | None:
        """SIGTERM the server's group and reap it (SIGKILL after ``timeout``); its exit status."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        return self.process.returncode


def serving_pids(server: WebServer, workers: int) -> set[int]:
    """Ask ``/pid`` until ``workers`` different processes answered (each request goes to one worker)."""

    def answered() -> bool:
        server.assert_alive()
        reply = http_get(server.url("/pid"), timeout=2)
        if reply is not None and reply.status == 200:
            server.pids_seen.add(int(reply.body.strip()))
        return len(server.pids_seen) >= workers

    wait_until(answered, timeout=30, what=f"{workers} workers of {server.name} to answer /pid", interval=0.01)
    return server.pids_seen
