"""The TCP proxy of the CPU-per-message cluster benchmark (``benchmarks/cluster_cpu.py``)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Sequence


class SplitProxy:
    """A TCP proxy on 127.0.0.1 that sends its n-th accepted connection to ``routes[n]`` (the last
    route for any further ones): lets one amqbench process talk to two brokers."""

    def __init__(self) -> None:
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.port = self.listener.getsockname()[1]
        self.routes: list[tuple[str, int]] = []
        self.accepted = 0
        self.sockets: list[socket.socket] = []
        self.lock = threading.Lock()
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def set_routes(self, routes: Sequence[tuple[str, int]]) -> None:
        with self.lock:
            self.routes = list(routes)
            self.accepted = 0

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            with self.lock:
                route = self.routes[min(self.accepted, len(self.routes) - 1)]
                self.accepted += 1
            try:
                upstream = socket.create_connection(route, timeout=5)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            for s in (client, upstream):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self.lock:
                self.sockets += [client, upstream]
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        buf = bytearray(1 << 18)
        view = memoryview(buf)
        try:
            while True:
                n = src.recv_into(buf)
                if not n:
                    break
                dst.sendall(view[:n])
        except OSError:
            pass
        for s in (src, dst):  # wakes the other direction's pump too
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        self.closed = True
        with self.lock:
            socks, self.sockets = self.sockets + [self.listener], []
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()
