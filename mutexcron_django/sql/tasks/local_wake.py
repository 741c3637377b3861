"""Wake-ups between the processes of one machine, for databases with no notification channel of their own.

SQLite and MySQL/MariaDB cannot tell a sleeping worker in another process that a task was scheduled, so
each listening process binds a Unix datagram socket in a directory shared by everyone using the same
database, and a producer sends a small datagram to every socket there after its transaction commits. A
wake-up is only a hint: a lost one costs lateness, never a task. Which directories and sockets are
trusted, and why no link is followed, is in ``docs/sql-tasks.md``.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import socket
import stat
import threading
import uuid
from collections.abc import Iterator

__all__ = ["LocalWakeChannel", "UnsafeWakeDirectory", "WakeListener"]

logger = logging.getLogger("mutexcron.tasks.wake")

SUFFIX = ".sock"
MAX_MESSAGE = 512
_MAX_SOCKET_PATH = 107  # sun_path is 108 bytes with its terminating NUL
_GROUP_OTHER_WRITE = stat.S_IWGRP | stat.S_IWOTH


class UnsafeWakeDirectory(OSError):
    """The wake-up directory is one that users other than the expected ones could write (or a link)."""


_BY_FD = os.path.isdir("/proc/self/fd")  # sockets can be addressed through descriptors (Linux)


class LocalWakeChannel:
    """Broadcast small messages to every :class:`WakeListener` bound in ``directory`` (created on first use).

    ``follows``: the file whose writers share the directory (a SQLite database); None: private to this user.
    """

    def __init__(self, directory: str, *, follows: str | None = None) -> None:
        self.directory = os.path.abspath(directory)
        self.follows = follows
        self._lock = threading.Lock()
        self._sender: socket.socket | None = None
        self._warned: set[str] = set()
        # Socket addresses hold at most 107 bytes: longer paths need an fd of the directory.
        self._long = len(os.fsencode(os.path.join(self.directory, f"{'0' * 20}{SUFFIX}"))) > _MAX_SOCKET_PATH

    def _refuse(self, reason: str) -> UnsafeWakeDirectory:
        """The error that names the directory and why it is not used."""
        return UnsafeWakeDirectory(f"refusing the wake-up directory {self.directory}: {reason}")

    @contextlib.contextmanager
    def _opened(self, *, create: bool) -> Iterator[int]:
        """A descriptor of the directory (made first if ``create``), checked: raises UnsafeWakeDirectory."""
        follows = os.stat(self.follows) if self.follows is not None else None
        if create:
            mode = 0o700
            if follows is not None:  # group or others may come in where they may write the file
                mode |= 0o070 if follows.st_mode & stat.S_IWGRP else 0
                mode |= 0o007 if follows.st_mode & stat.S_IWOTH else 0
            os.makedirs(os.path.dirname(self.directory), exist_ok=True)
            with contextlib.suppress(FileExistsError):
                os.mkdir(self.directory, mode)  # the umask may narrow the mode, never widen it
        try:
            fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as error:
            if error.errno not in (errno.ENOTDIR, errno.ELOOP):
                raise
            kind = "a symlink" if os.path.islink(self.directory) else "not a directory"
            raise self._refuse(f"it is {kind}") from None
        try:
            self._check(os.fstat(fd), follows)
            yield fd
        finally:
            os.close(fd)

    def _check(self, found: os.stat_result, follows: os.stat_result | None) -> None:
        """Raise unless only the expected users may write the directory (see the module's docstring)."""
        owners = {os.geteuid()} if follows is None else {os.geteuid(), follows.st_uid}
        if found.st_uid not in owners:
            raise self._refuse(f"owned by uid {found.st_uid}, not by {' or '.join(map(str, sorted(owners)))}")
        if follows is None and found.st_mode & 0o077:
            raise self._refuse(f"mode {found.st_mode & 0o777:04o} lets other users in (wanted 0700)")
        if follows is not None and found.st_mode & _GROUP_OTHER_WRITE & ~follows.st_mode:
            raise self._refuse(f"mode {found.st_mode & 0o777:04o} lets users write it who may not write "
                               f"{self.follows} (mode {follows.st_mode & 0o777:04o})")

    def _address(self, fd: int, name: str) -> str:
        """The socket address of ``name`` in the directory opened as ``fd``."""
        if _BY_FD:
            return f"/proc/self/fd/{fd}/{name}"
        if self._long:
            raise OSError(errno.ENAMETOOLONG, "socket path too long (and no /proc/self/fd)", self.directory)
        return os.path.join(self.directory, name)

    def listen(self) -> WakeListener:
        """Bind a new listener socket in the directory (made if missing). Raises OSError if that fails."""
        name = f"{os.getpid()}-{uuid.uuid4().hex[:10]}{SUFFIX}"
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            for attempt in range(3):
                try:
                    with self._opened(create=True) as fd:
                        sock.bind(self._address(fd, name))
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
            with self._opened(create=False) as fd:
                names = [name for name in os.listdir(fd)
                         if name.endswith(SUFFIX) and os.path.join(self.directory, name) != skip]
                directory = os.fstat(fd)
                return sum(self._send(fd, directory, name, message) for name in names)
        except FileNotFoundError:
            return 0  # nobody listens (the last listener removed the directory)
        except OSError as error:
            self._warn_once("", error)
            return 0

    def _send(self, fd: int, directory: os.stat_result, name: str, message: bytes) -> bool:
        """Send to the socket ``name`` if it is one of the expected users' (never through a link)."""
        try:
            with self._target(fd, directory, name) as address:
                if address is None:
                    return False
                self._socket().sendto(message, address)
                return True
        except (ConnectionRefusedError, FileNotFoundError):
            with contextlib.suppress(OSError):  # its process died without unlinking it; or another sender did
                os.unlink(name, dir_fd=fd)
        except BlockingIOError:
            pass  # its buffer is full: that listener has wake-ups waiting already
        except OSError as error:
            self._warn_once(name, error)
        return False

    @contextlib.contextmanager
    def _target(self, fd: int, directory: os.stat_result, name: str) -> Iterator[str | None]:
        """The address to send to ``name`` at, or None when it is a link, not a socket, or someone else's."""
        owners = {os.geteuid(), directory.st_uid}
        o_path = getattr(os, "O_PATH", None)
        if o_path is None or not _BY_FD:
            found = os.lstat(name, dir_fd=fd)
            yield self._address(fd, name) if self._expected(found, directory, owners) else None
            return
        entry = os.open(name, o_path | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
        try:
            yield f"/proc/self/fd/{entry}" if self._expected(os.fstat(entry), directory, owners) else None
        finally:
            os.close(entry)

    @staticmethod
    def _expected(found: os.stat_result, directory: os.stat_result, owners: set[int]) -> bool:
        anyone = bool(directory.st_mode & _GROUP_OTHER_WRITE)  # shared like its database: any writer's socket
        return stat.S_ISSOCK(found.st_mode) and (anyone or found.st_uid in owners)

    def _socket(self) -> socket.socket:
        with self._lock:
            if self._sender is None:
                self._sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                self._sender.setblocking(False)
            return self._sender

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
