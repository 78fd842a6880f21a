"""The sockets under the group's store: torch's ``TCPStore`` class, node 0's listening socket, and
the errors that mean the network, not the protocol, failed."""

from __future__ import annotations

import errno
import gc
import ipaddress
import os
import socket
from collections.abc import Collection
from datetime import timedelta
from typing import Any


def torch_store() -> Any | None:
    """torch's ``TCPStore`` class, or None in an image without torch.

    torch then lives as long as the agent: imported without collections (they would find next to
    no garbage, for a fifth of the import's CPU) and frozen, so that the agent's own collections
    never walk it again."""
    quiet = "TORCH_CPP_LOG_LEVEL" not in os.environ
    if quiet:  # c10d logs every retried connection with a C++ backtrace; our messages say what matters
        os.environ["TORCH_CPP_LOG_LEVEL"] = "FATAL"
    collecting = gc.isenabled()
    gc.disable()
    try:
        from torch.distributed import TCPStore
    except ImportError:
        return None
    finally:
        if quiet:  # read at import; the workers keep the user's own setting
            del os.environ["TORCH_CPP_LOG_LEVEL"]
        if collecting:
            gc.enable()
    gc.freeze()
    return TCPStore


def open_store(store_class: Any, host: str, port: int, timeout: float, *, serve: bool) -> tuple[Any, bool]:
    """A client of the store at ``host:port``; with ``serve`` also its server, in this process. And
    whether that server listens on every interface (``host`` is not an address of this machine)."""
    listen = listening_socket(host, port) if serve else None
    if listen is None:
        return store_class(host, port, None, serve, timedelta(seconds=timeout), wait_for_workers=False), serve
    fd = listen.detach()  # the store owns the socket from here on
    try:
        store = store_class(
            host, port, None, True, timedelta(seconds=timeout), wait_for_workers=False, master_listen_fd=fd
        )
    except BaseException:
        os.close(fd)
        raise
    return store, False


def fresh_store(store_class: Any, host: str, timeout: float, used: Collection[int]) -> tuple[Any, bool]:
    """A new store's server on ``host``, on a port the kernel picks that is none of ``used``, and
    whether it listens on every interface: a client that kept an earlier store's port reaches nothing."""
    held = []  # ports drawn again, kept open until a new one comes, so the kernel cannot hand them out twice
    while True:
        store, everywhere = open_store(store_class, host, 0, timeout, serve=True)
        if store.port not in used:
            return store, everywhere
        held.append(store)


def listening_socket(host: str, port: int) -> socket.socket | None:
    """A socket listening on ``host:port`` for the store's server; None where ``host`` is not an
    address of this machine (a service name, say), where the server must listen on every interface."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except OSError:
        return None
    loopback: bool = ipaddress.ip_address(str(address[0])).is_loopback
    if loopback and not names_loopback(host):
        return None  # a host name that /etc/hosts maps to 127.0.1.1 here: the other nodes resolve it elsewhere
    listen = socket.socket(family, kind, proto)
    try:
        listen.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listen.bind(address)
        listen.listen(socket.SOMAXCONN)
    except OSError as err:
        listen.close()
        if err.errno == errno.EADDRNOTAVAIL:
            return None
        raise ConnectionError(f"cannot listen on {host}:{port}: {err.strerror or err}") from None
    return listen


def names_loopback(host: str) -> bool:
    """Whether the endpoint itself says loopback (every node on this machine), not just resolves to it here."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def network_errors() -> tuple[type[BaseException], ...]:
    from torch.distributed import DistNetworkError

    return (DistNetworkError, ConnectionError)


def first_line(err: BaseException) -> str:
    return (str(err).strip().splitlines() or [type(err).__name__])[0]
