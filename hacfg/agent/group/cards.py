"""The agents of one node under a per-card launch: one speaks for the node, the others follow it.

ModelArts' Ascend-Powered-Engine runs the boot command once per card: eight times on an eight-card
node, each with ``RANK_TABLE_FILE``, ``ASCEND_DEVICE_ID``, ``RANK_ID`` and ``RANK_SIZE``. So
``hacfg agent -- CMD`` starts once per card, and the node's agents agree, without a word, on the
one that speaks for the node: the agent of the node's lowest rank in the rank table. The speaker is
the node's agent as on any other launch (its state, its restart budgets, its place in the job's
group) and the supervisor of its own card's process; every other agent, a follower, supervises
its card's process only, under the speaker's plans and stops, and reports how it ended. A fault
on any card ends the round on every card of the job, and the job decides once: one restart, counted
once, in one state that one agent writes.

They talk over a Unix socket in the abstract namespace (the container's own), named after the
node's state folder, in lines of JSON:

============  ===================  ==========================================================
who           message              meaning
============  ===================  ==========================================================
follower      ``hello``            its card (place on the node), rank and PID, on connecting
speaker       ``plan``             a round's plan: start the card's process with its numbers
follower      ``hung``             the card's process hung (it is being stopped)
follower      ``ended``            how the card's process ended in the round
speaker       ``stop``             the round is over elsewhere: stop the card's process
speaker       ``verdict``          the round's verdict; a final one carries the exit code
============  ===================  ==========================================================

A connection from a process that carries an attempt's mark (``HACFG_AGENT_TREE``: a trainer or
anything it started) is refused on either end: what a card's process says about itself never
moves the job. A follower that loses its speaker stops its card and exits 138, as a node that
loses its group does; a speaker that loses a follower ends the round, and waits for the card's
agent to come back before the next.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import queue
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hacfg.agent.checkpoints import Resume
from hacfg.agent.classify import classify
from hacfg.agent.culprit.analysis import NodeEvidence
from hacfg.agent.culprit.straggler import Arrivals
from hacfg.agent.group.channel import GroupLost
from hacfg.agent.group.ranktable import Card
from hacfg.agent.process import leftovers
from hacfg.agent.records.state import NodeState
from hacfg.agent.rounds import Outcome, Plan, Rounds, Verdict
from hacfg.plugin.recovery import Failure
from hacfg.restart.policy import RETRY_ELSEWHERE
from hacfg.restart.vocabulary import Ending
from hacfg.scenario.source import InputError

MAX_LINE = 1 << 20  # bytes in one message: a card's tail is the largest
HELLO_TIMEOUT = 10.0  # seconds a new connection has to say who it is
REPORT_MARGIN = 15.0  # after a stop, a card's agent reports within its grace and this much more, or is gone
_PEER = struct.Struct("3i")  # struct ucred: pid, uid, gid


def address(state_dir: Path) -> str:
    """Where a node's agents meet: one name per state folder, in the container's abstract namespace."""
    return f"\0hacfg-cards-{leftovers.tree_mark(state_dir)}"


def card_folder(state_dir: Path, card: Card) -> Path:
    """A follower's own folder beside the node's state: its card's heartbeat and attempt record, no state."""
    return state_dir / f"card-{card.device}"


# -- the wire ----------------------------------------------------------------------------------------


def _send(sock: socket.socket, message: dict[str, Any]) -> bool:
    try:
        sock.sendall(json.dumps(message).encode() + b"\n")
    except OSError:
        return False
    return True


def _lines(sock: socket.socket) -> Iterator[dict[str, Any]]:
    """The messages on ``sock`` until it closes or says something that is not one."""
    with contextlib.suppress(OSError), sock.makefile("rb") as stream:
        while True:
            line = stream.readline(MAX_LINE)
            if not line.endswith(b"\n"):
                return  # closed, or a line too long to be ours
            try:
                message = json.loads(line)
            except ValueError:
                return
            if not isinstance(message, dict) or len(message) != 1:
                return
            yield message


def _distrust(sock: socket.socket) -> str | None:
    """Why the process at the other end is not an agent of this job's user, or None."""
    pid, uid, _ = _PEER.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEER.size))
    if uid != os.getuid():
        return f"process {pid} runs as user {uid}"
    if leftovers.in_attempt(pid):
        return f"process {pid} is part of a training attempt, not an agent"
    return None


