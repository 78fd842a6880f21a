"""Rounds: one start of the workers on every node, ended by one verdict for the whole job.

A round is planned (attempt number, counters, the checkpoint to resume from), run, and judged.
On one node the agent plans and judges by itself (:class:`SingleNodeRounds`); in a group of nodes
the leader does it for everyone (:class:`~hacfg.agent.group.protocol.GroupRounds`). Both use the same two functions,
:func:`plan_round` and :func:`verdict_for`, so one node and many follow one set of rules.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from hacfg.agent import checkpoints
from hacfg.agent.culprit.analysis import Culprit, NodeEvidence, attribute
from hacfg.agent.culprit.straggler import Arrivals
from hacfg.agent.records.state import NodeState
from hacfg.checkpoint import tidy
from hacfg.restart.policy import RETRY_ELSEWHERE, Budgets, Policy, decide
from hacfg.restart.vocabulary import Action, Cause, Ending


@dataclass(frozen=True, kw_only=True)
class Plan:
    """One round as every node starts it: the same numbers and the same checkpoint on every rank."""

    round: int
    budgets: Budgets
    resume_position: tuple[int, ...] | None = None  # the resumed checkpoint's place: a newer one is progress
    resume_from: str | None = None
    doubts: tuple[str, ...] = ()  # what made the choice of that checkpoint uncertain: each node says it
    workers_port: int | None = None  # where node 0's agent serves this round's store for the workers' rendezvous
    memory: MemoryPlan | None = None  # in a group: the step every node resumes from its memory tier instead

    def to_json(self) -> dict[str, Any]:
        return {
            "round": self.round,
            "budgets": dataclasses.asdict(self.budgets),
            "resume_position": list(self.resume_position) if self.resume_position is not None else None,
            "resume_from": self.resume_from,
            "doubts": list(self.doubts),
            "workers_port": self.workers_port,
            "memory": self.memory.to_json() if self.memory else None,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Plan:
        return cls(
            round=int(data["round"]),
            budgets=Budgets(**data["budgets"]),
            resume_position=_position(data.get("resume_position")),
            resume_from=data.get("resume_from"),
            doubts=tuple(str(doubt) for doubt in data.get("doubts", ())),
            workers_port=_port(data.get("workers_port")),
            memory=MemoryPlan.from_json(data["memory"]) if data.get("memory") is not None else None,
        )


@dataclass(frozen=True)
class MemoryPlan:
    """A group's use of its memory tiers in one round: where each node's receiver of peer copies
    listens (by node), the copy interval, and the step to resume (None: from disk), with the nodes
    that fetch theirs back from the peer keeping its copy first."""

    peers: tuple[tuple[str, int] | None, ...]
    copy_every: int
    step: int | None = None
    fetch: tuple[int, ...] = ()

    def to_json(self) -> dict[str, Any]:
        peers = [list(a) if a else None for a in self.peers]
        return {"peers": peers, "copy_every": self.copy_every, "step": self.step, "fetch": list(self.fetch)}

    @classmethod
    def from_json(cls, data: Any) -> MemoryPlan:
        if not isinstance(data, dict):
            raise ValueError(f"not a memory plan: {data!r}")
        peers = tuple(None if a is None else address(a) for a in listed(data.get("peers")))
        fetch = tuple(count(node) for node in listed(data.get("fetch")))
        step = None if data.get("step") is None else count(data["step"])
        if any(node >= len(peers) for node in fetch):
            raise ValueError(f"fetch names a node beyond {len(peers)}: {fetch}")
        return cls(peers, count(data.get("copy_every")), step, fetch)


def address(value: object) -> tuple[str, int]:
    """A ``[host, port]`` pair as a node sent it."""
    if not (isinstance(value, list) and len(value) == 2 and isinstance(value[0], str) and _port(value[1]) is not None):
        raise ValueError(f"not an address: {value!r}")
    return value[0], value[1]


def listed(value: object) -> list[Any]:
    if not isinstance(value, list):
        raise ValueError(f"not a list: {value!r}")
    return value


def count(value: object) -> int:
    if type(value) is not int or value < 0:
        raise ValueError(f"not a count: {value!r}")
    return value


def _position(value: object) -> tuple[int, ...] | None:
    if value is None:
        return None
    if not (isinstance(value, list) and value and all(type(n) is int for n in value)):
        raise ValueError(f"not a checkpoint position: {value!r}")
    return tuple(value)


def _port(value: object) -> int | None:
    if value is not None and not (type(value) is int and 0 < value < 1 << 16):
        raise ValueError(f"not a port: {value!r}")
    return value


@dataclass(frozen=True)
class Outcome:
    """How one node's workers ended in a round."""

    rank: int
    cause: Ending
    reason: str
    code: int = 0  # the shell's view: exit code, or 128 + signal
    peer: bool = False  # a consequence of another node's failure: recorded, never the round's cause
    seen_on: int | None = None  # the node the cause is on, when not the reporting one (a straggler's)
    relocate: bool = False  # no restart on this node can fix it (a GPU fallen off the bus): the job moves
    saved_in_memory: bool = False  # the node's memory tier holds a newer complete step than the round resumed

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Outcome:
        fields = {f.name: data[f.name] for f in dataclasses.fields(cls) if f.name in data}
        return cls(**{**fields, "cause": Ending(fields["cause"])})


