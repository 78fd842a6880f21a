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
``r<N>/join/<r>``   node r is ready for round N: its workers of round N-1 are stopped; its
                    pre-check's failure, if any, and what its memory tier holds
``r<N>/plan``       the leader: attempt, counters and resume checkpoint (on disk, or the memory
                    step every node holds), or a final verdict
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

The parts: :mod:`channel` alone talks to the store (signed values, waits, the abort key),
:mod:`handshake` makes a node and a store trust each other, :mod:`liveness` keeps the keep-alives,
:mod:`testimony` carries a hang's evidence and the stragglers' samples, :mod:`copies` keeps the
nodes' memory steps on their peers, and :mod:`decisions` are the group's decisions as pure
functions of what the store said. This module is the round protocol over them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from hacfg.agent.checkpoints import Resume, within
from hacfg.agent.culprit.analysis import NodeEvidence
from hacfg.agent.culprit.straggler import Arrivals
from hacfg.agent.group import decisions, signing
from hacfg.agent.group.channel import Channel, GroupLost
from hacfg.agent.group.copies import PeerCopies
from hacfg.agent.group.discovery import GroupSpec
from hacfg.agent.group.handshake import Handshake
from hacfg.agent.group.liveness import KEEPALIVE_TIMEOUT, RoundWatch, keeping_alive, outcomes
from hacfg.agent.group.peer import COPY_SHARE, peer_key
from hacfg.agent.group.rendezvous import WorkerStores
from hacfg.agent.group.testimony import Testimony
from hacfg.agent.group.transport import first_line, network_errors
from hacfg.agent.records.state import NodeState
from hacfg.agent.rounds import (
    Outcome,
    Plan,
    Verdict,
    from_disk,
    interrupted_plan,
    plan_round,
    precheck_verdict,
    verdict_for,
    with_culprit,
)
from hacfg.restart.policy import RETRY_ELSEWHERE, Policy
from hacfg.restart.vocabulary import Ending