# -- the speaker's end ---------------------------------------------------------------------------------


@dataclass
class _Link:
    sock: socket.socket
    pid: int


class Hub:
    """The speaker's end of the node: the other cards' agents, connected, and what they say."""

    def __init__(self, card: Card, state_dir: Path, echo: Callable[[str], None]):
        self.card = card
        self.echo = echo
        self.expected = {place: cards for place, cards in card.node_cards.items() if place != card.place}
        self.links: dict[int, _Link] = {}
        self.inbox: queue.Queue[tuple[int, dict[str, Any] | None]] = queue.Queue()
        self.changed = threading.Condition()
        self.closed = False
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.listener.bind(address(state_dir))
        except OSError as err:
            self.listener.close()
            raise InputError(
                f"{card.name()} cannot speak for node {card.server}'s cards: another agent does"
                f" ({err.strerror or err}); is RANK_ID {card.rank} given to two cards?"
            ) from None
        self.listener.listen(len(self.expected) + 4)
        threading.Thread(target=self._accept, daemon=True, name="hacfg-cards").start()

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._greet, args=(sock,), daemon=True, name="hacfg-card").start()

    def _greet(self, sock: socket.socket) -> None:
        """Take a follower in once it has said which card it is; refuse a stranger, or a second agent.
        Then pass on what it says until its connection closes."""
        sock.settimeout(HELLO_TIMEOUT)
        messages = _lines(sock)
        refused = _distrust(sock)
        hello = next(messages, {}).get("hello") if refused is None else None
        sock.settimeout(None)
        place = self._place(hello)
        if refused is None and place is None:
            refused = f"it is no other card of node {self.card.server}: {str(hello)[:200]}"
        with self.changed:
            if place is not None and refused is None and place in self.links:
                refused = f"{self.card.name(place)} already has an agent (pid {self.links[place].pid})"
            if place is not None and refused is None:
                pid = hello.get("pid") if isinstance(hello, dict) else None
                self.links[place] = _Link(sock, pid if isinstance(pid, int) else 0)
                self.changed.notify_all()
        if refused is not None or place is None:
            self.echo(f"[hacfg] refused a connection to node {self.card.server}'s speaker: {refused}")
            _send(sock, {"refused": refused})
            sock.close()
            return
        for message in messages:
            self.inbox.put((place, message))
        with self.changed:
            if place in self.links and self.links[place].sock is sock:
                del self.links[place]
                self.changed.notify_all()
        sock.close()
        if not self.closed:
            self.inbox.put((place, None))

    def _place(self, hello: Any) -> int | None:
        """The place of the card a hello names, if it is another card of this node, with its rank."""
        place = hello.get("place") if isinstance(hello, dict) else None
        if isinstance(place, int) and place in self.expected and hello.get("rank") == self.expected[place][0]:
            return place
        return None

    def gather(self, timeout: float) -> list[int]:
        """Wait up to ``timeout`` seconds for every other card's agent; the places still missing."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while (missing := sorted(set(self.expected) - set(self.links))) and not self.closed:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self.changed.wait(left)
        return missing

    def send_all(self, message: dict[str, Any]) -> None:
        with self.changed:
            links = list(self.links.values())
        for link in links:
            _send(link.sock, message)

    def close(self) -> None:
        self.closed = True
        self.listener.close()
        with self.changed:
            links, self.links = list(self.links.values()), {}
            self.changed.notify_all()
        for link in links:
            with contextlib.suppress(OSError):
                link.sock.shutdown(socket.SHUT_RDWR)
            link.sock.close()


@dataclass(frozen=True)
class CardEnd:
    """How one card's process ended in a round, as the node judges it."""

    place: int
    cause: Ending
    reason: str
    code: int
    peer: bool  # stopped because the round ended elsewhere: recorded, never the cause
    seq: int  # the order in which the speaker heard of it

    def fields(self, card: Card) -> dict[str, Any]:
        rank, device = card.node_cards[self.place]
        return {"card": device, "rank": rank, "cause": self.cause, "reason": self.reason, "exit_code": self.code}