@dataclass(frozen=True, kw_only=True)
class Verdict:
    """The round's one cause and one decision, identical on every node."""

    round: int
    cause: Ending
    reason: str
    rank: int | None  # the node the cause is on; of a hang, its culprit's (None when the evidence names none)
    action: Action
    detail: str
    budgets: Budgets
    exit_code: int | None = None  # set when every agent stops
    progressed: bool = False
    resume_from: str | None = None  # the newest complete checkpoint once the round ended
    culprit: Culprit | None = None  # of a hang: the rank the evidence names, if it names one
    culprit_note: str | None = None  # of a hang: why no rank is named, or None

    def to_json(self) -> dict[str, Any]:
        culprit = self.culprit.to_json() if self.culprit else None
        return {**dataclasses.asdict(self), "budgets": dataclasses.asdict(self.budgets), "culprit": culprit}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Verdict:
        budgets = Budgets(**data["budgets"])
        culprit = Culprit.from_json(data["culprit"]) if data.get("culprit") else None
        typed = {"cause": Ending(data["cause"]), "action": Action(data["action"]), "budgets": budgets}
        return cls(**{**data, **typed, "culprit": culprit})


def attempt_env(plan: Plan, heartbeat: Path, policy: Policy) -> dict[str, str]:
    """What each worker of a round is told: its attempt and restarts, where to resume, where to beat and
    how often at most (four times in the shortest hang timeout, at most once a second)."""
    shortest = min(policy.hang_timeout, policy.learn_floor if policy.learn_hang_timeouts else float("inf"))
    return {
        "HACFG_ATTEMPT": str(plan.budgets.attempt),
        "HACFG_RESTART_COUNT": str(plan.budgets.restarts),
        "HACFG_RESUME_FROM": plan.resume_from or "",
        "HACFG_HEARTBEAT_FILE": str(heartbeat),
        "HACFG_HEARTBEAT_INTERVAL": f"{min(1.0, shortest / 4):g}",
    }


def plan_round(number: int, budgets: Budgets, policy: Policy) -> Plan:
    """The next round: one more attempt, resuming from the newest complete checkpoint.

    Called only once every worker of the previous round has stopped, so no save is in flight: what
    killed saves left behind is removed first.
    """
    budgets = dataclasses.replace(budgets, attempt=budgets.attempt + 1)
    tidy(policy.checkpoint_path)
    found, doubts = checkpoints.choose(policy.checkpoint_path)
    return Plan(
        round=number,
        budgets=budgets,
        resume_position=found.position if found else None,
        resume_from=str(found.path) if found else None,
        doubts=doubts,
    )


def interrupted_plan(state: NodeState, policy: Policy) -> Plan:
    """The plan of a round whose agent stopped in it, to judge it by: its counters, and the newest
    checkpoint as the one it resumed (so only a newer one would be progress)."""
    found = checkpoints.newest_complete(policy.checkpoint_path)
    return Plan(round=state.round, budgets=state.budgets, resume_position=found.position if found else None)


