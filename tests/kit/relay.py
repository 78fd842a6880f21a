"""A TCP relay on loopback between one client and a server, to stand for the network between two
nodes: it records what the client sends, and can flip one of its bytes, hold it at a point until
released, or cut the link."""

from __future__ import annotations

import contextlib
import socket
import threading


class Relay:
    """Relays one connection to ``target``. ``flip_at``: the client's byte at this offset reaches
    the server inverted; ``hold_after``: after this many of the client's bytes, nothing more is read
    from the client until :meth:`release` (``holding`` is set then)."""

    def __init__(self, target: tuple[str, int], *, flip_at: int | None = None, hold_after: int | None = None):
        self.target, self.flip_at, self.hold_after = target, flip_at, hold_after
        self.recorded = bytearray()
        self.holding = threading.Event()
        self._released = threading.Event()
        self._listen = socket.create_server(("127.0.0.1", 0))
        self.address: tuple[str, int] = self._listen.getsockname()[:2]
        self._links: list[socket.socket] = []
        self._threads = [threading.Thread(target=self._run, daemon=True)]
        self._threads[0].start()

    def release(self) -> None:
        self._released.set()

    def cut(self) -> None:
        """The link goes down: both ends see it closed."""
        self._released.set()
        for link in self._links:
            with contextlib.suppress(OSError):
                link.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.cut()
        self._listen.close()
        for thread in self._threads:
            thread.join(timeout=30)

    def __enter__(self) -> Relay:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _run(self) -> None:
        client, _ = self._listen.accept()
        server = socket.create_connection(self.target)
        self._links += [client, server]
        back = threading.Thread(target=self._pump, args=(server, client, False), daemon=True)
        self._threads.append(back)
        back.start()
        self._pump(client, server, True)
        back.join()
        client.close()
        server.close()

    def _pump(self, source: socket.socket, sink: socket.socket, from_client: bool) -> None:
        while True:
            want = 1 << 16
            if from_client and self.hold_after is not None and not self._released.is_set():
                want = min(want, self.hold_after - len(self.recorded))
                if want == 0:
                    self.holding.set()
                    self._released.wait()
                    continue
            try:
                data = bytearray(source.recv(want))
            except OSError:
                data = bytearray()
            if from_client:
                at = len(self.recorded)
                if self.flip_at is not None and at <= self.flip_at < at + len(data):
                    data[self.flip_at - at] ^= 0xFF
                self.recorded += data
            try:
                if not data:
                    sink.shutdown(socket.SHUT_WR)
                    return
                sink.sendall(data)
            except OSError:
                return
