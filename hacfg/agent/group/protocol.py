"""The agents of one job as one group, through torch's c10d ``TCPStore`` hosted by node 0's agent.

Node 0's agent is the leader: it plans every round and judges it, the others follow, so a job has
one resume checkpoint, one set of counters and one verdict per round. Keys in the store:

==================  ==========================================================================
``nonce``           the leader, on opening the store: the nonce every other value is signed with
``hello/<rank>``    each agent, on connecting: the state it persisted (merged after a restart),
                    and a challenge of its own
``welcome/<rank>``  the leader: node rank's challenge, answered (this store's nonce is not a replay)
``ready``           the leader, once every node said hello
``current``         the round the leader is in
``r<N>/join/<r>``   node r is ready for round N: its workers of round N-1 are stopped
``r<N>/plan``       the leader: attempt, counters and resume checkpoint, or a final verdict
``r<N>/stop``       anyone: round N is over, stop your workers (the first failure seen, and
                    so the round's cause); for a hang, every node first sends its evidence
``r<N>/evidence/<r>``  node r's evidence of a hang: its ranks' states, stacks and collectives
``r<N>/pace/<r>``   node r's newest sample of when its ranks reached their collectives (stragglers)
``r<N>/out/<r>``    how node r's workers ended
``r<N>/decision``   the leader: the round's verdict
``r<N>/ack/<r>``    node r read a final verdict (the leader keeps the store up until then)
``r<N>/alive/<r>``  node r's keep-alive while round N runs: a count it raises every second
``abort``           anyone: a value failed its check, so the group cannot be trusted (exit 138)
==================  ==========================================================================

Every value is signed with the job's secret (:mod:`hacfg.agent.group.signing`), for this job and
this store's nonce, and checked before use: plans, decisions, ``ready`` and ``current`` only from
node 0, a node's own keys only from that node, each for the round it is read in. A value that fails
its check is never acted on: the node stops its workers, publishes ``abort`` and leaves with exit
138, and the others do the same within a second. The store's own counters (``add``) are never used:
a counter cannot be signed, so nothing the group decides rests on one.

A node other than 0 trusts a nonce only once node 0 has answered its own fresh challenge under it:
a ``nonce`` replayed from an earlier store is never answered, so nothing signed with it is read.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

from hacfg.agent.checkpoints import within
from hacfg.agent.culprit.analysis import NodeEvidence
from hacfg.agent.culprit.inquiry import DEADLINE
from hacfg.agent.culprit.straggler import Arrivals
from hacfg.agent.group import rendezvous, signing
from hacfg.agent.group.discovery import GroupSpec
from hacfg.agent.group.transport import first_line, fresh_store, network_errors, open_store
from hacfg.agent.records.state import NodeState
from hacfg.agent.rounds import Outcome, Plan, Verdict, plan_round, precheck_verdict, verdict_for, with_culprit
from hacfg.restart.policy import RETRY_ELSEWHERE, Policy
from hacfg.restart.vocabulary import Action, Ending

T = TypeVar("T")

POLL = 0.1  # seconds between looks at the round's stop key: how fast a failure elsewhere is seen
KEEPALIVE_EVERY = 1.0
KEEPALIVE_TIMEOUT = 15.0  # a node silent this long is lost (torchrun: 3 missed 5 s heartbeats)
ACK_TIMEOUT = 30.0
ABORT_EVERY = 1.0  # seconds between looks at the abort key while waiting for another key
ABORT_LINGER = 3 * ABORT_EVERY  # the leader keeps an aborted store up this long, so every node reads why


class GroupLost(Exception):
    """The group's store went away (node 0's agent stopped) and did not come back in time, or a
    node found a value it cannot trust."""


class GroupRejected(GroupLost):
    """This node read a value that failed its check (forged, stale or malformed): never acted on."""

    def __init__(self, key: str, reason: str):
        super().__init__(f"rejected the group store's {key!r}: {reason}; the group cannot be trusted")
        self.key = key
        self.reason = reason


class GroupRounds:
    """This node's view of the group; the same calls as :class:`hacfg.agent.rounds.SingleNodeRounds`."""

    def __init__(
        self,
        spec: GroupSpec,
        policy: Policy,
        store_class: Any,
        *,
        echo: Callable[[str], None],
        secret: signing.JobSecret,
        workers_store: str | None = None,
    ):
        self.spec = spec
        self.policy = policy
        self.store_class = store_class
        self.echo = echo
        self.secret = secret  # the job's, on node 0's state folder unless the platform gives one
        self.signer: signing.Signer | None = None
        self.store: Any = None
        self.served: Any = None  # on node 0, the store whose server runs in this process
        self.workers_store = workers_store  # on node 0, the host where it serves the workers' store (rendezvous.py)
        self.workers_served: Any = None  # on node 0, this round's store for the workers
        self.workers_ports: set[int] = set()  # on node 0, the ports its workers' stores had: never one again
        self.answered: dict[int, str] = {}  # on node 0, the challenge each node's welcome answers
        self.plan: Plan | None = None
        self.state = NodeState()
        self.number = 0  # the round this node is in
        self.lost: GroupLost | None = None  # what the monitor found while the workers ran
        self.said_exposed = False
        self._testifying = threading.Lock()  # the monitor and the main thread may both be asked
        self._testified = 0  # the round whose hang this node sent evidence of
        self._pacing: tuple[int, Any] | None = None  # the round and the connection samples are shared on

    # -- connecting ---------------------------------------------------------------------------

    def recover(self, state: NodeState) -> Verdict | None:
        """Join the group; the verdict of a round this node was part of and has not applied, if any."""
        self.state = state
        try:
            secret = self.secret.value()
        except signing.NoSecret as err:
            raise GroupLost(str(err)) from None
        self.signer = signing.Signer(secret, self.spec.rank, self.secret.job or "")
        self._connect()
        return self._catch_up()

    def _connect(self) -> None:
        deadline = time.monotonic() + self.spec.timeout
        while True:
            try:
                self.store = self._store()
                if self.spec.leader:
                    self._open()
                elif not self._greet(deadline):
                    return  # the same store as before: nothing to say again
                if self._wait(["ready"], deadline - time.monotonic()):
                    self._take("ready", 0, node=0)
                return
            except network_errors() as err:
                if time.monotonic() >= deadline:
                    raise GroupLost(
                        f"cannot reach the group's store at {self.spec.host}:{self.spec.port}: {first_line(err)}"
                    ) from None
                time.sleep(0.5)

    def _store(self) -> Any:
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
        return store

    def _reconnect(self, err: BaseException) -> None:
        self.echo(
            f"[hacfg] lost the group's store ({first_line(err)}); reconnecting to {self.spec.host}:{self.spec.port}"
        )
        if self.served is not None:  # node 0 serves the store itself: a new connection, never a new store
            self.store = self.served.clone()
            return
        self.store = None
        self._connect()

    def _greet(self, deadline: float) -> bool:
        """A node other than 0 on (re)connecting: whether the store is a new one, in which case this
        node has said hello and taken its nonce, once node 0 answered this node's fresh challenge."""
        assert self.signer is not None
        if not self._wait(["nonce"], deadline - time.monotonic()):
            raise GroupLost(f"node 0 opened no store at {self.spec.host}:{self.spec.port}")
        nonce = self._take("nonce", 0, node=0, parse=str, signer=self.signer.for_store(""))
        if nonce == self.signer.store:
            return False
        self.signer = self.signer.for_store(nonce)
        challenge = secrets.token_hex(16)
        welcome = f"welcome/{self.spec.rank}"
        self._put(f"hello/{self.spec.rank}", 0, {"state": self.state.to_json(), "challenge": challenge})
        while self._wait([welcome], deadline - time.monotonic()):
            if self._take(welcome, 0, node=0, parse=str) == challenge:
                return True
            time.sleep(POLL)  # the welcome of this node's previous agent: node 0 answers the new hello soon
        raise GroupLost(f"node 0 did not answer node {self.spec.rank}'s hello within {self.spec.timeout:g}s")

    def _answer(self, store: Any) -> None:
        """Node 0 welcomes each new hello with its challenge: the proof the node's nonce is this store's."""
        for rank in range(1, self.spec.nnodes):
            key = f"hello/{rank}"
            if store.check([key]):
                challenge = self._take(key, 0, node=rank, parse=_challenge, store=store)
                if self.answered.get(rank) != challenge:
                    self._put(f"welcome/{rank}", 0, challenge, store)
                    self.answered[rank] = challenge

    def _open(self) -> None:
        """The leader on a new store: draw its nonce, wait for every node, merge what they persisted,
        and judge a round that the store's restart interrupted."""
        assert self.signer is not None
        nonce = secrets.token_hex(16)
        self._put("nonce", 0, nonce, signer=self.signer.for_store(""))  # what every other value is signed with
        self.signer = self.signer.for_store(nonce)
        self.answered = {}
        self._put("hello/0", 0, {"state": self.state.to_json(), "challenge": ""})
        keys = [f"hello/{rank}" for rank in range(self.spec.nnodes)]
        if not self._wait(keys, self.spec.timeout):
            raise GroupLost(f"nodes {self._missing(keys)} did not join within {self.spec.timeout:g}s")
        hellos = [self._take(key, 0, node=rank, parse=_state) for rank, key in enumerate(keys)]
        self._answer(self.store)
        newest = max(hellos, key=lambda s: s.round)
        self.state = NodeState(newest.budgets, newest.round, self.state.running and self.state.round == newest.round)
        interrupted = [rank for rank, s in enumerate(hellos) if s.running and s.round == newest.round]
        current = newest.round if interrupted else newest.round + 1
        self._put("current", current, current)
        if interrupted:
            rank = interrupted[0]
            plan = Plan(round=newest.round, budgets=newest.budgets, resume_position=self._newest_position())
            reason = f"the agent of node {rank} stopped during round {newest.round} (the group's store restarted)"
            verdict = verdict_for(plan, [Outcome(rank, Ending.ENVIRONMENT, reason, RETRY_ELSEWHERE)], self.policy)
            self._put(f"r{newest.round}/decision", newest.round, verdict.to_json())
        self._put("ready", 0, 1)

    def _catch_up(self) -> Verdict | None:
        """Line this node's state up with the group's current round after (re)connecting."""
        current = self._take("current", None, node=0, parse=_round_number)
        prefix = f"r{current}"
        if self.store.check([f"{prefix}/decision"]):
            verdict = self._decision(current)
            was_in_it = self.state.running and self.state.round == current
            self.state = NodeState(verdict.budgets, current, running=False)
            return verdict if was_in_it else None
        if self.store.check([f"{prefix}/plan"]) and not self.store.check([f"{prefix}/out/{self.spec.rank}"]):
            # this node was in the round and lost its workers with its agent
            self.number = current
            self.plan = self._plan(current, self._take(f"{prefix}/plan", current, node=0))
            self.state.round = current
            reason = f"the agent of node {self.spec.rank} restarted during round {current}"
            return self.end(Outcome(self.spec.rank, Ending.ENVIRONMENT, reason, RETRY_ELSEWHERE))
        self.state.round = max(current - 1, 0)
        return None

    # -- a round --------------------------------------------------------------------------------

    def begin(self, state: NodeState, precheck_failure: str | None = None) -> Plan | Verdict:
        """Join the next round; the leader plans it once every node is ready. The group's own view
        of the state (kept in step with every verdict) decides, not this node's ``state``."""
        while True:
            try:
                return self._begin(precheck_failure)
            except network_errors() as err:
                self._reconnect(err)
                self._catch_up()

    def _begin(self, precheck_failure: str | None) -> Plan | Verdict:
        number = self.number = self.state.round + 1
        prefix = f"r{number}"
        if self.spec.leader:
            self._put("current", number, number)
        self._put(f"{prefix}/join/{self.spec.rank}", number, {"precheck": precheck_failure})
        if self.spec.leader:
            published = self._lead(number, self.state)
        else:
            published = self._get(f"{prefix}/plan", number, self.spec.timeout + 30)
        self.state.round = number
        if isinstance(published, dict) and "verdict" in published:
            verdict = self._parsed(f"{prefix}/plan", lambda: _verdict(number, published["verdict"]))
            self._acknowledge(verdict)
            return verdict
        self.plan = self._plan(number, published)
        self.state = NodeState(self.plan.budgets, number, running=True)
        return self.plan

    def _lead(self, number: int, state: NodeState) -> Any:
        keys = [f"r{number}/join/{rank}" for rank in range(self.spec.nnodes)]
        if not self._wait(keys, self.spec.timeout):
            reason = f"nodes {self._missing(keys)} did not join round {number} within {self.spec.timeout:g}s"
            verdict = Verdict(
                round=number,
                cause=Ending.ENVIRONMENT,
                reason=reason,
                rank=0,
                action=Action.JOB_RESCHEDULE,
                detail="the job cannot form: retry elsewhere",
                budgets=state.budgets,
                exit_code=RETRY_ELSEWHERE,
            )
            return self._publish_final(number, verdict)
        for rank, key in enumerate(keys):
            failure = self._take(key, number, node=rank, parse=lambda join: join["precheck"])
            if failure:
                return self._publish_final(
                    number, precheck_verdict(number, state.budgets, self.policy, f"node {rank}: {failure}", rank)
                )
        plan = plan_round(number, state.budgets, self.policy)
        if self.workers_store is not None:
            plan = dataclasses.replace(plan, workers_port=self._serve_workers())
        self._put(f"r{number}/plan", number, plan.to_json())
        return plan.to_json()

    def _serve_workers(self) -> int | None:
        """A fresh store for this round's workers, once every node has stopped the last round's, on
        a port no earlier round's store had: the last round's keys and connections go with its store,
        and a worker of an earlier round finds nothing on the port it knows. Its port; None when no
        store can be served."""
        assert self.workers_store is not None
        host = self.workers_store
        starting = self.workers_served is None
        self.workers_served = None  # closes the last round's server
        try:
            self.workers_served, everywhere = fresh_store(self.store_class, host, self.spec.timeout, self.workers_ports)
        except (ConnectionError, RuntimeError) as err:  # torch's store errors are RuntimeErrors
            self.echo(f"[hacfg] cannot serve the workers' store on {host} ({first_line(err)}); rank 0 hosts it")
            return None
        port: int = self.workers_served.port
        self.workers_ports.add(port)
        if starting:
            self.echo(
                f"[hacfg] the workers' store is served here on {host}, on a new port each round"
                + (" (every interface)" if everywhere else "")
                + f"; {rendezvous.OFF}=1 leaves it to rank 0's worker on MASTER_PORT"
            )
        return port

    def _publish_final(self, number: int, verdict: Verdict) -> dict[str, Any]:
        published = {"verdict": verdict.to_json()}
        self._put(f"r{number}/decision", number, verdict.to_json())
        self._put(f"r{number}/plan", number, published)
        return published

    def _plan(self, number: int, published: Any) -> Plan:
        """The leader's plan for round ``number``; one resuming from outside ``checkpoint.path`` is refused."""
        key = f"r{number}/plan"
        plan = self._parsed(key, lambda: Plan.from_json(published))
        if plan.round != number:
            raise self._reject(key, f"stale: a plan for round {plan.round}")
        if plan.resume_from is not None and not within(Path(plan.resume_from), self.policy.checkpoint_path):
            outside = f"it resumes from {plan.resume_from}, outside checkpoint.path {self.policy.checkpoint_path}"
            raise self._reject(key, outside)
        return plan

    @contextlib.contextmanager
    def watch(self, stop: Callable[[str], None], witness: Callable[[], NodeEvidence]) -> Iterator[None]:
        """While the workers run: call ``stop(reason)`` once the round ends elsewhere (or the group is
        lost); when it ended by a hang, send this node's evidence (``witness()``) first."""
        assert self.plan is not None
        self.lost = None
        done = threading.Event()
        monitor = threading.Thread(
            target=self._monitor, args=(self.plan.round, stop, witness, done), daemon=True, name="hacfg-group"
        )
        monitor.start()
        try:
            yield
        finally:
            done.set()
            monitor.join(timeout=5)

    def hung(self, witness: Callable[[], NodeEvidence]) -> None:
        """This node's workers hung: end the round as a hang, so every node sends its evidence before
        stopping anything, and send this node's."""
        assert self.plan is not None
        number = self.plan.round
        try:
            self._stop_round(self.store, number, self.spec.rank, "hang", hang=True)
            self._testify(self.store, number, witness)
        except network_errors():
            pass  # the store is gone: the round ends without the group's evidence, as it would have

    def _testify(self, store: Any, number: int, witness: Callable[[], NodeEvidence]) -> None:
        """Send this node's evidence of round ``number``'s hang, once, whoever asks first; then wait
        (at most the evidence deadline) for every other node's. A node that stopped its workers
        sooner would end its peers' too (their collectives fail), before they could be asked; so
        would this node, were the second asker to go on to its stop while the first still asks."""
        with self._testifying:
            if self._testified == number:
                return
            self._testified = number
            self._put(f"r{number}/evidence/{self.spec.rank}", number, witness().to_json(), store)
            keys = [f"r{number}/evidence/{rank}" for rank in range(self.spec.nnodes)]
            with contextlib.suppress(RuntimeError):  # DistStoreError: a node did not answer in time
                store.wait(keys, timedelta(seconds=DEADLINE + POLL))

    def pace(self, node: int, arrivals: Arrivals) -> list[tuple[int, Arrivals]] | None:
        """Publish this node's sample; node 0 reads every node's newest. A sample that fails its
        check is left out, as a hang's evidence is: pacing is advice, never a reason to stop."""
        assert self.plan is not None and self.signer is not None
        number = self.plan.round
        if self._pacing is None or self._pacing[0] != number:
            self._pacing = (number, self.store.clone())  # a connection of its own: it runs in its own thread
        store = self._pacing[1]
        self._put(f"r{number}/pace/{self.spec.rank}", number, arrivals, store)
        if not self.spec.leader:
            return None
        found: list[tuple[int, Arrivals]] = []
        for rank in range(self.spec.nnodes):
            key = f"r{number}/pace/{rank}"
            if not store.check([key]):
                continue
            with contextlib.suppress(signing.Rejected, AttributeError, TypeError, ValueError):
                _, value = self.signer.open(key, store.get(key), number=number, node=rank)
                arrivals = {int(r): [[str(g), int(q), int(ns)] for g, q, ns in entries] for r, entries in value.items()}
                found.append((rank, arrivals))
        return found

    def _evidence(self, number: int) -> tuple[list[NodeEvidence], list[str]]:
        """The nodes' evidence of a hang, as much as arrived in time; and what could not be used."""
        keys = [f"r{number}/evidence/{rank}" for rank in range(self.spec.nnodes)]
        self._wait(keys, DEADLINE + POLL)
        found, refused = [], []
        assert self.signer is not None
        for rank, key in enumerate(keys):
            if not self.store.check([key]):
                continue
            try:
                _, value = self.signer.open(key, self.store.get(key), number=number, node=rank)
                found.append(NodeEvidence.from_json(value))
            except (signing.Rejected, KeyError, TypeError, ValueError) as err:
                refused.append(f"node {rank}'s evidence was refused ({err})")
        return found, refused

    def _monitor(
        self, number: int, stop: Callable[[str], None], witness: Callable[[], NodeEvidence], done: threading.Event
    ) -> None:
        try:
            store = self.store.clone()  # a connection of its own: the main thread may call the store too
        except network_errors():
            stop("lost the group's store")
            return
        stop_key = f"r{number}/stop"
        beat_at, beats = 0.0, 0
        seen: dict[int, tuple[int, float]] = {}
        stopped = False
        while not done.wait(POLL):
            try:
                now = time.monotonic()
                if now >= beat_at:
                    beat_at = now + KEEPALIVE_EVERY
                    beats += 1
                    self._put(f"r{number}/alive/{self.spec.rank}", number, beats, store)
                    self._check_abort(store)
                    if self.spec.leader and not stopped:
                        self._check_alive(store, number, seen, now)
                if not stopped and store.check([stop_key]):
                    rank, reason, hang = self._take(
                        stop_key,
                        number,
                        parse=lambda ended: (int(ended["rank"]), str(ended["reason"]), ended.get("hang") is True),
                        store=store,
                    )
                    stopped = True
                    if hang:
                        self._testify(store, number, witness)
                    if rank != self.spec.rank:  # this node's own hang is being stopped already
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

    def _check_alive(self, store: Any, number: int, seen: dict[int, tuple[int, float]], now: float) -> None:
        """The leader ends the round for a node whose agent went silent."""
        for rank in range(1, self.spec.nnodes):
            count = self._beats(store, number, rank)
            last = seen.get(rank)
            if last is None or last[0] != count:
                seen[rank] = (count, now)
            elif now - last[1] > KEEPALIVE_TIMEOUT:
                reason = f"node {rank} lost: its agent sent no keep-alive for {KEEPALIVE_TIMEOUT:g}s"
                self._stop_round(store, number, rank, reason)

    def end(self, outcome: Outcome) -> Verdict:
        """Report how this node's workers ended; the round's verdict once every node has."""
        assert self.plan is not None
        if self.lost is not None:
            raise self.lost
        while True:
            try:
                verdict = self._end(outcome)
                break
            except network_errors() as err:
                self._reconnect(err)
                if self.store.check([f"r{self.plan.round}/decision"]):  # the new leader judged the round
                    verdict = self._decision(self.plan.round)
                    break
        self.state = NodeState(verdict.budgets, self.plan.round, running=False)
        return verdict

    def _end(self, outcome: Outcome) -> Verdict:
        assert self.plan is not None
        number = self.plan.round
        prefix = f"r{number}"
        if outcome.cause != Ending.SUCCESS:
            self._stop_round(self.store, number, self.spec.rank, outcome.reason)
        self._put(f"{prefix}/out/{self.spec.rank}", number, outcome.to_json())
        if self.spec.leader:
            verdict = verdict_for(self.plan, self._outcomes(number), self.policy, ended_by=self._ended_by(number))
            if verdict.cause == Ending.HANG:
                reports, refused = self._evidence(number)
                verdict = with_culprit(verdict, reports, self.spec.nnodes, refused)
            self._put(f"{prefix}/decision", number, verdict.to_json())
            self._linger(verdict)
            return verdict
        return self._decision(number)

    def _outcomes(self, number: int) -> list[Outcome]:
        """Every node's report; a node that neither reports nor keeps alive is recorded as lost."""
        keys = [f"r{number}/out/{rank}" for rank in range(self.spec.nnodes)]
        deadline = time.monotonic() + self.policy.grace + KEEPALIVE_TIMEOUT + 10
        seen: dict[int, tuple[int, float]] = {}
        while not self.store.check(keys) and time.monotonic() < deadline:
            self._check_abort(self.store)
            stale = [rank for rank in self._missing(keys) if self._silent(number, rank, seen)]
            if stale and len(stale) == len(self._missing(keys)):
                break
            self._wait(keys, POLL)  # returns as soon as the last report is in
        outcomes = []
        for rank, key in enumerate(keys):
            if self.store.check([key]):
                outcomes.append(self._take(key, number, node=rank, parse=functools.partial(_outcome, rank)))
            else:
                outcomes.append(
                    Outcome(
                        rank,
                        Ending.ENVIRONMENT,
                        f"node {rank} did not report how round {number} ended (its agent is gone)",
                        RETRY_ELSEWHERE,
                    )
                )
        return outcomes

    def _silent(self, number: int, rank: int, seen: dict[int, tuple[int, float]]) -> bool:
        count, now = self._beats(self.store, number, rank), time.monotonic()
        last = seen.setdefault(rank, (count, now))
        if last[0] != count:
            seen[rank] = (count, now)
            return False
        return now - last[1] > KEEPALIVE_TIMEOUT

    def _decision(self, number: int) -> Verdict:
        key = f"r{number}/decision"
        published = self._get(key, number, self.policy.grace + KEEPALIVE_TIMEOUT + 60)
        verdict = self._parsed(key, lambda: _verdict(number, published))
        self._acknowledge(verdict)
        return verdict

    def _acknowledge(self, verdict: Verdict) -> None:
        if verdict.exit_code is not None and not self.spec.leader:
            self._put(f"r{verdict.round}/ack/{self.spec.rank}", verdict.round, 1)
        elif self.spec.leader:
            self._linger(verdict)

    def _linger(self, verdict: Verdict) -> None:
        """The store lives in the leader: after a final verdict, keep it up until every node has read it."""
        if verdict.exit_code is None:
            return
        keys = [f"r{verdict.round}/ack/{rank}" for rank in range(1, self.spec.nnodes)]
        self._wait(keys, ACK_TIMEOUT)
        for rank, key in enumerate(keys, start=1):
            if self.store.check([key]):
                self._take(key, verdict.round, node=rank)

    def close(self) -> None:
        if self.spec.leader and self.store is not None:
            with contextlib.suppress(*network_errors(), RuntimeError):
                if self.store.check(["abort"]):
                    time.sleep(ABORT_LINGER)
        self.store = self.served = self.workers_served = None

    # -- signed values ----------------------------------------------------------------------------

    def _put(self, key: str, number: int, value: Any, store: Any = None, signer: signing.Signer | None = None) -> None:
        signer = signer or self.signer
        assert signer is not None
        (store or self.store).set(key, signer.seal(key, number, value))

    def _take(
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
            raise self._reject(key, str(err), store) from None
        return self._parsed(key, lambda: parse(value), store)

    def _parsed(self, key: str, parse: Callable[[], T], store: Any = None) -> T:
        try:
            return parse()
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as err:
            raise self._reject(key, f"malformed ({type(err).__name__}: {err})", store or self.store) from None

    def _reject(self, key: str, reason: str, store: Any = None) -> GroupRejected:
        """Tell the group (stop the round, abort the job) and return the error to raise."""
        store = store or self.store
        rejected = GroupRejected(key, reason)
        with contextlib.suppress(*network_errors(), RuntimeError):
            if self.number:
                self._stop_round(store, self.number, self.spec.rank, str(rejected))
            self._put("abort", 0, {"rank": self.spec.rank, "reason": str(rejected)}, store)
        return rejected

    def _beats(self, store: Any, number: int, rank: int) -> int:
        """How many keep-alives node ``rank`` has sent in round ``number`` (0 before its first)."""
        key = f"r{number}/alive/{rank}"
        return self._take(key, number, node=rank, parse=int, store=store) if store.check([key]) else 0

    def _ended_by(self, number: int) -> int | None:
        """The node that ended round ``number`` first (the signed stop: the first report is kept), if any."""
        key = f"r{number}/stop"
        return self._take(key, number, parse=lambda ended: int(ended["rank"])) if self.store.check([key]) else None

    def _check_abort(self, store: Any) -> None:
        """Leave once any node found a value it cannot trust; node 0 also welcomes new hellos here,
        as it looks at the store while it waits."""
        if self.spec.leader:
            self._answer(store)
        if store.check(["abort"]):
            rank, reason = self._take(
                "abort", 0, parse=lambda found: (int(found["rank"]), str(found["reason"])), store=store
            )
            raise GroupLost(f"node {rank} {reason}")

    def _stop_round(self, store: Any, number: int, rank: int, reason: str, *, hang: bool = False) -> None:
        """End round ``number`` on every node, unless a report already did (the first one is kept)."""
        assert self.signer is not None
        ended = {"rank": rank, "reason": reason, **({"hang": True} if hang else {})}
        store.compare_set(f"r{number}/stop", "", self.signer.seal(f"r{number}/stop", number, ended))

    # -- store helpers ----------------------------------------------------------------------------

    def _wait(self, keys: list[str], seconds: float) -> bool:
        """Whether every key exists within ``seconds``; a lost store or an aborted group raises."""
        deadline = time.monotonic() + seconds
        while True:
            left = deadline - time.monotonic()
            try:
                self.store.wait(keys, timedelta(seconds=max(min(left, ABORT_EVERY), 0.001)))
            except network_errors():
                raise
            except RuntimeError:  # DistStoreError: the wait timed out
                self._check_abort(self.store)
                if left <= ABORT_EVERY:
                    return False
                continue
            return True

    def _get(self, key: str, number: int, seconds: float) -> Any:
        """Node 0's value of ``key`` for round ``number``."""
        if not self._wait([key], seconds):
            raise GroupLost(f"no {key.split('/')[-1]} from node 0 within {seconds:g}s")
        return self._take(key, number, node=0)

    def _missing(self, keys: list[str]) -> list[int]:
        return [int(key.rsplit("/", 1)[1]) for key in keys if not self.store.check([key])]

    def _newest_position(self) -> tuple[int, ...] | None:
        from hacfg.agent import checkpoints

        found = checkpoints.newest_complete(self.policy.checkpoint_path)
        return found.position if found else None


def _state(hello: Any) -> NodeState:
    return NodeState.from_json(hello["state"])


def _challenge(hello: Any) -> str:
    return str(hello["challenge"])


def _round_number(current: dict[str, Any]) -> int:
    if current["value"] != current["round"] or not isinstance(current["value"], int):
        raise ValueError(f"round {current['value']!r} signed as round {current['round']}")
    return int(current["value"])


def _verdict(number: int, published: Any) -> Verdict:
    verdict = Verdict.from_json(published)
    if verdict.round != number:
        raise ValueError(f"a verdict for round {verdict.round}, not {number}")
    return verdict


def _outcome(rank: int, report: Any) -> Outcome:
    outcome = Outcome.from_json(report)
    if outcome.rank != rank:
        raise ValueError(f"node {rank} reported for node {outcome.rank}")
    return outcome


