"""How a node and a store come to trust each other: node 0 draws the store's nonce, every other
node proves it is this store's, not one replayed from an earlier store.

A node other than 0 trusts a nonce only once node 0 has answered its own fresh challenge under it:
a ``nonce`` replayed from an earlier store is never answered, so nothing signed with it is read.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

from hacfg.agent.group.channel import Channel, GroupLost
from hacfg.agent.records.state import NodeState

POLL = 0.1  # seconds between looks at this node's welcome


class Handshake:
    def __init__(self, channel: Channel):
        self.channel = channel
        self.answered: dict[int, str] = {}  # on node 0, the challenge each node's welcome answers

    def greet(self, state: NodeState, deadline: float) -> bool:
        """A node other than 0 on (re)connecting: whether the store is a new one, in which case this
        node has said hello (with ``state``) and taken its nonce, once node 0 answered this node's
        fresh challenge."""
        channel, spec = self.channel, self.channel.spec
        assert channel.signer is not None
        if not channel.wait(["nonce"], deadline - time.monotonic()):
            raise GroupLost(f"node 0 opened no store at {spec.host}:{spec.port}")
        nonce = channel.take("nonce", 0, node=0, parse=str, signer=channel.signer.for_store(""))
        if nonce == channel.signer.store:
            return False
        channel.signer = channel.signer.for_store(nonce)
        challenge = secrets.token_hex(16)
        welcome = f"welcome/{spec.rank}"
        channel.put(f"hello/{spec.rank}", 0, {"state": state.to_json(), "challenge": challenge})
        while channel.wait([welcome], deadline - time.monotonic()):
            if channel.take(welcome, 0, node=0, parse=str) == challenge:
                return True
            time.sleep(POLL)  # the welcome of this node's previous agent: node 0 answers the new hello soon
        raise GroupLost(f"node 0 did not answer node {spec.rank}'s hello within {spec.timeout:g}s")

    def open(self, state: NodeState) -> list[NodeState]:
        """Node 0 on a new store: draw its nonce, say its own hello, and wait for every node's; the
        states they persisted, by rank."""
        channel, spec = self.channel, self.channel.spec
        assert channel.signer is not None
        nonce = secrets.token_hex(16)
        channel.put("nonce", 0, nonce, signer=channel.signer.for_store(""))  # what every other value is signed with
        channel.signer = channel.signer.for_store(nonce)
        self.answered = {}
        channel.put("hello/0", 0, {"state": state.to_json(), "challenge": ""})
        keys = [f"hello/{rank}" for rank in range(spec.nnodes)]
        if not channel.wait(keys, spec.timeout):
            raise GroupLost(f"nodes {channel.missing(keys)} did not join within {spec.timeout:g}s")
        hellos = [channel.take(key, 0, node=rank, parse=_state) for rank, key in enumerate(keys)]
        self.answer(channel.store)
        return hellos

    def answer(self, store: Any) -> None:
        """Node 0 welcomes each new hello with its challenge: the proof the node's nonce is this store's."""
        for rank in range(1, self.channel.spec.nnodes):
            key = f"hello/{rank}"
            if store.check([key]):
                challenge = self.channel.take(key, 0, node=rank, parse=_challenge, store=store)
                if self.answered.get(rank) != challenge:
                    self.channel.put(f"welcome/{rank}", 0, challenge, store)
                    self.answered[rank] = challenge


def _state(hello: Any) -> NodeState:
    return NodeState.from_json(hello["state"])


def _challenge(hello: Any) -> str:
    return str(hello["challenge"])
