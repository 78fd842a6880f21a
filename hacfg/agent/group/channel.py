"""This node's reads and writes on the group's store: the one place that talks to it.

Every value is sealed by this node's :class:`~hacfg.agent.group.signing.Signer` on the way in and
checked on the way out; a value that fails its check, or cannot be parsed, is never returned: the
node stops its round, publishes ``abort`` and raises :class:`GroupRejected`. The keys themselves
are the protocol's (:mod:`hacfg.agent.group.protocol`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

from hacfg.agent.group import signing
from hacfg.agent.group.discovery import GroupSpec
from hacfg.agent.group.transport import first_line, network_errors, open_store

T = TypeVar("T")

ABORT_EVERY = 1.0  # seconds between looks at the abort key while waiting for another key


class GroupLost(Exception):
    """The group's store went away (node 0's agent stopped) and did not come back in time, or a
    node found a value it cannot trust."""


class GroupRejected(GroupLost):
    """This node read a value that failed its check (forged, stale or malformed): never acted on."""

    def __init__(self, key: str, reason: str):
        super().__init__(f"rejected the group store's {key!r}: {reason}; the group cannot be trusted")
        self.key = key
        self.reason = reason


class Channel:
    """Signed keys on the group's store, for one node."""

    def __init__(self, spec: GroupSpec, store_class: Any, echo: Callable[[str], None]):
        self.spec = spec
        self.store_class = store_class
        self.echo = echo
        self.signer: signing.Signer | None = None
        self.store: Any = None
        self.served: Any = None  # on node 0, the store whose server runs in this process
        self.said_exposed = False
        self.number = 0  # the round this node is in: a value it rejects ends that round
        self.looking: Callable[[Any], None] | None = None  # node 0's welcomes, on every look at the abort key

    def connect(self) -> None:
        """A client of the group's store; on node 0 also its server, listening on the endpoint's
        address only where that is an address of this machine."""
        store, everywhere = open_store(
            self.store_class, self.spec.host, self.spec.port, self.spec.timeout, serve=self.spec.leader
        )
        if everywhere and not self.said_exposed:
            self.said_exposed = True
            self.echo(
                f"[hacfg] the group's store listens on every interface, port {self.spec.port}: "
                f"{self.spec.host} is not an address of this machine, or names only its loopback"
            )
        if self.spec.leader:
            self.served = store
        self.store = store

    def close(self) -> None:
        self.store = self.served = None

    def put(self, key: str, number: int, value: Any, store: Any = None, signer: signing.Signer | None = None) -> None:
        signer = signer or self.signer
        assert signer is not None
        (store or self.store).set(key, signer.seal(key, number, value))

    def take(
        self,
        key: str,
        number: int | None,
        *,
        node: int | None = None,
        parse: Callable[[Any], T] = lambda value: value,
        store: Any = None,
        signer: signing.Signer | None = None,
    ) -> T:
        """The checked payload of ``key``, parsed; a value that fails its check is rejected."""
        signer = signer or self.signer
        assert signer is not None
        store = store or self.store
        try:
            signed_round, value = signer.open(key, store.get(key), number=number, node=node)
            if number is None:
                value = {"round": signed_round, "value": value}
        except signing.Rejected as err:
            raise self.reject(key, str(err), store) from None
        return self.parsed(key, lambda: parse(value), store)

    def parsed(self, key: str, parse: Callable[[], T], store: Any = None) -> T:
        try:
            return parse()
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as err:
            raise self.reject(key, f"malformed ({type(err).__name__}: {err})", store or self.store) from None

    def reject(self, key: str, reason: str, store: Any = None) -> GroupRejected:
        """Tell the group (stop the round, abort the job) and return the error to raise."""
        store = store or self.store
        rejected = GroupRejected(key, reason)
        with contextlib.suppress(*network_errors(), RuntimeError):
            if self.number:
                self.stop_round(store, self.number, self.spec.rank, str(rejected))
            self.put("abort", 0, {"rank": self.spec.rank, "reason": str(rejected)}, store)
        return rejected

    def stop_round(self, store: Any, number: int, rank: int, reason: str, *, hang: bool = False) -> None:
        """End round ``number`` on every node, unless a report already did (the first one is kept)."""
        assert self.signer is not None
        ended = {"rank": rank, "reason": reason, **({"hang": True} if hang else {})}
        store.compare_set(f"r{number}/stop", "", self.signer.seal(f"r{number}/stop", number, ended))

    def ended_by(self, number: int) -> int | None:
        """The node that ended round ``number`` first (the signed stop: the first report is kept), if any."""
        key = f"r{number}/stop"
        return self.take(key, number, parse=lambda ended: int(ended["rank"])) if self.store.check([key]) else None

    def check_abort(self, store: Any) -> None:
        """Leave once any node found a value it cannot trust (node 0 also welcomes new hellos here,
        as it looks at the store while it waits)."""
        if self.looking is not None:
            self.looking(store)
        if store.check(["abort"]):
            rank, reason = self.take(
                "abort", 0, parse=lambda found: (int(found["rank"]), str(found["reason"])), store=store
            )
            raise GroupLost(f"node {rank} {reason}")

    def wait(self, keys: list[str], seconds: float) -> bool:
        """Whether every key exists within ``seconds``; a lost store or an aborted group raises."""
        deadline = time.monotonic() + seconds
        while True:
            left = deadline - time.monotonic()
            try:
                self.store.wait(keys, timedelta(seconds=max(min(left, ABORT_EVERY), 0.001)))
            except network_errors():
                raise
            except RuntimeError:  # DistStoreError: the wait timed out
                self.check_abort(self.store)
                if left <= ABORT_EVERY:
                    return False
                continue
            return True

    def get(self, key: str, number: int, seconds: float) -> Any:
        """Node 0's value of ``key`` for round ``number``."""
        if not self.wait([key], seconds):
            raise GroupLost(f"no {key.split('/')[-1]} from node 0 within {seconds:g}s")
        return self.take(key, number, node=0)

    def missing(self, keys: list[str]) -> list[int]:
        """The nodes whose key among ``keys`` (each ending in its node's rank) is not there yet."""
        return [int(key.rsplit("/", 1)[1]) for key in keys if not self.store.check([key])]

    def unreachable(self, err: BaseException) -> GroupLost:
        return GroupLost(f"cannot reach the group's store at {self.spec.host}:{self.spec.port}: {first_line(err)}")
