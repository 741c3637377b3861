"""Wake-ups between the processes of one machine, for task stores with no notification channel of their own.

SQLite and MySQL/MariaDB cannot tell a sleeping worker in another process that a task was scheduled
(PostgreSQL has ``LISTEN``/``NOTIFY``). Instead, each listening process binds a Unix datagram socket in a
directory shared by everyone using the same database, and a producer sends one small datagram to every
socket in it after its transaction commits. A wake-up is only a hint to look now: a lost one (another
machine, a full socket buffer) costs lateness up to the worker's bounded sleep, never a task.

Datagrams, not a stream or a FIFO: one ``sendto`` per listener, which never blocks (a full buffer means
that listener has wake-ups waiting already) and needs no connection. A socket file whose process died
refuses datagrams (``ECONNREFUSED``) and is removed by the next sender. Paths longer than a Unix socket
address allows (108 bytes) are reached through ``/proc/self/fd/<directory fd>/`` on Linux.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable, Iterator

__all__ = ["LocalWakeChannel", "WakeListener"]

logger = logging.getLogger("mutexcron.tasks.wake")

SUFFIX = ".sock"
MAX_MESSAGE = 512
_MAX_SOCKET_PATH = 107  # sun_path is 108 bytes with its terminating NUL


class LocalWakeChannel:
    """Broadcast small messages to every :class:`WakeListener` bound in ``directory`` (created on first use)."""

    def __init__(self, directory: str) -> None:
        self.directory = os.path.abspath(directory)
        self._lock = threading.Lock()
        self._sender: socket.socket | None = None
        self._warned: set[str] = set()
        # Socket addresses hold at most 107 bytes: longer paths go through an fd of the directory.
        self._long = len(os.fsencode(os.path.join(self.directory, f"{'0' * 20}{SUFFIX}"))) > _MAX_SOCKET_PATH

    @contextlib.contextmanager
    def _addresses(self) -> Iterator[Callable[[str], str]]:
        """``address(name)`` of a socket in the directory, valid inside the block (the directory as it is now)."""
        if not self._long:
            yield lambda name: os.path.join(self.directory, name)
            return
        if not os.path.isdir("/proc/self/fd"):
            raise OSError(errno.ENAMETOOLONG, "socket path too long (and no /proc/self/fd)", self.directory)
        fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            yield lambda name: f"/proc/self/fd/{fd}/{name}"
        finally:
            os.close(fd)

    def listen(self) -> WakeListener:
        """Bind a new listener socket in the directory (made if missing). Raises OSError if that fails."""
        name = f"{os.getpid()}-{uuid.uuid4().hex[:10]}{SUFFIX}"
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            for attempt in range(3):
                os.makedirs(self.directory, exist_ok=True)
                try:
                    with self._addresses() as address:
                        sock.bind(address(name))
                    break
                except FileNotFoundError:  # the last listener removed the directory meanwhile: make it again
                    if attempt == 2:
                        raise
        except OSError:
            sock.close()
            raise
        return WakeListener(sock, os.path.join(self.directory, name))

    def broadcast(self, message: bytes, *, skip: str | None = None) -> int:
        """Send ``message`` to every listener but the one at path ``skip``; never blocks. Returns how many got it."""
        if len(message) > MAX_MESSAGE:
            raise ValueError(f"wake-up message of {len(message)} bytes; at most {MAX_MESSAGE}")
        try:
            names = [name for name in os.listdir(self.directory)
                     if name.endswith(SUFFIX) and os.path.join(self.directory, name) != skip]
            if not names:
                return 0
            sender = self._socket()
            sent = 0
            with self._addresses() as address:
                for name in names:
                    try:
                        sender.sendto(message, address(name))
                        sent += 1
                    except (ConnectionRefusedError, FileNotFoundError):
                        self._remove_stale(name)  # its process died without unlinking it
                    except BlockingIOError:
                        pass  # its buffer is full: that listener has wake-ups waiting already
                    except OSError as error:
                        self._warn_once(name, error)
            return sent
        except FileNotFoundError:
            return 0  # nobody listens (the last listener removed the directory)
        except OSError as error:
            self._warn_once("", error)
            return 0

    def _socket(self) -> socket.socket:
        with self._lock:
            if self._sender is None:
                self._sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                self._sender.setblocking(False)
            return self._sender

    def _remove_stale(self, name: str) -> None:
        with contextlib.suppress(OSError):  # another sender removed it first, or it is not ours to remove
            os.unlink(os.path.join(self.directory, name))

    def _warn_once(self, name: str, error: OSError) -> None:
        if name not in self._warned:
            self._warned.add(name)
            logger.warning("task wake-ups: cannot send to %s (%s); workers there see new tasks late",
                           os.path.join(self.directory, name), error)

    def close(self) -> None:
        with self._lock:
            if self._sender is not None:
                self._sender.close()
                self._sender = None

    def __repr__(self) -> str:
        return f"<LocalWakeChannel {self.directory}>"


class WakeListener:
    """One bound socket of a :class:`LocalWakeChannel`; its file is removed by :meth:`close`."""

    def __init__(self, sock: socket.socket, path: str) -> None:
        self._sock = sock
        self.path = path

    def receive(self, timeout: float | None) -> list[bytes]:
        """The messages waiting, after waiting up to ``timeout`` seconds for the first (None: forever)."""
        self._sock.settimeout(timeout)
        try:
            messages = [self._sock.recv(MAX_MESSAGE)]
        except (TimeoutError, BlockingIOError):  # BlockingIOError: timeout 0 and nothing waiting
            return []
        self._sock.setblocking(False)
        while True:
            try:
                messages.append(self._sock.recv(MAX_MESSAGE))
            except (BlockingIOError, InterruptedError):
                return messages

    def close(self) -> None:
        """Remove the socket file, and the directory if it was the last (nothing is left behind)."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        self._sock.close()
        with contextlib.suppress(OSError):  # not empty: other listeners (or files of someone else's) remain
            os.rmdir(os.path.dirname(self.path))

    def __repr__(self) -> str:
        return f"<WakeListener {self.path}>"
