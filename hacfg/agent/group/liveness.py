"""Whether every node's agent is still there while a round runs: each raises a signed count every
second (``r<N>/alive/<rank>``), and a node whose count stands still for :data:`KEEPALIVE_TIMEOUT`
is lost, as torchrun counts missed heartbeats. :class:`RoundWatch` keeps them while the workers
run, and sees the round end elsewhere."""

from __future__ import annotations

import contextlib
import functools
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

from hacfg.agent.culprit.analysis import NodeEvidence
from hacfg.agent.group import decisions
from hacfg.agent.group.channel import Channel, GroupLost
from hacfg.agent.group.testimony import Testimony
from hacfg.agent.group.transport import network_errors
from hacfg.agent.rounds import Outcome

POLL = 0.1  # seconds between keep-alives and looks at the group (a stop elsewhere is waited on, seen at once)

KEEPALIVE_EVERY = 1.0
KEEPALIVE_TIMEOUT = 15.0  # a node silent this long is lost (torchrun: 3 missed 5 s heartbeats)


class Liveness:
    """One node's keep-alives in one round, and what it has seen of the others'."""

    def __init__(self, channel: Channel, number: int):
        self.channel = channel
        self.number = number
        self.beats = 0
        self.next_beat = 0.0
        self.seen: dict[int, tuple[int, float]] = {}  # rank: (its count, when it last moved)

    def beat(self, store: Any, now: float) -> bool:
        """Send this node's keep-alive if one is due; whether one was."""
        if now < self.next_beat:
            return False
        self.next_beat = now + KEEPALIVE_EVERY
        self.beats += 1
        self.channel.put(f"r{self.number}/alive/{self.channel.spec.rank}", self.number, self.beats, store)
        return True

    def silent(self, store: Any, rank: int, now: float | None = None) -> bool:
        """Whether node ``rank``'s keep-alives have stood still for longer than the timeout."""
        now = time.monotonic() if now is None else now
        count = self._count(store, rank)
        last = self.seen.setdefault(rank, (count, now))
        if last[0] != count:
            self.seen[rank] = (count, now)
            return False
        return now - last[1] > KEEPALIVE_TIMEOUT

    def end_for_the_silent(self, store: Any, now: float) -> None:
        """Node 0 ends the round for a node whose agent went silent."""
        for rank in range(1, self.channel.spec.nnodes):
            if self.silent(store, rank, now):
                reason = f"node {rank} lost: its agent sent no keep-alive for {KEEPALIVE_TIMEOUT:g}s"
                self.channel.stop_round(store, self.number, rank, reason)

    def _count(self, store: Any, rank: int) -> int:
        """How many keep-alives node ``rank`` has sent in this round (0 before its first)."""
        key = f"r{self.number}/alive/{rank}"
        return self.channel.take(key, self.number, node=rank, parse=int, store=store) if store.check([key]) else 0


@contextlib.contextmanager
def keeping_alive(channel: Channel, number: int) -> Iterator[None]:
    """This node's keep-alives in round ``number`` while it does something long before its workers
    start (fetching its memory step back): node 0 would take its silence for a lost node."""
    done = threading.Event()
    try:
        store = channel.store.clone()  # a connection of its own: the main thread may call the store too
    except network_errors():
        yield  # the store is gone: the round fails without this node's keep-alives, as it would
        return

    def beat() -> None:
        liveness = Liveness(channel, number)
        with contextlib.suppress(*network_errors()):
            while not done.wait(POLL):
                liveness.beat(store, time.monotonic())

    beating = threading.Thread(target=beat, daemon=True, name="hacfg-keepalive")
    beating.start()
    try:
        yield
    finally:
        done.set()
        beating.join(timeout=5)


class RoundWatch:
    """While round ``number``'s workers run: this node's keep-alives, node 0's look at the others',
    and ``stop(reason)`` once the round ends elsewhere (after sending this node's evidence, when it
    ended by a hang) or the group is lost."""

    def __init__(
        self,
        channel: Channel,
        testimony: Testimony,
        number: int,
        stop: Callable[[str], None],
        witness: Callable[[], NodeEvidence],
    ):
        self.channel = channel
        self.testimony = testimony
        self.number = number
        self.stop = stop
        self.witness = witness
        self.lost: GroupLost | None = None  # what it found: the group cannot be trusted, or is gone

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        done = threading.Event()
        monitor = threading.Thread(target=self._watch, args=(done,), daemon=True, name="hacfg-group")
        monitor.start()
        try:
            yield
        finally:
            done.set()
            monitor.join(timeout=5)

    def _watch(self, done: threading.Event) -> None:
        channel, number, stop = self.channel, self.number, self.stop
        try:
            store = channel.store.clone()  # a connection of its own: the main thread may call the store too
        except network_errors():
            stop("lost the group's store")
            return
        stop_key = f"r{number}/stop"
        liveness = Liveness(channel, number)
        stopped = False
        while not (done.wait(POLL) if stopped else _until(store, stop_key, POLL, done)):
            try:
                now = time.monotonic()
                if liveness.beat(store, now):
                    channel.check_abort(store)
                    if channel.spec.leader and not stopped:
                        liveness.end_for_the_silent(store, now)
                if not stopped and store.check([stop_key]):
                    rank, reason, hang = channel.take(
                        stop_key,
                        number,
                        parse=lambda ended: (int(ended["rank"]), str(ended["reason"]), ended.get("hang") is True),
                        store=store,
                    )
                    stopped = True
                    if hang:
                        self.testimony.testify(store, number, self.witness)
                    if rank != channel.spec.rank:  # this node's own hang is being stopped already
                        stop(f"round {number} ended by node {rank}: {reason}")
            except GroupLost as err:
                self.lost = err
                if not stopped:
                    stop(str(err))
                return
            except network_errors():
                if not stopped:
                    stop("lost the group's store (node 0's agent stopped)")
                return


def _until(store: Any, key: str, seconds: float, done: threading.Event) -> bool:
    """Wait up to ``seconds`` for ``key`` (back at once when the round stops elsewhere, where a look
    every ``seconds`` would see it that much later); whether ``done`` is set by then."""
    with contextlib.suppress(RuntimeError):  # DistStoreError: not yet; a lost store raises at the next look
        store.wait([key], timedelta(seconds=seconds))
    return done.is_set()


def outcomes(channel: Channel, number: int, wait: float) -> list[Outcome]:
    """Every node's report of round ``number``, waited for up to ``wait`` seconds; a node that
    neither reports nor keeps alive is recorded as lost."""
    keys = [f"r{number}/out/{rank}" for rank in range(channel.spec.nnodes)]
    deadline = time.monotonic() + wait
    liveness = Liveness(channel, number)
    while not channel.store.check(keys) and time.monotonic() < deadline:
        channel.check_abort(channel.store)
        silent = [liveness.silent(channel.store, rank) for rank in channel.missing(keys)]  # each one's clock
        if silent and all(silent):
            break
        channel.wait(keys, POLL)  # returns as soon as the last report is in
    return [
        channel.take(key, number, node=rank, parse=functools.partial(decisions.outcome_of, rank))
        if channel.store.check([key])
        else decisions.unreported(rank, number)
        for rank, key in enumerate(keys)
    ]
