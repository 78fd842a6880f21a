"""What the nodes tell each other about their ranks: a hang's evidence, sent before anything is
stopped so the verdict can name the culprit, and the stragglers' samples, which meet at node 0.
Both are advice: a value that fails its check is left out and said, never a reason to stop."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from hacfg.agent.culprit.analysis import NodeEvidence
from hacfg.agent.culprit.inquiry import DEADLINE
from hacfg.agent.culprit.straggler import Arrivals
from hacfg.agent.group import signing
from hacfg.agent.group.channel import Channel

POLL = 0.1  # seconds beyond the evidence deadline that a node waits for the others'


class Testimony:
    def __init__(self, channel: Channel):
        self.channel = channel
        self._testifying = threading.Lock()  # the monitor and the main thread may both be asked
        self._testified = 0  # the round whose hang this node sent evidence of
        self._pacing: tuple[int, Any] | None = None  # the round and the connection samples are shared on

    def testify(self, store: Any, number: int, witness: Callable[[], NodeEvidence]) -> None:
        """Send this node's evidence of round ``number``'s hang, once, whoever asks first; then wait
        (at most the evidence deadline) for every other node's. A node that stopped its workers
        sooner would end its peers' too (their collectives fail), before they could be asked; so
        would this node, were the second asker to go on to its stop while the first still asks."""
        with self._testifying:
            if self._testified == number:
                return
            self._testified = number
            spec = self.channel.spec
            self.channel.put(f"r{number}/evidence/{spec.rank}", number, witness().to_json(), store)
            keys = [f"r{number}/evidence/{rank}" for rank in range(spec.nnodes)]
            with contextlib.suppress(RuntimeError):  # DistStoreError: a node did not answer in time
                store.wait(keys, timedelta(seconds=DEADLINE + POLL))

    def evidence(self, number: int) -> tuple[list[NodeEvidence], list[str]]:
        """The nodes' evidence of a hang, as much as arrived in time; and what could not be used."""
        channel = self.channel
        keys = [f"r{number}/evidence/{rank}" for rank in range(channel.spec.nnodes)]
        channel.wait(keys, DEADLINE + POLL)
        found, refused = [], []
        assert channel.signer is not None
        for rank, key in enumerate(keys):
            if not channel.store.check([key]):
                continue
            try:
                _, value = channel.signer.open(key, channel.store.get(key), number=number, node=rank)
                found.append(NodeEvidence.from_json(value))
            except (signing.Rejected, KeyError, TypeError, ValueError) as err:
                refused.append(f"node {rank}'s evidence was refused ({err})")
        return found, refused

    def pace(self, number: int, arrivals: Arrivals) -> list[tuple[int, Arrivals]] | None:
        """Publish this node's sample of round ``number``; node 0 reads every node's newest. A
        sample that fails its check is left out, as a hang's evidence is."""
        channel = self.channel
        assert channel.signer is not None
        if self._pacing is None or self._pacing[0] != number:
            self._pacing = (number, channel.store.clone())  # a connection of its own: it runs in its own thread
        store = self._pacing[1]
        channel.put(f"r{number}/pace/{channel.spec.rank}", number, arrivals, store)
        if not channel.spec.leader:
            return None
        found: list[tuple[int, Arrivals]] = []
        for rank in range(channel.spec.nnodes):
            key = f"r{number}/pace/{rank}"
            if not store.check([key]):
                continue
            with contextlib.suppress(signing.Rejected, AttributeError, TypeError, ValueError):
                _, value = channel.signer.open(key, store.get(key), number=number, node=rank)
                arrivals = {int(r): [[str(g), int(q), int(ns)] for g, q, ns in entries] for r, entries in value.items()}
                found.append((rank, arrivals))
        return found