def verdict_for(plan: Plan, outcomes: list[Outcome], policy: Policy, *, ended_by: int | None = None) -> Verdict:
    """The round's verdict from every node's outcome: the failure that is not a consequence of
    another is the cause, the one of node ``ended_by`` (whose report ended the round) before the
    others'; the restart rules apply to it once."""
    budgets = dataclasses.replace(plan.budgets)
    after = checkpoints.newest_complete(policy.checkpoint_path)
    on_disk = after is not None and (plan.resume_position is None or after.position > plan.resume_position)
    progressed = on_disk or any(o.saved_in_memory for o in outcomes)

    def verdict(cause: Ending, reason: str, rank: int, action: Action, detail: str, exit_code: int | None) -> Verdict:
        return Verdict(
            round=plan.round,
            cause=cause,
            reason=reason,
            rank=rank,
            action=action,
            detail=detail,
            budgets=budgets,
            exit_code=exit_code,
            progressed=progressed,
            resume_from=str(after.path) if after else None,
        )

    failed = (o for o in outcomes if o.cause != Ending.SUCCESS)
    failures = sorted(failed, key=lambda o: (o.peer, o.rank != ended_by, o.rank))
    moved = next((o for o in outcomes if o.cause == Ending.STRAGGLER), None)
    if moved is not None:  # the leader stopped the round on purpose: the others' errors follow from it
        action = Action.POD_RESCHEDULE if policy.pod_reschedules else Action.JOB_RESCHEDULE
        detail = "a straggler: retry elsewhere"
        where = moved.rank if moved.seen_on is None else moved.seen_on
        return verdict(Ending.STRAGGLER, moved.reason, where, action, detail, RETRY_ELSEWHERE)
    if not failures:
        return verdict(Ending.SUCCESS, "every worker finished", 0, Action.SUCCESS, "done", 0)
    first = failures[0]
    if first.cause == Ending.STOPPED:
        return verdict(Ending.STOPPED, first.reason, first.rank, Action.STOP, "the agent was told to stop", first.code)
    cause = Cause.ENVIRONMENT if first.peer else Cause(first.cause)  # only consequences seen: the peer is gone
    decision = decide(cause, budgets, policy, progressed=progressed, command_code=first.code, relocate=first.relocate)
    return verdict(Ending(cause), first.reason, first.rank, decision.action, decision.reason, decision.exit_code)


def with_culprit(verdict: Verdict, reports: Sequence[NodeEvidence], nodes: int, refused: Sequence[str] = ()) -> Verdict:
    """A hang's verdict with the rank the nodes' evidence names (or why none); others unchanged.
    ``refused`` says which evidence could not be used (a summary that failed its check).

    The hang's node is its culprit's: whose detector fired first is a race among victims, since
    every rank goes quiet when one hangs, so with no culprit the node is not known either."""
    if verdict.cause != Ending.HANG:
        return verdict
    found = attribute(reports, nodes)
    note = "; ".join(filter(None, [found.note, *refused])) or None
    node = found.culprit.node if found.culprit else None
    return dataclasses.replace(verdict, rank=node, culprit=found.culprit, culprit_note=note)


def precheck_verdict(number: int, budgets: Budgets, policy: Policy, reason: str, rank: int = 0) -> Verdict:
    """A failed pre-check: this hardware is not fit, so the job is retried elsewhere (exit 138)."""
    action = Action.POD_RESCHEDULE if policy.pod_reschedules else Action.JOB_RESCHEDULE
    return Verdict(
        round=number,
        cause=Ending.ENVIRONMENT,
        reason=f"pre-check failed: {reason}",
        rank=rank,
        action=action,
        detail="pre-check failed: retry elsewhere",
        budgets=budgets,
        exit_code=RETRY_ELSEWHERE,
    )


def without_in_place_restart(verdict: Verdict, why: str) -> Verdict:
    """For a job whose nodes cannot restart together: hand a restart to the platform (exit 138)."""
    if verdict.action != Action.PROC_RESTART:
        return verdict
    return dataclasses.replace(
        verdict,
        action=Action.JOB_RESCHEDULE,
        detail=f"{verdict.detail}; {why}: the platform restarts the whole job",
        exit_code=RETRY_ELSEWHERE,
    )