ACK_TIMEOUT = 30.0
ABORT_LINGER = 3.0  # the leader keeps an aborted store up this long, so every node reads why


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
        workers_store: str | None = None,  # on node 0, the host where it serves the workers' store
        copy_every: int = 10,  # the steps whose memory checkpoint each node copies to the next
        copy_share: float = COPY_SHARE,  # the most those copies may cost the training, as measured
    ):
        self.spec = spec
        self.copy_every, self.copy_share = copy_every, copy_share
        self.tier: Path | None = None  # this node's memory tier, once the agent made it
        self.copies: PeerCopies | None = None
        self.policy = policy
        self.echo = echo
        self.secret = secret  # the job's, on node 0's state folder unless the platform gives one
        self.channel = Channel(spec, store_class, echo)
        self.handshake = Handshake(self.channel)
        if spec.leader:
            self.channel.looking = self.handshake.answer
        self.testimony = Testimony(self.channel)
        self.workers = WorkerStores(store_class, workers_store, spec.timeout, echo) if workers_store else None
        self.plan: Plan | None = None
        self.state = NodeState()
        self.lost: GroupLost | None = None  # what the monitor found while the workers ran

    holds_memory = True

    def use_tier(self, tier: Path | None) -> None:
        self.tier = tier

    # -- connecting ---------------------------------------------------------------------------

    def recover(self, state: NodeState) -> Verdict | None:
        """Join the group; the verdict of a round this node was part of and has not applied, if any."""
        self.state = state
        try:
            secret = self.secret.value()
        except signing.NoSecret as err:
            raise GroupLost(str(err)) from None
        job = self.secret.job or ""
        self.channel.signer = signing.Signer(secret, self.spec.rank, job)
        if self.tier is not None and self.copies is None:
            key = peer_key(secret, job)
            self.copies = PeerCopies(self.tier, key, self.spec, job, self.copy_every, self.copy_share, self.echo)
        self._connect()
        return self._catch_up()

    def _connect(self) -> None:
        channel = self.channel
        deadline = time.monotonic() + self.spec.timeout
        while True:
            try:
                channel.connect()
                if self.spec.leader:
                    self._open()
                elif not self.handshake.greet(self.state, deadline):
                    return  # the same store as before: nothing to say again
                if channel.wait(["ready"], deadline - time.monotonic()):
                    channel.take("ready", 0, node=0)
                return
            except network_errors() as err:
                if time.monotonic() >= deadline:
                    raise channel.unreachable(err) from None
                time.sleep(0.5)

    def _reconnect(self, err: BaseException) -> None:
        self.echo(
            f"[hacfg] lost the group's store ({first_line(err)}); reconnecting to {self.spec.host}:{self.spec.port}"
        )
        if self.channel.served is not None:  # node 0 serves the store itself: a new connection, never a new store
            self.channel.store = self.channel.served.clone()
            return
        self.channel.store = None
        self._connect()

    def _open(self) -> None:
        """The leader on a new store: every node's hello merged, and a round that the store's
        restart interrupted judged."""
        channel = self.channel
        hellos = self.handshake.open(self.state)
        self.state, current, interrupted = decisions.merged(hellos, self.state)
        channel.put("current", current, current)
        if interrupted:
            plan = interrupted_plan(self.state, self.policy)
            verdict = decisions.interrupted_verdict(plan, interrupted[0], self.policy)
            channel.put(f"r{verdict.round}/decision", verdict.round, verdict.to_json())
        channel.put("ready", 0, 1)

    def _catch_up(self) -> Verdict | None:
        """Line this node's state up with the group's current round after (re)connecting."""
        channel = self.channel
        current = channel.take("current", None, node=0, parse=decisions.round_number)
        prefix = f"r{current}"
        if channel.store.check([f"{prefix}/decision"]):
            verdict = self._decision(current)
            was_in_it = self.state.running and self.state.round == current
            self.state = NodeState(verdict.budgets, current, running=False)
            return verdict if was_in_it else None
        if channel.store.check([f"{prefix}/plan"]) and not channel.store.check([f"{prefix}/out/{self.spec.rank}"]):
            # this node was in the round and lost its workers with its agent
            channel.number = current
            self.plan = self._plan(current, channel.take(f"{prefix}/plan", current, node=0))
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
        channel = self.channel
        number = channel.number = self.state.round + 1
        prefix = f"r{number}"
        if self.spec.leader:
            channel.put("current", number, number)
        holdings = self.copies.holdings() if self.copies is not None else None
        channel.put(f"{prefix}/join/{self.spec.rank}", number, {"precheck": precheck_failure, "memory": holdings})
        if self.spec.leader:
            published = self._lead(number, self.state)
        else:
            published = channel.get(f"{prefix}/plan", number, self.spec.timeout + 30)
        self.state.round = number
        if isinstance(published, dict) and "verdict" in published:
            verdict = channel.parsed(f"{prefix}/plan", lambda: decisions.verdict_of(number, published["verdict"]))
            self._acknowledge(verdict)
            return verdict
        self.plan = self._plan(number, published)
        self.state = NodeState(self.plan.budgets, number, running=True)
        return self.plan

    def _lead(self, number: int, state: NodeState) -> Any:
        channel = self.channel
        keys = [f"r{number}/join/{rank}" for rank in range(self.spec.nnodes)]
        if not channel.wait(keys, self.spec.timeout):
            missing = channel.missing(keys)
            return self._publish_final(number, decisions.cannot_form(number, missing, self.spec.timeout, state))
        joins = [channel.take(key, number, node=rank, parse=decisions.joined) for rank, key in enumerate(keys)]
        for rank, (failure, _) in enumerate(joins):
            if failure:
                return self._publish_final(
                    number, precheck_verdict(number, state.budgets, self.policy, f"node {rank}: {failure}", rank)
                )
        plan = plan_round(number, state.budgets, self.policy)
        tiers, doubt = decisions.memory_plan([held for _, held in joins], plan.resume_position, self.copy_every)
        plan = dataclasses.replace(plan, memory=tiers, doubts=plan.doubts + ((doubt,) if doubt else ()))
        if self.workers is not None:
            plan = dataclasses.replace(plan, workers_port=self.workers.serve())
        channel.put(f"r{number}/plan", number, plan.to_json())
        return plan.to_json()

    def _publish_final(self, number: int, verdict: Verdict) -> dict[str, Any]:
        published = {"verdict": verdict.to_json()}
        self.channel.put(f"r{number}/decision", number, verdict.to_json())
        self.channel.put(f"r{number}/plan", number, published)
        return published

    def _plan(self, number: int, published: Any) -> Plan:
        """The leader's plan for round ``number``; one resuming from outside ``checkpoint.path`` is refused."""
        key = f"r{number}/plan"
        plan = self.channel.parsed(key, lambda: Plan.from_json(published))
        if plan.round != number:
            raise self.channel.reject(key, f"stale: a plan for round {plan.round}")
        if plan.resume_from is not None and not within(Path(plan.resume_from), self.policy.checkpoint_path):
            outside = f"it resumes from {plan.resume_from}, outside checkpoint.path {self.policy.checkpoint_path}"
            raise self.channel.reject(key, outside)
        if plan.memory is not None and len(plan.memory.peers) != self.spec.nnodes:
            named = f"it names {len(plan.memory.peers)} nodes' receivers of peer copies, not {self.spec.nnodes}"
            raise self.channel.reject(key, named)
        return plan

    def resume(self, plan: Plan) -> Resume:
        """The plan's memory step in this node's tier (fetched back from its copy first when it lost
        it), else its checkpoint on the storage every node shares."""
        if plan.memory is None or self.copies is None:
            return from_disk(plan)
        with keeping_alive(self.channel, plan.round):  # a fetch of gigabytes takes seconds
            return self.copies.resume(plan.memory) or from_disk(plan)

    @contextlib.contextmanager
    def watch(self, stop: Callable[[str], None], witness: Callable[[], NodeEvidence]) -> Iterator[None]:
        """While the workers run: call ``stop(reason)`` once the round ends elsewhere (or the group is
        lost); when it ended by a hang, send this node's evidence (``witness()``) first."""
        assert self.plan is not None
        self.lost = None
        watching = RoundWatch(self.channel, self.testimony, self.plan.round, stop, witness)
        try:
            with watching.running():
                yield
        finally:
            self.lost = watching.lost

    def hung(self, witness: Callable[[], NodeEvidence]) -> None:
        """This node's workers hung: end the round as a hang, so every node sends its evidence before
        stopping anything, and send this node's."""
        assert self.plan is not None
        number, channel = self.plan.round, self.channel
        try:
            channel.stop_round(channel.store, number, self.spec.rank, "hang", hang=True)
            self.testimony.testify(channel.store, number, witness)
        except network_errors():
            pass  # the store is gone: the round ends without the group's evidence, as it would have

    def pace(self, node: int, arrivals: Arrivals) -> list[tuple[int, Arrivals]] | None:
        """Publish this node's sample of the stragglers' pace; node 0 gets every node's newest."""
        assert self.plan is not None
        return self.testimony.pace(self.plan.round, arrivals)

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
                if self.channel.store.check([f"r{self.plan.round}/decision"]):  # the new leader judged the round
                    verdict = self._decision(self.plan.round)
                    break
        self.state = NodeState(verdict.budgets, self.plan.round, running=False)
        return verdict

    def _end(self, outcome: Outcome) -> Verdict:
        assert self.plan is not None
        channel = self.channel
        number = self.plan.round
        prefix = f"r{number}"
        if outcome.cause != Ending.SUCCESS:
            channel.stop_round(channel.store, number, self.spec.rank, outcome.reason)
        channel.put(f"{prefix}/out/{self.spec.rank}", number, outcome.to_json())
        if self.spec.leader:
            ended = outcomes(channel, number, self.policy.grace + KEEPALIVE_TIMEOUT + 10)
            verdict = verdict_for(self.plan, ended, self.policy, ended_by=channel.ended_by(number))
            if verdict.cause == Ending.HANG:
                reports, refused = self.testimony.evidence(number)
                verdict = with_culprit(verdict, reports, self.spec.nnodes, refused)
            channel.put(f"{prefix}/decision", number, verdict.to_json())
            self._linger(verdict)
            return verdict
        return self._decision(number)

    def _decision(self, number: int) -> Verdict:
        key = f"r{number}/decision"
        published = self.channel.get(key, number, self.policy.grace + KEEPALIVE_TIMEOUT + 60)
        verdict = self.channel.parsed(key, lambda: decisions.verdict_of(number, published))
        self._acknowledge(verdict)
        return verdict

    def _acknowledge(self, verdict: Verdict) -> None:
        if verdict.exit_code is not None and not self.spec.leader:
            self.channel.put(f"r{verdict.round}/ack/{self.spec.rank}", verdict.round, 1)
        elif self.spec.leader:
            self._linger(verdict)

    def _linger(self, verdict: Verdict) -> None:
        """The store lives in the leader: after a final verdict, keep it up until every node has read it."""
        if verdict.exit_code is None:
            return
        keys = [f"r{verdict.round}/ack/{rank}" for rank in range(1, self.spec.nnodes)]
        self.channel.wait(keys, ACK_TIMEOUT)
        for rank, key in enumerate(keys, start=1):
            if self.channel.store.check([key]):
                self.channel.take(key, verdict.round, node=rank)

    def close(self) -> None:
        if self.spec.leader and self.channel.store is not None:
            with contextlib.suppress(*network_errors(), RuntimeError):
                if self.channel.store.check(["abort"]):
                    time.sleep(ABORT_LINGER)
        self.channel.close()
        if self.workers is not None:
            self.workers.close()
        if self.copies is not None:
            self.copies.close()
