"""This node's part in its group's memory tiers: the copies it keeps of the previous node's steps,
the copies of its own it sends to the next node, and the step it resumes a round from.

Each node's agent receives the previous node's copies (:class:`~hacfg.agent.group.peer.Receiver`)
and sends its own to the next node (:class:`~hacfg.agent.group.peer.Sender`), around a ring. Only
the steps at the group's copy interval are sent, and every tier keeps the two newest of those
(:data:`hacfg.memory.COPY_POINTS`), so the step a lost node's copy holds is one every other node
still holds too: the one its peer keeps, or the one that was on its way. A keeper takes a copy only
of a step it holds itself, and pins it while it keeps the copy. Copies cost the training at most a
small share of its time, as measured (:class:`~hacfg.agent.group.peer.Ledger`): on a busy node the
sender skips copy points until the copies before are paid for. Among two nodes the copy's step
stays common (the keeper pins it); among more, a third node may have let it go by then, and a lost
node's round then resumes from disk. Each node tells the leader in its join what it holds
(:meth:`PeerCopies.holdings`); the leader picks the step (:func:`~hacfg.agent.group.decisions.memory_plan`),
and a node whose tier lacks it fetches it back from the node keeping its copy before its workers
start (:meth:`PeerCopies.resume`).
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hacfg import memory
from hacfg.agent.checkpoints import Resume
from hacfg.agent.group import peer
from hacfg.agent.group.discovery import GroupSpec
from hacfg.agent.rounds import MemoryPlan

# Seconds between the sender's looks for a newer step to copy: a copy point must go out before the
# tier keeps two newer ones, so each look is far quicker than the copy interval's steps.
LOOK_EVERY = 0.2
# A tier holds its newest step, two copy points and a pinned one; its trainer can make more folders,
# and a join says no more than this many, newest first.
HELD_SAID = 8


class PeerCopies:
    """A node's receiver of the previous node's copies and sender of its own to the next node."""

    def __init__(
        self,
        tier: Path,
        key: bytes,
        spec: GroupSpec,
        job: str,
        copy_every: int,
        copy_share: float,
        echo: Callable[[str], None],
    ):
        self.tier, self.key, self.spec, self.job, self.copy_every, self.echo = tier, key, spec, job, copy_every, echo
        self.ledger = peer.Ledger(copy_share)  # what the copies cost the training, paced to their share
        host = reachable_host(spec)
        self.receiver = peer.Receiver(tier, key, spec.rank, job=job, host=host, keeps_own=True, echo=echo)
        self.sender: peer.Sender | None = None
        self.unfetched: set[int] = set()  # steps whose copy this node failed to fetch back: never planned again

    @property
    def next_node(self) -> int:
        return (self.spec.rank + 1) % self.spec.nnodes

    def holdings(self) -> dict[str, Any]:
        """What this node's join tells the leader: its tier's complete steps, the step of each node
        whose copy it keeps, and where its receiver listens. Call it with no save in flight: what
        saves killed midway left is removed first."""
        memory.tidy(self.tier, self.copy_every)
        copies = {str(owner): step for owner, step in self.receiver.copies().items() if owner < self.spec.nnodes}
        return {
            "steps": memory.held(self.tier)[:HELD_SAID],
            "copies": copies,
            "address": list(self.receiver.address),
            "unfetched": sorted(self.unfetched),
        }

    def resume(self, plan: MemoryPlan) -> Resume | None:
        """The round's step in this node's tier, fetched back from the node keeping its copy first
        when the plan says so; None when the round resumes from disk. Aims the sender at the next
        node's receiver (a restarted node listens on another port)."""
        self._aim(plan)
        if plan.step is None:
            return None
        fetching = self.spec.rank in plan.fetch
        why = self._fetch(plan) if fetching else None
        folder = memory.step_folder(self.tier, plan.step)
        tier = "peer" if fetching else "memory"
        if why is None and not memory.complete(folder):
            why = f"node {self.next_node} holds no copy of it" if fetching else "this node's tier does not hold it"
        if why is None:
            return Resume(str(folder), (plan.step,), tier)
        if fetching:
            self.unfetched.add(plan.step)
        return Resume(None, (plan.step,), tier, missing=f"cannot resume memory step {plan.step} of the job: {why}")

    def _fetch(self, plan: MemoryPlan) -> str | None:
        """Fetch this node's copy back from the next node; why it failed, or None."""
        keeper = self.next_node
        address = plan.peers[keeper]
        if address is None:
            return f"node {keeper} has no receiver of peer copies"
        try:
            peer.fetch(self.tier, address, self.key, peer.Ends(self.job, self.spec.rank, keeper))
        except (peer.Refused, OSError) as err:
            return f"its copy could not be fetched from node {keeper}: {err}"
        return None

    def _aim(self, plan: MemoryPlan) -> None:
        address = plan.peers[self.next_node]  # one per node: the plan was refused otherwise
        if address is None or self.next_node == self.spec.rank:
            return
        if self.sender is None:
            ends = peer.Ends(self.job, self.spec.rank, self.next_node)
            self.sender = peer.Sender(
                self.tier, address, self.key, ends, every=plan.copy_every, interval=LOOK_EVERY, ledger=self.ledger,
                echo=self.echo,
            )
        self.sender.address = address

    def close(self) -> None:
        if self.sender is not None:
            self.sender.close()
        self.receiver.close()


def reachable_host(spec: GroupSpec) -> str:
    """This node's address on the route to the group's store: the one the other nodes reach it by."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((spec.host, spec.port))  # no packet: a UDP connect only picks the route
        return str(probe.getsockname()[0])
