"""Declaring jobs into ``mutexcron.default_registry`` for one test, polling with a deadline, and the
``manage.py mutexcron`` processes of the command tests."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mutexcron import default_registry, mutex_cron
from tests.support import wait_until

ROOT = Path(__file__).resolve().parents[2]


def noop() -> None:
    """A job body that does nothing."""


class Declarations:
    """Declares jobs into the default registry (where the Django app looks) and removes them afterwards."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def __call__(self, spec: str, func: Callable[..., Any] = noop, *, name: str, **options: Any) -> str:
        mutex_cron(spec, name=name, **options)(func)
        self.names.append(name)
        return name

    def remove_all(self) -> None:
        for name in self.names:
            default_registry.remove(name)
        self.names.clear()


def wait_for(condition: Callable[[], Any], timeout: float = 30.0, what: str = "condition") -> Any:
    """:func:`tests.support.wait_until` with room for Django processes to start: 30 s by default, as a worker
    command's start-up took over 15 s while the suite's 8 test processes shared 2 CPUs."""
    return wait_until(condition, timeout, what, interval=0.05)


class CommandProcess:
    """``python -m django mutexcron <subcommand>`` as a real process in ``tmp_path``, with the repository on
    PYTHONPATH; its stdout and stderr go to files there, and the jobs or tasks it runs append to ``output``."""

    def __init__(self, tmp_path: Path, settings_module: str, output: Path, env: dict[str, str]) -> None:
        self.tmp_path = tmp_path
        self.output = output
        self.env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": settings_module,
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
            **env,
        }
        self.process: subprocess.Popen[bytes] | None = None

    def launch(self, *args: str) -> None:
        with open(self.tmp_path / "stdout", "wb") as stdout, open(self.tmp_path / "stderr", "wb") as stderr:
            self.process = subprocess.Popen([sys.executable, "-m", "django", "mutexcron", *args], env=self.env,
                                            cwd=self.tmp_path, stdout=stdout, stderr=stderr)

    def lines(self) -> list[str]:
        return self.output.read_text().splitlines() if self.output.exists() else []

    @property
    def stdout(self) -> str:
        path = self.tmp_path / "stdout"
        return path.read_text() if path.exists() else ""

    @property
    def stderr(self) -> str:
        path = self.tmp_path / "stderr"
        return path.read_text() if path.exists() else ""

    def stop(self, signum: int) -> int:
        assert self.process is not None
        self.process.send_signal(signum)
        return self.process.wait(timeout=60)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