class Rounds(Protocol):
    """Where a node's rounds are planned and judged: by itself (SingleNodeRounds) or by its group
    (GroupRounds)."""

    holds_memory: bool  # whether its rounds resume from a memory tier the agent keeps (:meth:`use_tier`)

    def use_tier(self, tier: Path | None) -> None:
        """The memory tier the workers save to, made before :meth:`recover`."""
        ...

    def recover(self, state: NodeState) -> Verdict | None: ...

    def begin(self, state: NodeState, precheck_failure: str | None = None) -> Plan | Verdict: ...

    def resume(self, plan: Plan) -> checkpoints.Resume:
        """Where this node's workers resume the round ``plan`` from. Called once its workers of the
        round before have stopped, so no save is in flight."""
        ...

    def watch(
        self, stop: Callable[[str], None], witness: Callable[[], NodeEvidence]
    ) -> contextlib.AbstractContextManager[None]:
        """While the workers run: ``stop(reason)`` once the round ends elsewhere, and for a hang
        elsewhere, ``witness()`` (this node's evidence) first, before anything is stopped."""
        ...

    def hung(self, witness: Callable[[], NodeEvidence]) -> None:
        """This node's workers hung: gather the evidence of every node, before any stop signal."""
        ...

    def pace(self, node: int, arrivals: Arrivals) -> Sequence[tuple[int, Arrivals]] | None:
        """Share this node's newest sample of its ranks' arrivals (:mod:`~hacfg.agent.culprit.straggler`);
        where the group's samples meet, every node's newest one, by node; elsewhere None."""
        ...

    def end(self, outcome: Outcome) -> Verdict: ...

    def close(self) -> None: ...


class SingleNodeRounds:
    """One node on its own: it plans and judges its rounds itself."""

    holds_memory = True

    def __init__(self, policy: Policy, *, in_place: bool = True):
        self.policy = policy
        self.in_place = in_place  # False: several nodes but no group, so every restart is the platform's
        self.plan: Plan | None = None
        self.evidence: NodeEvidence | None = None
        self.tier: Path | None = None

    def use_tier(self, tier: Path | None) -> None:
        self.tier = tier

    def recover(self, state: NodeState) -> Verdict | None:
        """The last agent stopped mid-attempt (a pod restart): an environment fault, counted as one."""
        if not (state.running and self.policy.max_restarts):
            return None
        reason = "the previous agent stopped during an attempt"
        outcome = Outcome(0, Ending.ENVIRONMENT, reason, RETRY_ELSEWHERE)
        return self._local(verdict_for(interrupted_plan(state, self.policy), [outcome], self.policy))

    def begin(self, state: NodeState, precheck_failure: str | None = None) -> Plan | Verdict:
        if precheck_failure:
            return precheck_verdict(state.round + 1, state.budgets, self.policy, precheck_failure)
        self.plan = plan_round(state.round + 1, state.budgets, self.policy)
        return self.plan

    def resume(self, plan: Plan) -> checkpoints.Resume:
        """The newer of the plan's checkpoint on disk and this node's newest memory step."""
        return checkpoints.newest_tier(plan.resume_position, plan.resume_from, self.tier)

    @contextlib.contextmanager
    def watch(self, stop: Callable[[str], None], witness: Callable[[], NodeEvidence]) -> Iterator[None]:
        self.evidence = None
        yield  # nothing else can end a one-node round

    def hung(self, witness: Callable[[], NodeEvidence]) -> None:
        self.evidence = witness()

    def pace(self, node: int, arrivals: Arrivals) -> Sequence[tuple[int, Arrivals]]:
        return [(node, arrivals)]

    def end(self, outcome: Outcome) -> Verdict:
        assert self.plan is not None
        verdict = verdict_for(self.plan, [outcome], self.policy)
        return self._local(with_culprit(verdict, [self.evidence] if self.evidence else [], 1))

    def _local(self, verdict: Verdict) -> Verdict:
        return verdict if self.in_place else without_in_place_restart(verdict, "no group store for the nodes")

    def close(self) -> None:
        pass


def from_disk(plan: Plan) -> checkpoints.Resume:
    """The plan's checkpoint on disk, and why this node cannot see it if it cannot (storage not shared)."""
    missing = None
    if plan.resume_from is not None and not Path(plan.resume_from).exists():
        missing = (
            f"cannot see the checkpoint {plan.resume_from} chosen for the job: "
            "checkpoint.path must be storage every node shares"
        )
    return checkpoints.Resume(plan.resume_from, plan.resume_position, "disk" if plan.resume_from else "none", missing)
