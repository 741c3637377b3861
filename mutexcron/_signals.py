"""A stop flag that a signal handler may set.

``threading.Event.set()`` from a signal handler can deadlock: the handler runs in the main thread, and if
that thread was interrupted while holding the event's lock (inside ``wait()``), ``set()`` waits for itself
forever. :class:`SignalFlag` takes no lock to be set: it writes a byte to a pipe that ``wait()`` selects on.
"""

from __future__ import annotations

import contextlib
import os
import select

__all__ = ["SignalFlag"]


class SignalFlag:
    """A one-shot event, set once (by a signal handler or any thread) and never cleared."""

    def __init__(self) -> None:
        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)
        self._set = False

    def set(self) -> None:
        self._set = True
        with contextlib.suppress(OSError):  # a full pipe wakes every waiter already; a closed one, no one
            os.write(self._write, b"!")  # left unread, so that every waiter, now and later, wakes at once

    def is_set(self) -> bool:
        return self._set

    def wait(self, timeout: float | None = None) -> bool:
        """Block until set or ``timeout`` seconds pass; True if set."""
        if not self._set:
            with contextlib.suppress(InterruptedError, ValueError):
                select.select([self._read], [], [], timeout)
        return self._set

    def close(self) -> None:
        for fd in (self._read, self._write):
            with contextlib.suppress(OSError):
                os.close(fd)

    def __del__(self) -> None:
        self.close()
