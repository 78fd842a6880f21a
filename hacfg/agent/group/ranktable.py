"""The rank table (``RANK_TABLE_FILE``): the job's servers and their NPUs, as HCCL reads them.

The format is the CANN HCCL guide's ("rank table文件配置资源信息"): version ``1.0`` (a typical
cluster) and ``1.2`` (Atlas A3 SuperPoDs, which add ``super_device_id``, ``host_ip``, ports and a
``super_pod_list``). ``status`` is ``initializing`` while the platform is still writing it and
``completed`` once it can be used; each server has a ``server_id`` and a ``device`` list, each
device its physical ``device_id`` (the N of ``/dev/davinciN``) and a ``rank_id``: integers from 0,
unique in the job, each server's a block of its own (the guide refuses ``{0,1,2,7}`` beside
``{3,4,5,6}``). Values are strings in the guide's examples; integers are read too.

hacfg takes from it the number of servers (the job's nodes), and which server and card a per-card
launch's ``RANK_ID`` is (:mod:`hacfg.agent.group.cards`). A table that breaks these rules is refused
with the line and column of what is wrong.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hacfg.scenario.source import Document, InputError, LogicalPath, parse_json, read

ENV = "RANK_TABLE_FILE"
VERSIONS = ("1.0", "1.2")
COMPLETED, INITIALIZING = "completed", "initializing"
POLL = 1.0  # seconds between looks at a table still being written


class NotReady(Exception):
    """The table is still being written (``status: initializing``, or no file yet) when the wait ends."""


@dataclass(frozen=True)
class Server:
    """One server of the job (a node), its NPUs in rank order as (rank_id, device_id)."""

    server_id: str
    devices: tuple[tuple[int, int], ...]

    @property
    def ranks(self) -> tuple[int, ...]:
        return tuple(rank for rank, _ in self.devices)


@dataclass(frozen=True)
class RankTable:
    path: str
    version: str
    servers: tuple[Server, ...]

    @property
    def size(self) -> int:
        """The number of ranks (NPUs) in the job: what ``RANK_SIZE`` says."""
        return sum(len(server.devices) for server in self.servers)

    def server_of(self, rank: int) -> int | None:
        """The index of the server that holds ``rank``."""
        return next((index for index, server in enumerate(self.servers) if rank in server.ranks), None)


@dataclass(frozen=True)
class Card:
    """This agent's card under a per-card launch: its rank, its server, and its place on the server."""

    rank: int  # RANK_ID
    device: int  # the device_id the rank table gives the rank (the N of /dev/davinciN)
    server: int  # the index of its server in the rank table
    place: int  # its position among the server's cards, by rank: 0 speaks for the node
    table: RankTable

    @property
    def speaks(self) -> bool:
        return self.place == 0

    @property
    def node_cards(self) -> dict[int, tuple[int, int]]:
        """Every card of this card's server by place: (rank, device)."""
        return dict(enumerate(self.table.servers[self.server].devices))

    def name(self, place: int | None = None) -> str:
        rank, device = self.node_cards[self.place if place is None else place]
        return f"card {device} (rank {rank})"


def wait_for(
    path: Path, timeout: float, echo: Callable[[str], None], *, poll: float = POLL
) -> RankTable:
    """The table at ``path`` once it is complete: while it is missing or ``initializing``, wait (saying
    so once) up to ``timeout`` seconds, then raise :class:`NotReady`. A malformed table is an
    :class:`InputError` at once."""
    deadline = time.monotonic() + timeout
    said = False
    while True:
        table = read_table(path)
        if isinstance(table, RankTable):
            return table
        if time.monotonic() >= deadline:
            raise NotReady(f"{ENV} {path} is still {table} after {timeout:g}s")
        if not said:
            echo(f"[hacfg] {ENV} {path} is {table}: waiting up to {timeout:g}s for the platform to complete it")
            said = True
        time.sleep(poll)


def read_table(path: Path) -> RankTable | str:
    """The table at ``path``, or why it cannot be used yet (``missing``, ``initializing``)."""
    if not path.exists():
        return "missing"
    try:
        document = parse_json(read(path), str(path))
    except InputError as err:
        said = err.message.removeprefix("invalid JSON: ")
        raise InputError(f"rank table is not JSON: {said}" if said != err.message else f"rank table: {said}",
                         err.span, file=str(path)) from None  # fmt: skip
    status = _field(document, ("status",), str)
    if status == INITIALIZING:
        return INITIALIZING
    if status != COMPLETED:
        raise _error(document, ("status",), f"status {status!r}: expected {COMPLETED!r} or {INITIALIZING!r}")
    return _table(document)


