"""Wake-ups between processes of one machine (Unix datagram sockets in a shared directory), and which
directories and sockets they trust."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mutexcron_django.sql.tasks.local_wake import (
    MAX_MESSAGE,
    SUFFIX,
    LocalWakeChannel,
    UnsafeWakeDirectory,
    WakeListener,
)

LISTENER_SCRIPT = """
import sys
from mutexcron_django.sql.tasks.local_wake import LocalWakeChannel
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


# -- whose directory: nobody but the expected users may plant sockets or links in it ------------------------

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="making a file another user's needs root (chown)")
NOBODY = 65534


def make_directory(path: Path, mode: int, owner: int | None = None) -> Path:
    path.mkdir()
    path.chmod(mode)  # not mkdir(mode): the umask would narrow it
    if owner is not None:
        os.chown(path, owner, -1)
    return path


def test_the_directory_made_for_a_listener_is_private_to_its_user(
    channel: LocalWakeChannel, listeners: list[WakeListener]
) -> None:
    listen(channel, listeners)
    made = os.lstat(channel.directory)
    assert (made.st_mode & 0o777, made.st_uid) == (0o700, os.geteuid())


def test_a_directory_others_may_enter_is_refused_and_nothing_is_sent_there(
    channel: LocalWakeChannel, caplog: pytest.LogCaptureFixture
) -> None:
    make_directory(Path(channel.directory), 0o777)
    with pytest.raises(UnsafeWakeDirectory, match="mode 0777 lets other users in"):
        channel.listen()
    with caplog.at_level(logging.WARNING, logger="mutexcron.tasks.wake"):
        assert channel.broadcast(b"look") == 0
    assert "mode 0777" in caplog.text


@needs_root
def test_a_directory_owned_by_another_user_is_refused(channel: LocalWakeChannel) -> None:
    make_directory(Path(channel.directory), 0o700, owner=NOBODY)
    with pytest.raises(UnsafeWakeDirectory, match=f"owned by uid {NOBODY}"):
        channel.listen()


def test_a_symlink_in_place_of_the_directory_is_refused(tmp_path: Path, channel: LocalWakeChannel) -> None:
    elsewhere = make_directory(tmp_path / "elsewhere", 0o700)
    os.symlink(elsewhere, channel.directory)
    with pytest.raises(UnsafeWakeDirectory, match="a symlink"):
        channel.listen()
    assert os.listdir(elsewhere) == []


def bound_socket(path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.setblocking(False)
    return sock


def received(sock: socket.socket) -> bytes | None:
    try:
        return sock.recv(MAX_MESSAGE)
    except BlockingIOError:
        return None


def test_a_symlink_planted_in_the_directory_to_another_socket_never_receives_a_wake_up(
    tmp_path: Path, channel: LocalWakeChannel, listeners: list[WakeListener]
) -> None:
    listener = listen(channel, listeners)
    with contextlib.closing(bound_socket(tmp_path / "victim")) as victim:
        os.symlink(tmp_path / "victim", os.path.join(channel.directory, f"planted{SUFFIX}"))
        assert channel.broadcast(b"look") == 1
        assert listener.receive(timeout=1) == [b"look"]
        assert received(victim) is None


@needs_root
def test_a_socket_of_another_user_in_the_directory_receives_no_wake_up(
    channel: LocalWakeChannel, listeners: list[WakeListener]
) -> None:
    listen(channel, listeners)
    foreign_path = os.path.join(channel.directory, f"foreign{SUFFIX}")
    with contextlib.closing(bound_socket(Path(foreign_path))) as foreign:
        os.chown(foreign_path, NOBODY, -1)
        assert channel.broadcast(b"look") == 1
        assert received(foreign) is None


def test_a_file_that_is_not_a_socket_is_neither_sent_to_nor_removed(
    channel: LocalWakeChannel, listeners: list[WakeListener]
) -> None:
    listen(channel, listeners)
    not_a_socket = Path(channel.directory) / f"notes{SUFFIX}"
    not_a_socket.write_text("kept")
    assert channel.broadcast(b"look") == 1
    assert not_a_socket.read_text() == "kept"


# -- beside a SQLite file: shared by whoever may write the database -----------------------------------------


@pytest.fixture
def database(tmp_path: Path) -> Path:
    made = tmp_path / "site.sqlite3"
    made.write_bytes(b"")
    return made


def beside(database: Path) -> LocalWakeChannel:
    return LocalWakeChannel(f"{database}.mutexcron-wake", follows=str(database))


def test_a_directory_beside_a_database_is_refused_when_others_may_write_it_but_not_the_database(
    database: Path
) -> None:
    database.chmod(0o644)
    make_directory(Path(f"{database}.mutexcron-wake"), 0o777)
    with pytest.raises(UnsafeWakeDirectory, match="who may not write"):
        beside(database).listen()


def test_a_directory_beside_a_database_everyone_may_write_may_be_written_by_everyone(database: Path) -> None:
    database.chmod(0o666)
    make_directory(Path(f"{database}.mutexcron-wake"), 0o777)
    channel = beside(database)
    listener = channel.listen()
    try:
        assert channel.broadcast(b"look") == 1
        assert listener.receive(timeout=1) == [b"look"]
    finally:
        listener.close()
        channel.close()


@needs_root
def test_a_directory_beside_a_database_may_belong_to_the_database_owner_but_to_nobody_else(database: Path) -> None:
    os.chown(database, NOBODY, -1)
    directory = make_directory(Path(f"{database}.mutexcron-wake"), 0o700, owner=NOBODY)
    beside(database).listen().close()
    os.chown(database, NOBODY + 1, -1)
    make_directory(directory, 0o700, owner=NOBODY)
    with pytest.raises(UnsafeWakeDirectory, match=f"owned by uid {NOBODY}"):
        beside(database).listen()
