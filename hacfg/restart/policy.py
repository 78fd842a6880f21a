"""The restart rules of the platform, as a pure function of how an attempt ended and the budgets.

- environment fault: restart in place; counts against ``restart.max``.
- user error: restart only with ``restart.unconditional``, at most 3 in a row; counts.
- hang: restart with ``restart.on_hang``, at most 3 in a row; does not count.
- a full disk: given up at once, saying what to free: a restart writes to the same storage.
- a fault no restart on the same node can fix (a GPU fallen off the bus): the job moves at once.
- a streak ends when an attempt makes progress (a newer complete checkpoint).
- a spent budget for environment faults or hangs asks for a reschedule (exit 138);
  giving up on a user error exits with the command's own code.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from hacfg.restart.vocabulary import Action, Cause
from hacfg.scenario import modelarts as ma

if TYPE_CHECKING:
    from hacfg.scenario.model import HAConfig

RETRY_ELSEWHERE = 138  # Kubeflow's user-defined retryable code; the volcano target restarts the pod or job
DISK_FULL = (
    "disk full: a restart writes to the same storage; free space on it (or raise its quota), then start the job again"
)


@dataclass(frozen=True)
class Policy:
    """What the agent may do, from the scenario file and command-line overrides."""

    max_restarts: int = 0
    unconditional: bool = False
    hang_retry: bool = False  # restart.on_hang
    pod_reschedules: int = 0
    hang_detect: bool = False
    hang_timeout: float = timedelta(minutes=ma.DEFAULT_HANG_MINUTES).total_seconds()
    initial_hang_timeout: float | None = None  # until the training's first line or heartbeat; default 2x
    phase_timeout: tuple[tuple[str, float], ...] = ()  # (phase, seconds): hacfg.heartbeat phases but training
    learn_hang_timeouts: bool = False  # learn each phase's timeout (hacfg.restart.learning); a declared one wins
    learn_floor: float = 60.0
    learn_beyond_hang_timeout: bool = False
    checkpoint_path: Path | None = None
    checkpoint_interval: float | None = None  # seconds between saves, as the scenario says; None: not said
    precheck: bool = False
    accelerator: str | None = None  # None: not known without a scenario file
    cards: int | None = None  # accelerator cards per node the job asks for (job.cards, or its flavor); None: not said
    network: str = "ethernet"
    nodes: int = 1
    grace: float = 30.0
    # What prices a straggler (hacfg.plan.model.straggler_price); None: not said
    duration: float | None = None  # job.duration: the compute the run needs
    restart_time: float | None = None  # reliability.restart_time

    @property
    def first_hang_timeout(self) -> float:
        return self.initial_hang_timeout if self.initial_hang_timeout is not None else 2 * self.hang_timeout


@dataclass
class Budgets:
    """The counters that survive an agent restart."""

    attempt: int = 0  # attempts started
    restarts: int = 0  # every restart, of any kind (HACFG_RESTART_COUNT)
    counted: int = 0  # restarts that count against restart.max
    user_streak: int = 0  # unconditional restarts in a row
    hang_streak: int = 0  # hang restarts in a row


@dataclass(frozen=True)
class Decision:
    action: Action
    reason: str
    exit_code: int | None = None  # set when the agent stops


def decide(
    cause: Cause, budgets: Budgets, policy: Policy, *, progressed: bool, command_code: int, relocate: bool = False
) -> Decision:
    """Apply one attempt's outcome to ``budgets`` (in place) and say what happens next. ``relocate``:
    the fault is one no restart on the same node can fix."""
    cap = ma.CONSECUTIVE_RESTART_CAP
    if progressed:
        budgets.user_streak = budgets.hang_streak = 0
    if cause == Cause.HANG:
        if policy.hang_retry and budgets.hang_streak < cap:
            budgets.hang_streak += 1
            return _restart(budgets, f"hang restart {budgets.hang_streak} of {cap} in a row (not counted)")
        if not policy.hang_retry:
            return (
                _escalate(policy, "hung; restart upon suspension is off")
                if policy.max_restarts
                else _give_up("hung; restart upon suspension is off", command_code)
            )
        return _escalate(policy, f"{cap} hang restarts in a row")
    if cause == Cause.DISK_FULL:
        return _give_up(DISK_FULL, command_code)
    if cause == Cause.ENVIRONMENT:
        if relocate and policy.max_restarts:
            return _escalate(policy, "a fault no restart on this node can fix")
        if budgets.counted < policy.max_restarts:
            budgets.counted += 1
            return _restart(budgets, f"environment fault: restart {budgets.counted} of {policy.max_restarts}")
        if not policy.max_restarts:
            return _give_up("environment fault; auto restart is off", command_code)
        return _escalate(policy, f"restart budget of {policy.max_restarts} spent")
    if not policy.unconditional:
        return _give_up("user error; unconditional restart is off", command_code)
    if budgets.user_streak >= cap:
        return _give_up(f"{cap} unconditional restarts in a row", command_code)
    if budgets.counted >= policy.max_restarts:
        return _give_up(f"restart budget of {policy.max_restarts} spent", command_code)
    budgets.counted += 1
    budgets.user_streak += 1
    return _restart(
        budgets,
        f"unconditional restart {budgets.user_streak} of {cap} in a row, {budgets.counted} of {policy.max_restarts}",
    )


def _restart(budgets: Budgets, reason: str) -> Decision:
    budgets.restarts += 1
    return Decision(Action.PROC_RESTART, reason)


def _escalate(policy: Policy, reason: str) -> Decision:
    action = Action.POD_RESCHEDULE if policy.pod_reschedules else Action.JOB_RESCHEDULE
    return Decision(action, f"{reason}: retry elsewhere", RETRY_ELSEWHERE)


def _give_up(reason: str, command_code: int) -> Decision:
    return Decision(Action.GIVE_UP, reason, command_code)


def policy_from_config(config: HAConfig) -> Policy:
    """The agent's policy for a validated scenario; an ``obs://`` checkpoint path is not local, so not scanned.

    Pre-checks run only with auto restart on, as on the platform ("with job-retry-num 0 the
    environment pre-check will not be enabled")."""
    path = config.checkpoint.path
    return Policy(
        max_restarts=config.restart.max,
        unconditional=config.restart.unconditional,
        hang_retry=config.restart.on_hang,
        pod_reschedules=config.restart.pod_reschedules,
        hang_detect=config.hang.detect,
        hang_timeout=config.hang.timeout.total_seconds(),
        phase_timeout=tuple((name, limit.total_seconds()) for name, limit in config.hang.phases.items()),
        learn_hang_timeouts=config.hang.learn,
        learn_floor=config.hang.learn_floor.total_seconds(),
        learn_beyond_hang_timeout=config.hang.learn_beyond_timeout,
        checkpoint_path=Path(path) if path and "://" not in path else None,
        checkpoint_interval=config.checkpoint.interval.total_seconds() if config.checkpoint.interval else None,
        precheck=config.precheck and config.restart.max > 0,
        accelerator=config.job.accelerator,
        cards=config.job.cards_per_node,
        network=config.job.network,
        nodes=config.job.nodes,
        duration=config.job.duration.total_seconds() if config.job.duration else None,
        restart_time=config.reliability.restart_time.total_seconds() if config.reliability.restart_time else None,
    )
