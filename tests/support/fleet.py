"""The one launcher of the tests' and benches' fleets of OS processes: start them (together, through a gate file, if
asked), wait until each says it is ready (a poll with a deadline), report a dead one with its log tail, stop them with
SIGTERM (a clean exit checked if asked), and end every one at teardown."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Generic, Self, TypeVar

from tests.support import read_ledger, wait_until

ROOT = Path(__file__).resolve().parents[2]


class Died(AssertionError):
    """A process of the fleet exited while it should be running."""


@dataclass
class Member:
    """One process of a fleet, in a session (process group) of its own: its output in ``log``, what it reports in
    ``ledger`` (read by a subclass, which says when it is ``waiting`` at the gate, ``ready``, cleanly ``stopped``)."""

    SUFFIX: ClassVar[str] = ".jsonl"  # of its ledger's name

    name: str
    process: subprocess.Popen[bytes]
    log: Path
    ledger: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def tail(self, lines: int = 60) -> str:
        return "\n".join(self.text().splitlines()[-lines:])

    def assert_alive(self) -> None:
        if not self.alive():
            raise Died(f"{self.name} exited with {self.process.returncode}:\n{self.tail()}")

    def waiting(self) -> bool:
        """Built, and waiting for the gate to open."""
        return False

    def ready(self) -> Any:
        """Something truthy once it said it is ready: what it said (when, for one that says it)."""
        return True

    def stopped(self) -> bool:
        """Whether it said it stopped cleanly."""
        return True

    def signal_group(self, signum: int) -> None:
        with suppress(ProcessLookupError):
            os.killpg(self.process.pid, signum)

    def wait_exit(self, timeout: float = 15) -> int | None:
        """Wait for its exit, SIGKILL its group after ``timeout``: its exit status, None if it had to be killed.
        Whatever is left of its group (a server's children) is killed too."""
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.signal_group(signal.SIGKILL)
            self.process.wait()
            return None
        self.signal_group(signal.SIGKILL)
        return self.process.returncode

    def send(self, signum: int) -> None:
        """``signum`` to its group if it runs, continued first should it be stopped."""
        if self.alive():
            self.signal_group(signal.SIGCONT)
            self.signal_group(signum)

    def stop(self, signum: int = signal.SIGTERM, timeout: float = 15) -> int | None:
        self.send(signum)
        return self.wait_exit(timeout)


class LedgerMember(Member):
    """A process that reports on a JSON-lines ledger (tests.support.Ledger): "waiting", "ready" and "stopped" lines."""

    def entries(self, event: str | None = None) -> list[dict[str, Any]]:
        return [e for e in read_ledger(self.ledger) if event is None or e["event"] == event]

    def waiting(self) -> bool:
        return bool(self.entries("waiting"))

    def ready(self) -> Any:
        """When it said it was ready (its line's "at"), None until it did."""
        return next((entry.get("at", True) for entry in self.entries("ready")), None)

    def stopped(self) -> bool:
        return bool(self.entries("stopped"))


M = TypeVar("M", bound=Member)


class Launcher(Generic[M]):
    """The processes of a test or a benchmark run: of ``kind`` (how each one reports), their logs and ledgers in
    ``directory``, ``env`` added to the environment of each. As a context manager it ends them all on exit and prints
    their logs (pytest shows them for a failed test)."""

    def __init__(self, directory: Path, kind: type[M], env: dict[str, str] | None = None,
                 gate: Path | None = None) -> None:
        self.directory, self.kind, self.env = directory, kind, env or {}
        self.gate = gate or directory / "start.gate"  # those started with it wait for this file
        self.members: list[M] = []

    def ledger(self, name: str) -> Path:
        return self.directory / f"{name}{self.kind.SUFFIX}"

    def spawn(self, name: str, command: Sequence[str], **env: str) -> M:
        """Start ``command`` from the repository's root, which is on its PYTHONPATH, with ``env`` added."""
        return self.launch(name, command, env)

    def launch(self, name: str, command: Sequence[str], env: dict[str, str], kind: type[M] | None = None,
               stdin: bool = False) -> M:
        """:meth:`spawn` as a ``kind`` of member of its own, its standard input a pipe if ``stdin``."""
        environment = {key: value for key, value in os.environ.items() if key != "DJANGO_SETTINGS_MODULE"}
        environment["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), environment.get("PYTHONPATH")]))
        environment |= {"PYTHONUNBUFFERED": "1", **self.env, **env}
        log = self.directory / f"{name}.log"
        with log.open("ab") as output:
            process = subprocess.Popen(list(command), cwd=ROOT, env=environment, stdout=output,
                                       stderr=subprocess.STDOUT, stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                                       start_new_session=True)
        member = (kind or self.kind)(name, process, log, self.ledger(name))
        self.members.append(member)
        return member

    def assert_all_alive(self, members: Sequence[M] | None = None) -> None:
        for member in self.members if members is None else members:
            member.assert_alive()

    def wait_ready(self, members: Sequence[M] | None = None, timeout: float = 30.0,
                   ready: Callable[[M], Any] | None = None) -> Any:
        """Wait until each of ``members`` (all by default) is ready: ``ready(member)``, by default its own ``ready()``,
        is truthy. The latest of what they said (of those that say when, when the last one was ready). 30 s by
        default: an instance imports and starts in seconds when CI runs four fleet tests on two cores."""
        chosen = list(self.members if members is None else members)
        said = ready or (lambda member: member.ready())

        def answers() -> tuple[list[Any]] | None:
            self.assert_all_alive(chosen)
            found = [said(member) for member in chosen]
            return (found,) if all(found) else None

        return max(wait_until(answers, timeout, f"{len(chosen)} processes to be ready")[0], default=None)

    def wait_built(self, members: Sequence[M] | None = None, timeout: float = 30.0) -> None:
        """Wait until each of ``members`` (all by default) is built, and waiting for the gate to open."""
        self.wait_ready(members, timeout, ready=lambda member: member.waiting())

    def open_gate(self, members: Sequence[M] | None = None, timeout: float = 30.0) -> None:
        """Once each of ``members`` (all by default) is built, open the gate: they start together."""
        self.wait_built(members, timeout)
        self.gate.touch()

    def stop(self, members: Sequence[M] | None = None, timeout: float = 10.0, clean: bool = True) -> list[int | None]:
        """SIGTERM each of ``members`` (all by default) that runs and wait for its exit (SIGKILL after ``timeout``);
        with ``clean``, check that each of those exited with 0 and said it stopped. Their exit statuses, in order."""
        chosen = list(self.members if members is None else members)
        running = [member.alive() for member in chosen]
        for member in chosen:
            member.send(signal.SIGTERM)
        codes = [member.wait_exit(timeout) for member in chosen]
        for member, alive, code in zip(chosen, running, codes, strict=True):
            if clean and alive:
                assert code == 0, f"{member.name} failed to stop (exit {code}):\n{member.tail()}"
                assert member.stopped(), f"{member.name} did not say it stopped"
        return codes

    def terminate_all(self, timeout: float = 10.0) -> None:
        """Teardown: end whatever still runs, however it ends."""
        self.stop(timeout=timeout, clean=False)

    def report(self) -> str:
        return "\n".join(f"--- {m.name} (pid {m.pid}, exit {m.process.poll()}):\n{m.tail()}" for m in self.members)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.terminate_all()
        print(self.report())
