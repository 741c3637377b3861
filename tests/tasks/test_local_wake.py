"""Wake-ups between processes of one machine (Unix datagram sockets in a shared directory)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mutexcron.tasks.local_wake import LocalWakeChannel, WakeListener

LISTENER_SCRIPT = """
import sys
from mutexcron.tasks.local_wake import LocalWakeChannel
listener = LocalWakeChannel(sys.argv[1]).listen()
print(listener.path, flush=True)
for message in listener.receive(timeout=10):
    print(message.decode(), flush=True)
"""


@pytest.fixture
def channel(tmp_path: Path) -> Iterator[LocalWakeChannel]:
    made = LocalWakeChannel(str(tmp_path / "wake"))
    yield made
    made.close()


@pytest.fixture
def listeners(channel: LocalWakeChannel) -> Iterator[list[WakeListener]]:
    made: list[WakeListener] = []
    yield made
    for listener in made:
        listener.close()


def listen(channel: LocalWakeChannel, listeners: list[WakeListener]) -> WakeListener:
    listener = channel.listen()
    listeners.append(listener)
    return listener


def start_listener_process(directory: str) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen([sys.executable, "-c", LISTENER_SCRIPT, directory], stdout=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    assert process.stdout is not None
    path = process.stdout.readline().strip()
    assert path.endswith(".sock"), f"the listener process printed {path!r}"
    return process, path


def test_a_broadcast_reaches_a_listener_in_another_process(channel: LocalWakeChannel) -> None:
    process, _ = start_listener_process(channel.directory)
    try:
        assert channel.broadcast(b"1700000000000 send-sms") == 1
        out, _ = process.communicate(timeout=10)
        assert out.strip() == "1700000000000 send-sms"
    finally:
        process.kill()
        process.wait()


def test_a_broadcast_reaches_every_listener_but_the_skipped_one(
    channel: LocalWakeChannel, listeners: list[WakeListener]
) -> None:
    first, second, own = (listen(channel, listeners) for _ in range(3))
    assert channel.broadcast(b"look", skip=own.path) == 2
    assert first.receive(timeout=1) == [b"look"]
    assert second.receive(timeout=1) == [b"look"]
    assert own.receive(timeout=0) == []


def test_receive_returns_every_waiting_message_at_once(
    channel: LocalWakeChannel, listeners: list[WakeListener]
) -> None:
    listener = listen(channel, listeners)
    for n in range(5):
        channel.broadcast(str(n).encode())
    assert listener.receive(timeout=1) == [b"0", b"1", b"2", b"3", b"4"]
    assert listener.receive(timeout=0.05) == []


def test_a_socket_left_by_a_killed_process_is_removed_by_the_next_broadcast(channel: LocalWakeChannel) -> None:
    process, path = start_listener_process(channel.directory)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert os.path.exists(path)  # SIGKILL gave it no chance to remove it
    assert channel.broadcast(b"look") == 0
    assert not os.path.exists(path)


def test_a_listener_that_never_reads_does_not_block_the_sender(
    channel: LocalWakeChannel, listeners: list[WakeListener]
) -> None:
    deaf = listen(channel, listeners)
    reader = listen(channel, listeners)
    started = time.monotonic()
    for _ in range(5000):  # far more than a socket buffer holds
        channel.broadcast(b"x" * 100)
        reader.receive(timeout=0)
    assert time.monotonic() - started < 10, "a full buffer must not make broadcast() wait"
    assert channel.broadcast(b"last") == 1  # only the reader had room
    assert reader.receive(timeout=1) == [b"last"]
    assert len(deaf.receive(timeout=0)) < 5000


def test_closing_the_last_listener_removes_its_socket_file_and_the_directory(channel: LocalWakeChannel) -> None:
    first, second = channel.listen(), channel.listen()
    first.close()
    assert os.listdir(channel.directory) == [os.path.basename(second.path)]
    second.close()
    assert not os.path.exists(channel.directory)
    assert channel.broadcast(b"look") == 0
    third = channel.listen()  # the directory is made again
    try:
        assert channel.broadcast(b"look") == 1
    finally:
        third.close()


def test_a_broadcast_with_no_directory_yet_reaches_nobody(tmp_path: Path) -> None:
    channel = LocalWakeChannel(str(tmp_path / "never-listened"))
    assert channel.broadcast(b"look") == 0
    assert not (tmp_path / "never-listened").exists()


def test_a_directory_path_longer_than_a_socket_address_works(
    tmp_path: Path, listeners: list[WakeListener]
) -> None:
    long_directory = tmp_path / ("d" * 60) / ("e" * 60)
    channel = LocalWakeChannel(str(long_directory))
    try:
        assert len(str(long_directory)) > 108
        listener = listen(channel, listeners)
        assert listener.path.startswith(str(long_directory))
        assert channel.broadcast(b"look") == 1
        assert listener.receive(timeout=1) == [b"look"]
    finally:
        channel.close()


def test_a_message_over_the_size_limit_is_refused(channel: LocalWakeChannel) -> None:
    with pytest.raises(ValueError, match="600 bytes"):
        channel.broadcast(b"x" * 600)