def node_outcome(own: Outcome, own_seq: int, ends: Sequence[CardEnd], names: Mapping[int, str]) -> Outcome:
    """One outcome for the node from its cards': the speaker's own card's is ``own``, heard at ``own_seq``.
    A stop of an agent comes first; else the first failure heard that is not a consequence of
    another; else ``own`` (a consequence, or success when every card finished)."""
    if own.cause == Ending.STOPPED:
        return own
    stopped = next((end for end in ends if end.cause == Ending.STOPPED), None)
    if stopped is not None:
        return Outcome(own.rank, Ending.STOPPED, f"{names[stopped.place]}: {stopped.reason}", stopped.code)
    failures: list[tuple[int, CardEnd | None]] = [
        (end.seq, end) for end in ends if end.cause != Ending.SUCCESS and not end.peer
    ]
    if own.cause != Ending.SUCCESS and not own.peer:
        failures.append((own_seq, None))
    first = min(failures, key=lambda failure: failure[0])[1] if failures else None
    if first is None:
        return own
    return Outcome(own.rank, first.cause, f"{names[first.place]}: {first.reason}", first.code)


class CardRounds:
    """The speaker's rounds: those of the node's own :class:`Rounds` (alone, or in the job's group), run
    on every card of the node. The same calls as :class:`~hacfg.agent.rounds.SingleNodeRounds`."""

    def __init__(self, inner: Rounds, hub: Hub, *, timeout: float, grace: float):
        self.inner = inner
        self.hub = hub
        self.card = hub.card
        self.names = {place: self.card.name(place) for place in self.card.node_cards}
        self.timeout = timeout  # for a card's agent to (re)join
        self.grace = grace
        self.on_card_exit: Callable[[dict[str, Any]], object] = lambda fields: None  # the speaker's events log
        self.round = 0
        self.ends: dict[int, CardEnd] = {}
        self.seq = 0
        self.stop_own: Callable[[str], None] = lambda reason: None
        self.stopped_at: float | None = None  # when the node's cards were told to stop
        self.settled = threading.Condition()  # guards ends, seq, stopped_at
        self.watching = contextlib.ExitStack()  # the node's watch stays open until every card has ended
        self.collector: threading.Thread | None = None

    holds_memory = False  # the node's cards are its ranks, each started by an agent of its own

    def use_tier(self, tier: Path | None) -> None:
        pass

    def resume(self, plan: Plan) -> Resume:
        return self.inner.resume(plan)

    def recover(self, state: NodeState) -> Verdict | None:
        self._gather()
        verdict = self.inner.recover(state)
        if verdict is not None and verdict.exit_code is not None:
            self._tell(verdict)
        return verdict

    def begin(self, state: NodeState, precheck_failure: str | None = None) -> Plan | Verdict:
        self._gather()
        with contextlib.suppress(queue.Empty):
            while True:  # what the last round's cards said late, and agents that left before this round
                self.hub.inbox.get_nowait()
        start = self.inner.begin(state, precheck_failure)
        self.round = start.round
        if isinstance(start, Verdict):
            self._tell(start)
            return start
        with self.settled:
            self.ends, self.stopped_at, self.stop_own = {}, None, lambda reason: None
        self.collector = threading.Thread(target=self._collect, args=(start.round,), daemon=True, name="hacfg-cards")
        self.collector.start()
        self.hub.send_all({"plan": start.to_json()})
        return start

    def _gather(self) -> None:
        missing = self.hub.gather(self.timeout)
        if missing:
            names = ", ".join(self.names[place] for place in missing)
            raise GroupLost(
                f"node {self.card.server}: no agent for {names} within {self.timeout:g}s of a per-card launch"
            )

    @contextlib.contextmanager
    def watch(self, stop: Callable[[str], None], witness: Callable[[], NodeEvidence]) -> Iterator[None]:
        """While this card's process runs, and after it ended until every card's has: a failure on any
        card stops the others, and the job's other nodes through the node's own rounds."""
        with self.settled:
            self.stop_own = stop
            stopped = self.stopped_at is not None
        if stopped:
            stop(f"round {self.round} ended on another card of node {self.card.server}")
        self.watching.close()
        self.watching.enter_context(self.inner.watch(self._stop_cards, witness))
        yield

    def _stop_cards(self, reason: str) -> None:
        """End the round on every card of this node, the speaker's own included; any thread may call it."""
        with self.settled:
            first = self.stopped_at is None
            self.stopped_at = self.stopped_at or time.monotonic()
            stop_own = self.stop_own
        stop_own(reason)
        if first:
            self.hub.send_all({"stop": {"round": self.round, "reason": reason}})

    def _collect(self, number: int) -> None:
        """What the other cards say during round ``number``, until each has ended (or its agent is gone)."""
        while not self._all_ended() and number == self.round and not self.hub.closed:
            try:
                place, message = self.hub.inbox.get(timeout=0.2)
            except queue.Empty:
                continue
            end = self._read(place, message, number)
            if end is None:
                continue
            with self.settled:
                if place in self.ends:
                    continue
                self.seq += 1
                self.ends[place] = end = dataclasses.replace(end, seq=self.seq)
                self.settled.notify_all()
            if end.cause not in (Ending.SUCCESS, Ending.PEER):  # not one this node stopped
                self._stop_cards(f"round {number} ended by {self.names[place]}: {end.reason}")

    def _read(self, place: int, message: dict[str, Any] | None, number: int) -> CardEnd | None:
        """A card's end from its message; None for anything else (a late message of an earlier round)."""
        if message is None:
            return CardEnd(place, Ending.ENVIRONMENT, f"the agent of {self.names[place]} is gone", RETRY_ELSEWHERE,
                           False, 0)  # fmt: skip
        kind, body = next(iter(message.items()))
        if not isinstance(body, dict) or body.get("round") != number:
            return None
        if kind == "hung":
            self._stop_cards(f"round {number} ended by {self.names[place]}: hung")
            return None
        if kind != "ended":
            return None
        try:
            return ended(place, body)
        except (KeyError, TypeError, ValueError) as err:
            reason = f"the agent of {self.names[place]} sent an unreadable report ({type(err).__name__}: {err})"
            return CardEnd(place, Ending.ENVIRONMENT, reason, RETRY_ELSEWHERE, False, 0)

    def _all_ended(self) -> bool:
        with self.settled:
            return set(self.ends) >= set(self.hub.expected)

    def hung(self, witness: Callable[[], NodeEvidence]) -> None:
        """This card's process hung: the job's evidence first, then every card of the node stops."""
        self.inner.hung(witness)
        self._stop_cards(f"round {self.round} ended by {self.names[self.card.place]}: hung")

    def pace(self, node: int, arrivals: Arrivals) -> Sequence[tuple[int, Arrivals]] | None:
        return self.inner.pace(node, arrivals)

    def end(self, outcome: Outcome) -> Verdict:
        """Once every card of the node has ended: their one outcome, judged by the node's own rounds."""
        try:
            if outcome.cause != Ending.SUCCESS:
                self._stop_cards(f"round {self.round} ended by {self.names[self.card.place]}: {outcome.reason}")
            self._settle()
        finally:
            self.watching.close()
        with self.settled:
            self.seq += 1
            own_seq, ends = self.seq, sorted(self.ends.values(), key=lambda end: end.seq)
        for end in ends:
            if end.cause not in (Ending.SUCCESS, Ending.PEER):  # the others follow from the round's end
                self.on_card_exit({"round": self.round, **end.fields(self.card)})
        verdict = self.inner.end(node_outcome(outcome, own_seq, ends, self.names))
        self._tell(verdict)
        return verdict

    def _settle(self) -> None:
        """Wait until every other card has ended; once told to stop, a card's agent has its grace and a
        margin to say so, or counts as gone."""
        with self.settled:
            while not set(self.ends) >= set(self.hub.expected):
                if self.stopped_at is not None and time.monotonic() > self.stopped_at + self.grace + REPORT_MARGIN:
                    for place in sorted(set(self.hub.expected) - set(self.ends)):
                        self.seq += 1
                        reason = f"the agent of {self.names[place]} did not report how its card ended"
                        self.ends[place] = CardEnd(place, Ending.ENVIRONMENT, reason, RETRY_ELSEWHERE, False, self.seq)
                    break
                self.settled.wait(0.2)
        if self.collector is not None:
            self.collector.join(timeout=1)

    def _tell(self, verdict: Verdict) -> None:
        self.hub.send_all({"verdict": {"round": verdict.round, "exit_code": verdict.exit_code}})

    def close(self) -> None:
        self.watching.close()
        self.inner.close()
        self.hub.close()


