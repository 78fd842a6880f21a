"""The group's decisions, as pure functions of what the store said: no store, no clock, no file.

:mod:`hacfg.agent.group.protocol` reads the keys and calls these; the rules for one round's verdict
are :func:`hacfg.agent.rounds.verdict_for`, the same on one node and many.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hacfg.agent.records.state import NodeState
from hacfg.agent.rounds import MemoryPlan, Outcome, Plan, Verdict, address, count, listed, verdict_for
from hacfg.restart.policy import RETRY_ELSEWHERE, Policy
from hacfg.restart.vocabulary import Action, Ending


def merged(hellos: list[NodeState], own: NodeState) -> tuple[NodeState, int, list[int]]:
    """The group's state from every node's hello (the newest round's counters), the round the group
    is in, and the nodes whose agent stopped during that round (it is judged before any other)."""
    newest = max(hellos, key=lambda s: s.round)
    state = NodeState(newest.budgets, newest.round, own.running and own.round == newest.round)
    interrupted = [rank for rank, s in enumerate(hellos) if s.running and s.round == newest.round]
    return state, newest.round if interrupted else newest.round + 1, interrupted


def interrupted_verdict(plan: Plan, rank: int, policy: Policy) -> Verdict:
    """The verdict of a round the store's restart interrupted: node ``rank``'s agent stopped in it."""
    reason = f"the agent of node {rank} stopped during round {plan.round} (the group's store restarted)"
    return verdict_for(plan, [Outcome(rank, Ending.ENVIRONMENT, reason, RETRY_ELSEWHERE)], policy)


def cannot_form(number: int, missing: list[int], timeout: float, state: NodeState) -> Verdict:
    """Round ``number`` without the nodes that did not join in time: the job cannot form here."""
    return Verdict(
        round=number,
        cause=Ending.ENVIRONMENT,
        reason=f"nodes {missing} did not join round {number} within {timeout:g}s",
        rank=0,
        action=Action.JOB_RESCHEDULE,
        detail="the job cannot form: retry elsewhere",
        budgets=state.budgets,
        exit_code=RETRY_ELSEWHERE,
    )


def unreported(rank: int, number: int) -> Outcome:
    """A node that neither reported how its workers ended nor kept alive: its agent is gone."""
    reason = f"node {rank} did not report how round {number} ended (its agent is gone)"
    return Outcome(rank, Ending.ENVIRONMENT, reason, RETRY_ELSEWHERE)


def round_number(current: dict[str, Any]) -> int:
    """The ``current`` key's round, which must be the round it is signed for."""
    if current["value"] != current["round"] or not isinstance(current["value"], int):
        raise ValueError(f"round {current['value']!r} signed as round {current['round']}")
    return int(current["value"])


def verdict_of(number: int, published: Any) -> Verdict:
    """Round ``number``'s published verdict (one for another round is stale)."""
    verdict = Verdict.from_json(published)
    if verdict.round != number:
        raise ValueError(f"a verdict for round {verdict.round}, not {number}")
    return verdict


def outcome_of(rank: int, report: Any) -> Outcome:
    """Node ``rank``'s report of how its workers ended (one for another node is forged)."""
    outcome = Outcome.from_json(report)
    if outcome.rank != rank:
        raise ValueError(f"node {rank} reported for node {outcome.rank}")
    return outcome


@dataclass(frozen=True)
class Held:
    """One node's memory tier as its join said: its complete steps, the step of each node whose
    copy its receiver keeps, and where that receiver listens."""

    steps: frozenset[int]
    copies: dict[int, int]
    address: tuple[str, int]
    unfetched: frozenset[int] = frozenset()  # steps of its own whose copy it could not fetch back


def joined(join: Any) -> tuple[str | None, Held | None]:
    """A node's join: why its pre-check failed (None: it passed), and what its memory tier holds
    (None: it has none). ValueError when it is not one an agent sends."""
    if not isinstance(join, dict):
        raise ValueError(f"not a join: {join!r}")
    failure, tier = join.get("precheck"), join.get("memory")
    if failure is not None and not isinstance(failure, str):
        raise ValueError(f"not a pre-check's failure: {failure!r}")
    if tier is None:
        return failure, None
    if not (isinstance(tier, dict) and isinstance(tier.get("steps"), list) and isinstance(tier.get("copies"), dict)):
        raise ValueError(f"not a memory tier's holdings: {tier!r}")
    steps = frozenset(count(step) for step in tier["steps"])
    copies = {}
    for owner, step in tier["copies"].items():
        if not owner.isdigit():
            raise ValueError(f"not a node: {owner!r}")
        copies[int(owner)] = count(step)
    unfetched = frozenset(count(step) for step in listed(tier.get("unfetched", [])))
    return failure, Held(steps, copies, address(tier.get("address")), unfetched)


def memory_plan(
    held: list[Held | None], disk: tuple[int, ...] | None, copy_every: int
) -> tuple[MemoryPlan | None, str | None]:
    """The group's use of its memory tiers in the next round, and a doubt to say when they hold
    steps newer than the disk's but none that every node has. The step resumed is the newest one
    every node holds, in its own tier or as its copy on the next node (which it then fetches back,
    unless that failed before), if it is no older than the disk's checkpoint (memory on a tie, as it
    loads faster)."""
    if any(h is None for h in held):
        return None, None
    tiers = [h for h in held if h is not None]
    available = []
    for node, own in enumerate(tiers):
        copy = tiers[(node + 1) % len(tiers)].copies.get(node)
        available.append(set(own.steps) | ({copy} if copy is not None and copy not in own.unfetched else set()))
    newer = [{s for s in steps if disk is None or (s,) >= disk} for steps in available]
    common = set.intersection(*newer)
    step = max(common, default=None)
    peers = tuple(h.address for h in tiers)
    fetch = tuple(node for node, own in enumerate(tiers) if step is not None and step not in own.steps)
    doubt = None
    if step is None and all(newer):
        each = "; ".join(f"node {node}: {sorted(steps)}" for node, steps in enumerate(newer))
        doubt = f"the nodes' memory tiers hold no step in common ({each}): the round resumes from disk"
    return MemoryPlan(peers, copy_every, step, fetch), doubt
