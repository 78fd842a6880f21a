"""The group's decisions, as pure functions of what the store said: no store, no clock, no file.

:mod:`hacfg.agent.group.protocol` reads the keys and calls these; the rules for one round's verdict
are :func:`hacfg.agent.rounds.verdict_for`, the same on one node and many.
"""

from __future__ import annotations

from typing import Any

from hacfg.agent.records.state import NodeState
from hacfg.agent.rounds import Outcome, Plan, Verdict, verdict_for
from hacfg.restart.policy import RETRY_ELSEWHERE, Policy
from hacfg.restart.vocabulary import Action, Ending


def merged(hellos: list[NodeState], own: NodeState) -> tuple[NodeState, int, list[int]]:
    """The group's state from every node's hello (the newest round's counters), the round the group
    is in, and the nodes whose agent stopped during that round (it is judged before any other)."""
    newest = max(hellos, key=lambda s: s.round)
    state = NodeState(newest.budgets, newest.round, own.running and own.round == newest.round)
    interrupted = [rank for rank, s in enumerate(hellos) if s.running and s.round == newest.round]
    return state, newest.round if interrupted else newest.round + 1, interrupted


def interrupted_verdict(
    state: NodeState, rank: int, resume_position: tuple[int, ...] | None, policy: Policy
) -> Verdict:
    """The verdict of a round the store's restart interrupted: node ``rank``'s agent stopped in it."""
    plan = Plan(round=state.round, budgets=state.budgets, resume_position=resume_position)
    reason = f"the agent of node {rank} stopped during round {state.round} (the group's store restarted)"
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