def ended(place: int, body: dict[str, Any]) -> CardEnd:
    """A card's report, judged by the rules of any attempt's end (its ``seq`` is the speaker's to give)."""
    code, signum = body["exit_code"], body["signal"]
    if body["interrupted"] is not None:
        return CardEnd(place, Ending.STOPPED, "its agent was signalled", 128 + int(body["interrupted"]), False, 0)
    failure = Failure(
        None if code is None else int(code),
        None if signum is None else int(signum),
        tuple(str(line) for line in body["tail"]),
        body["hung"] is True,
    )
    if body["stopped"] is not None:
        return CardEnd(place, Ending.PEER, str(body["stopped"]), failure.code, True, 0)
    if failure.code == 0 and not failure.hung:
        return CardEnd(place, Ending.SUCCESS, "finished", 0, False, 0)
    if failure.hung:
        return CardEnd(place, Ending.HANG, f"hung ({failure.describe()})", failure.code, False, 0)
    verdict = classify(failure)
    return CardEnd(place, Ending(verdict.cause), verdict.reason, failure.code, verdict.peer, 0)


# -- a follower's end ----------------------------------------------------------------------------------


class Refused(Exception):
    """The speaker refused this agent (its card has an agent already, or it is no card of the node)."""


class Speaker:
    """A follower's line to its node's speaker: plans and verdicts in order; a ``stop`` goes straight to
    the round it is for, even one that has not started yet."""

    def __init__(self, card: Card, state_dir: Path, timeout: float):
        self.card = card
        self.sock = self._connect(address(state_dir), timeout)
        self.inbox: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.lock = threading.Lock()
        self.running: tuple[int, Callable[[str], None]] | None = None  # the round being run, and its stop
        self.stops: dict[int, str] = {}  # rounds the speaker ended, and why
        self.lost = False
        _send(self.sock, {"hello": {"place": card.place, "rank": card.rank, "pid": os.getpid()}})
        threading.Thread(target=self._read, daemon=True, name="hacfg-speaker").start()

    def _connect(self, where: str, timeout: float) -> socket.socket:
        deadline = time.monotonic() + timeout
        while True:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.connect(where)
            except OSError:
                sock.close()
                if time.monotonic() >= deadline:
                    raise GroupLost(
                        f"{self.card.name()}: no agent spoke for node {self.card.server} within {timeout:g}s"
                    ) from None
                time.sleep(0.1)
                continue
            distrust = _distrust(sock)
            if distrust is not None:
                sock.close()
                raise GroupLost(f"{self.card.name()}: the node's speaker is not to be trusted: {distrust}")
            return sock

    def _read(self) -> None:
        for message in _lines(self.sock):
            stop = message.get("stop")
            if not isinstance(stop, dict):
                self.inbox.put(message)
                continue
            with self.lock:
                self.stops[int(stop.get("round") or 0)] = reason = str(stop.get("reason"))
                running = self.running
            if running is not None and running[0] == stop.get("round"):
                running[1](reason)
        with self.lock:
            self.lost = True
            running = self.running
        if running is not None:
            running[1]("lost the node's speaker")
        self.inbox.put(None)

    def next(self) -> dict[str, Any] | None:
        """The speaker's next plan or verdict; None once it is gone."""
        message = self.inbox.get()
        if message is not None and "refused" in message:
            raise Refused(str(message["refused"]))
        return message

    @contextlib.contextmanager
    def running_round(self, number: int, stop: Callable[[str], None]) -> Iterator[None]:
        """While round ``number`` runs on this card: the speaker's stop for it calls ``stop``."""
        with self.lock:
            self.running = (number, stop)
            why = "lost the node's speaker" if self.lost else self.stops.get(number)
        if why is not None:
            stop(why)
        try:
            yield
        finally:
            with self.lock:
                self.running = None

    def send(self, kind: str, body: dict[str, Any]) -> None:
        _send(self.sock, {kind: body})

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
