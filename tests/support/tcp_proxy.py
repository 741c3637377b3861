"""A small threaded TCP proxy for tests: put it between a client and a server, then cut and restore the link.

    proxy = TcpProxy("127.0.0.1", 6379)      # listens on 127.0.0.1:<proxy.port>
    proxy.cut()                              # resets every open connection and refuses new ones
    proxy.restore()                          # accepts again, on the same port
    proxy.latency = 0.2                      # from now on every chunk is forwarded 200 ms after it came in
    proxy.close()

``ProxyProcess`` is the same proxy in a child process of its own (same methods): its forwarding threads then
share no GIL, garbage collector or scheduling with the test that polls beside them, so a busy test process
cannot add latency of its own to the link (``python tests/support/tcp_proxy.py HOST PORT`` serves it).
"""

from __future__ import annotations

import contextlib
import queue
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

__all__ = ["ProxyProcess", "TcpProxy"]

_BUFFER = 65536


def _reset(sock: socket.socket) -> None:
    """Close ``sock`` with a TCP RST (linger 0), so the peer sees the connection drop at once."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)  # wakes a thread blocked in recv() on it
    sock.close()


class TcpProxy:
    """Forwards every connection made to ``127.0.0.1:port`` to ``target_host:target_port``.

    ``latency`` (seconds, default 0, settable at any time) delays each chunk, in each direction, by that
    much after it was read: a link that slow, in order, without holding up the chunks behind it.
    """

    def __init__(self, target_host: str, target_port: int, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.target = (target_host, target_port)
        self.host = host
        self._lock = threading.Lock()
        self._connections: set[socket.socket] = set()
        self._listener: socket.socket | None = None
        self._accepting: threading.Thread | None = None
        self._closed = False
        self.latency = 0.0
        self.port = port
        self._listen()

    @property
    def address(self) -> tuple[str, int]:
        return self.host, self.port

    @property
    def is_cut(self) -> bool:
        return self._listener is None

    def cut(self) -> None:
        """Drop the link: reset every open connection and refuse new ones (nothing listens on the port)."""
        with self._lock:
            listener, self._listener = self._listener, None
            connections, self._connections = self._connections, set()
        if listener is not None:
            _reset(listener)
        for sock in connections:
            _reset(sock)
        if self._accepting is not None:
            self._accepting.join(5)
            self._accepting = None

    def restore(self) -> None:
        """Accept connections again, on the same port."""
        if self._closed:
            raise RuntimeError("the proxy is closed")
        if self._listener is None:
            self._listen()

    def close(self) -> None:
        self._closed = True
        self.cut()

    def __enter__(self) -> TcpProxy:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "cut" if self.is_cut else "open"
        return f"<TcpProxy {self.host}:{self.port} -> {self.target[0]}:{self.target[1]} {state}>"

    # -- internals --------------------------------------------------------------------------------

    def _listen(self) -> None:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((self.host, self.port))
        listener.listen(64)
        listener.settimeout(0.1)  # accept() wakes up to notice a cut
        self.port = listener.getsockname()[1]
        with self._lock:
            self._listener = listener
        self._accepting = threading.Thread(target=self._accept, args=(listener,), name="tcp-proxy-accept",
                                           daemon=True)
        self._accepting.start()

    def _accept(self, listener: socket.socket) -> None:
        while self._listener is listener:
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return  # the listener was closed by cut()
            client.settimeout(None)
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                _reset(client)
                continue
            upstream.settimeout(None)
            with self._lock:
                if self._listener is not listener:  # cut while we were connecting
                    _reset(client)
                    _reset(upstream)
                    return
                self._connections.update((client, upstream))
            for source, destination in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, destination), name="tcp-proxy-pump",
                                 daemon=True).start()

    def _pump(self, source: socket.socket, destination: socket.socket) -> None:
        chunks: queue.SimpleQueue[tuple[float, bytes]] = queue.SimpleQueue()
        sender = threading.Thread(target=self._forward, args=(chunks, destination), name="tcp-proxy-send",
                                  daemon=True)
        sender.start()
        try:
            while data := source.recv(_BUFFER):
                chunks.put((time.monotonic() + self.latency, data))
        except OSError:
            pass
        chunks.put((0.0, b""))  # the end: the sender stops once it forwarded what came before
        sender.join(self.latency + 5)
        # One side ended (or the link was cut): end the other side too.
        with self._lock:
            self._connections.discard(source)
            self._connections.discard(destination)
        for sock in (source, destination):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()

    @staticmethod
    def _forward(chunks: queue.SimpleQueue[tuple[float, bytes]], destination: socket.socket) -> None:
        """Send each chunk once it is due, in order, until the end marker (or the link fails)."""
        while True:
            due, data = chunks.get()
            if not data:
                return
            if (wait := due - time.monotonic()) > 0:
                time.sleep(wait)
            try:
                destination.sendall(data)
            except OSError:
                return


class ProxyProcess:
    """A ``TcpProxy`` run by a child process of its own, steered over its standard input; each call returns once
    the child has carried it out."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self._process = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), target_host, str(target_port)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1,
        )
        self.port = int(self._answer())
        self._latency = 0.0

    @property
    def latency(self) -> float:
        return self._latency

    @latency.setter
    def latency(self, seconds: float) -> None:
        self._command(f"latency {seconds}")
        self._latency = seconds

    def cut(self) -> None:
        self._command("cut")

    def restore(self) -> None:
        self._command("restore")

    def close(self) -> None:
        if self._process.poll() is None:
            with contextlib.suppress(OSError, RuntimeError):
                self._command("close")
            self._process.wait(10)

    def __enter__(self) -> ProxyProcess:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _command(self, line: str) -> None:
        assert self._process.stdin is not None
        self._process.stdin.write(line + "\n")
        self._process.stdin.flush()
        if (answer := self._answer()) != "ok":
            raise RuntimeError(f"proxy process answered {answer!r} to {line!r}")

    def _answer(self) -> str:
        assert self._process.stdout is not None
        line = self._process.stdout.readline()
        if not line:
            raise RuntimeError(f"proxy process exited ({self._process.poll()})")
        return line.strip()


def serve(target_host: str, target_port: int) -> None:
    """The child of ``ProxyProcess``: print the port, then carry out one command a line, answering "ok"."""
    proxy = TcpProxy(target_host, target_port)
    print(proxy.port, flush=True)
    for line in sys.stdin:
        command, _, argument = line.strip().partition(" ")
        if command == "latency":
            proxy.latency = float(argument)
        elif command == "cut":
            proxy.cut()
        elif command == "restore":
            proxy.restore()
        elif command == "close":
            proxy.close()
            print("ok", flush=True)
            return
        else:
            print(f"unknown command {command!r}", flush=True)
            continue
        print("ok", flush=True)
    proxy.close()


if __name__ == "__main__":
    serve(sys.argv[1], int(sys.argv[2]))
