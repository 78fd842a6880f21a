"""A follower under a per-card launch: the agent of one card that does not speak for its node.

It keeps no state and makes no decision (:mod:`hacfg.agent.group.cards` says who does): it runs its
card's process for each round the node's speaker plans, with the round's numbers, stops it when
told, says when it hangs and how it ended, and exits with the job's final verdict. Its own folder
(``card-<device>`` beside the node's state) holds the card's heartbeat and the record of its
attempt, so that what an earlier agent of this card left running is ended before anything starts.
A follower imports neither torch nor the plugins: the node's speaker, which does, judges.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from hacfg.agent.group import cards, rendezvous
from hacfg.agent.group.channel import GroupLost
from hacfg.agent.group.signing import JobSecret, NoSecret, without_secret
from hacfg.agent.process import leftovers
from hacfg.agent.process.attempt import Limit, Supervisor, become_subreaper
from hacfg.agent.records.identity import job_identity
from hacfg.agent.rounds import Plan, attempt_env
from hacfg.plugin.recovery import TAIL_LINES
from hacfg.restart.policy import RETRY_ELSEWHERE

if TYPE_CHECKING:
    from hacfg.agent.group.ranktable import Card
    from hacfg.agent.options import RunOptions

CANNOT_JOIN = 2  # the speaker refused this agent: two agents for one card, or a card that is not the node's


def follow(options: RunOptions, card: Card, state_dir: Path, echo: Callable[[str], None]) -> int:
    """Run ``card``'s process in every round its node's speaker plans; the job's exit code."""
    folder = cards.card_folder(state_dir, card)
    folder.mkdir(parents=True, exist_ok=True)
    secret = JobSecret(os.environ, folder, job_identity(os.environ), create=True, timeout=0)
    try:
        key = secret.file_key()
    except NoSecret as err:  # a full or read-only folder: this agent's record is for itself alone
        echo(f"[hacfg] {card.name()}: {err}; a later agent of this card finds its processes by their mark alone")
        secret.for_this_agent()
        key = secret.file_key()
    ended = leftovers.end_leftovers(folder, key)
    if ended:
        echo(f"[hacfg] {card.name()}: ended {len(ended)} processes left by an earlier agent: {ended}")
    echo(f"[hacfg] {card.name()} of node {card.server}: the node's agent of {card.name(0)} speaks for it")
    try:
        speaker = cards.Speaker(card, state_dir, options.rdzv_timeout)
    except GroupLost as err:
        echo(f"[hacfg] {err}; exiting {RETRY_ELSEWHERE} so the platform restarts the job")
        return RETRY_ELSEWHERE
    become_subreaper()
    try:
        while True:
            try:
                message = speaker.next()
            except cards.Refused as err:
                echo(f"[hacfg] {card.name()}: the node's speaker refused this agent: {err}")
                return CANNOT_JOIN
            if message is None:
                echo(f"[hacfg] {card.name()}: lost the node's speaker; exiting {RETRY_ELSEWHERE}")
                return RETRY_ELSEWHERE
            verdict = message.get("verdict")
            if isinstance(verdict, dict) and verdict.get("exit_code") is not None:
                secret.forget()
                return int(verdict["exit_code"])
            if "plan" in message:
                _attempt(options, card, folder, key, speaker, Plan.from_json(message["plan"]), echo)
    finally:
        speaker.close()


def _attempt(
    options: RunOptions,
    card: Card,
    folder: Path,
    key: bytes,
    speaker: cards.Speaker,
    plan: Plan,
    echo: Callable[[str], None],
) -> None:
    """Run the card's process for ``plan``'s round and report how it ended."""
    policy = options.policy
    heartbeat = folder / "heartbeat"
    env = {
        **without_secret(os.environ),
        **attempt_env(plan, heartbeat, policy),
        leftovers.TREE_ENV: leftovers.tree_mark(folder),
        **(rendezvous.worker_env(plan.budgets.attempt, plan.workers_port) if plan.workers_port else {}),
    }
    detect = policy.hang_detect

    def hung(tail: tuple[str, ...], idle: float, limit: Limit, phase: str, steps: bool) -> None:
        speaker.send("hung", {"round": plan.round, "idle": round(idle, 3), "timeout": limit.seconds, "phase": phase})

    supervisor = Supervisor(
        list(options.command),
        env,
        hang_timeout=policy.hang_timeout if detect else None,
        first_hang_timeout=policy.first_hang_timeout if detect else None,
        phase_timeouts=dict(policy.phase_timeout),
        heartbeat=heartbeat,
        grace=policy.grace,
        on_hang=hung,
        on_start=lambda pid: _remember(folder, pid, key),
    )
    try:
        with speaker.running_round(plan.round, supervisor.request_stop):
            result = supervisor.run()
    except OSError as err:  # the command could not be started
        report = {"exit_code": 127, "signal": None, "hung": False, "tail": [f"cannot start: {err.strerror or err}"]}
        speaker.send("ended", {"round": plan.round, **report, "stopped": None, "interrupted": None, "duration": 0})
        return
    if result.exit_code != 0 or result.hung or plan.budgets.attempt > 1:  # as the node's own agent says it
        how = f"killed by {signal.Signals(result.signal).name}" if result.signal else f"exit {result.exit_code}"
        echo(f"[hacfg] {card.name()}: attempt {plan.budgets.attempt} ended: {'hung, ' if result.hung else ''}{how}")
    speaker.send(
        "ended",
        {
            "round": plan.round,
            "exit_code": result.exit_code,
            "signal": result.signal,
            "hung": result.hung,
            "tail": [line[-500:] for line in result.tail[-TAIL_LINES:]],
            "stopped": result.stop_reason,
            "interrupted": result.interrupted,
            "duration": round(result.duration, 3),
        },
    )


def _remember(folder: Path, pid: int, key: bytes) -> None:
    with contextlib.suppress(OSError):  # unrecorded, the next agent still finds the attempt by its mark
        leftovers.remember(folder, pid, key)