def _table(document: Document) -> RankTable:
    version = _field(document, ("version",), str)
    if version not in VERSIONS:
        raise _error(document, ("version",), f"version {version!r}: hacfg reads rank tables {' and '.join(VERSIONS)}")
    listed = _field(document, ("server_list",), list)
    if not listed:
        raise _error(document, ("server_list",), "server_list is empty: the job has no server")
    servers = tuple(_server(document, index) for index in range(len(listed)))
    count = document.data.get("server_count")
    if count is not None or version == "1.0":  # optional from 1.2 on
        stated = _number(document, ("server_count",))
        if stated != len(servers):
            raise _error(document, ("server_count",), f"server_count {stated} but server_list has {len(servers)}")
    _unique(document, [("server_list", index, "server_id") for index in range(len(servers))], "server_id")
    ranks = [
        ("server_list", index, "device", position, "rank_id")
        for index, server in enumerate(servers)
        for position in range(len(server.devices))
    ]
    _unique(document, ranks, "rank_id")
    total = len(ranks)
    for at in ranks:
        if (rank := _number(document, at)) >= total:
            raise _error(document, at, f"rank_id {rank} is outside the job's ranks (0 to {total - 1})")
    for index, server in enumerate(servers):
        if list(server.ranks) != list(range(server.ranks[0], server.ranks[0] + len(server.ranks))):
            raise _error(
                document,
                ("server_list", index, "device"),
                f"server {server.server_id!r} has ranks {sorted(server.ranks)}: each server's ranks are one block",
            )
    return RankTable(document.path, version, servers)


def _server(document: Document, index: int) -> Server:
    at: LogicalPath = ("server_list", index)
    _field(document, at, dict)
    server_id = _field(document, (*at, "server_id"), str)
    listed = _field(document, (*at, "device"), list)
    if not listed:
        raise _error(document, (*at, "device"), f"server {server_id!r} has no device")
    devices = [
        (_number(document, (*at, "device", n, "rank_id")), _number(document, (*at, "device", n, "device_id")))
        for n in range(len(listed))
    ]
    _unique(document, [(*at, "device", n, "device_id") for n in range(len(listed))], "device_id")
    return Server(server_id, tuple(sorted(devices)))


def _field(document: Document, at: LogicalPath, kind: type) -> Any:
    parent = _lookup(document.data, at[:-1])
    if not isinstance(parent, Mapping) and not isinstance(at[-1], int):
        raise _error(document, at[:-1], "expected an object")
    value = _lookup(document.data, at)
    if value is None:
        raise _error(document, at, f"no {at[-1]}" if isinstance(at[-1], str) else "missing")
    if not isinstance(value, kind):
        names: dict[type, str] = {str: "a string", list: "a list", dict: "an object"}
        raise _error(document, at, f"{_name(at)} is {_json_type(value)}, expected {names[kind]}")
    return value


def _number(document: Document, at: LogicalPath) -> int:
    """A count or an ID: an integer from 0, written as a string (as the guide does) or a number."""
    value = _lookup(document.data, at)
    parent = _lookup(document.data, at[:-1])
    if not isinstance(parent, Mapping):
        raise _error(document, at[:-1], "expected an object")
    if value is None:
        raise _error(document, at, f"no {at[-1]}")
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, str) and value.isdigit() and value.isascii():
        return int(value)
    raise _error(document, at, f"{_name(at)} {value!r} is not an integer from 0")


def _unique(document: Document, paths: Sequence[LogicalPath], what: str) -> None:
    seen: dict[Any, LogicalPath] = {}
    for at in paths:
        value = _lookup(document.data, at)
        key = int(value) if what != "server_id" else value
        if key in seen:
            raise _error(document, at, f"{what} {value!r} appears twice")
        seen[key] = at


def _lookup(tree: Any, at: LogicalPath) -> Any:
    for key in at:
        if isinstance(tree, Mapping) and isinstance(key, str):
            tree = tree.get(key)
        elif isinstance(tree, list) and isinstance(key, int) and key < len(tree):
            tree = tree[key]
        else:
            return None
    return tree


def _name(at: LogicalPath) -> str:
    return str(at[-1]) if isinstance(at[-1], str) else "item"


def _json_type(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), "a number" if isinstance(value, int | float) else "null"
    )


def _error(document: Document, at: LogicalPath, message: str) -> InputError:
    return InputError(f"rank table: {message}", document.span(at))
