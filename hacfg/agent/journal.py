"""The agent's journal: the only writer of its events, one method for each kind the state table
of :mod:`hacfg.restart.vocabulary` names, with the line a person reads beside it where there is one.

Whatever the agent observes or decides reaches the log, the metrics and the plugins' event hook
through here, so a record's fields are spelled in one place.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from hacfg.agent.culprit.analysis import describe_culprit
from hacfg.agent.records.events import EventLog
from hacfg.agent.records.state import Left, stamp
from hacfg.plugin import manager as plugin_manager
from hacfg.restart.vocabulary import Action, Cause, Ending, Event

if TYPE_CHECKING:
    from hacfg.agent.checkpoints import Written
    from hacfg.agent.culprit import straggler
    from hacfg.agent.process.attempt import Limit
    from hacfg.agent.rounds import Plan, Verdict
    from hacfg.plan.model import StragglerPrice
    from hacfg.plugin.precheck import PrecheckResult
    from hacfg.plugin.recovery import SavedCheckpoint
    from hacfg.restart.policy import Budgets

# The platform's log keyword for a restarted job that ends in failure (ha-configuration seed).
FAILED_AFTER_RESTARTS = "error,exiting"


class Journal:
    """This node's events, in ``path``; ``echo`` says the agent's lines; ``node`` is its rank in a group."""

    def __init__(self, path: Path, *, echo: Callable[[str], None], node: int | None, max_restarts: int):
        self.log = EventLog(path, echo=echo, node=node)
        self.log.listeners.append(self._tell_plugins)
        self.echo = echo
        self.max_restarts = max_restarts
        self.pending: list[tuple[Event, dict[str, Any]]] = []  # found before the agent started: written after it
        self.unwritable: set[Path] = set()  # files of the state folder that could not be written, said once
        # inside hacfg_agent_event: its own failures are not told again; per thread, as the save
        # watch writes its event from its own
        self._telling = threading.local()

    @property
    def path(self) -> Path:
        return self.log.path

    @property
    def listeners(self) -> list[Callable[[dict[str, Any]], None]]:
        return self.log.listeners

    def counters(self, budgets: Budgets) -> dict[str, int]:
        return {**asdict(budgets), "max_restarts": self.max_restarts}

    # -- the agent's life -----------------------------------------------------------------------

    def agent_start(self, pid: int, command: list[str], job: str | None, began: float, budgets: Budgets) -> None:
        when = stamp(datetime.fromtimestamp(began, UTC))
        self.log.write(Event.AGENT_START, pid=pid, command=command, job=job, began=when, **self.counters(budgets))
        for event, fields in self.pending:
            self.log.write(event, **fields)
        self.pending.clear()

    def agent_exit(self, code: int, budgets: Budgets | None = None) -> int:
        self.log.write(Event.AGENT_EXIT, exit_code=code, **(self.counters(budgets) if budgets else {}))
        return code

    def state_recovered(self, detail: str) -> None:
        self.echo(f"[hacfg] {detail}")
        self.log.write(Event.STATE_RECOVERED, detail=detail)

    def state_left(self, detail: str, left: Left) -> None:
        self.echo(f"[hacfg] {detail}")
        self.log.write(Event.STATE_LEFT, detail=detail, job=left.job, ended=left.ended)

    def state_unwritable(self, what: str, path: Path, err: OSError, meanwhile: str) -> None:
        """A file the agent could not write: one line and one event the first time, then silence."""
        if path not in self.unwritable:
            self.unwritable.add(path)
            reason = err.strerror or str(err)
            self.echo(f"[hacfg] cannot {what} {path}: {reason}; supervision continues, {meanwhile}")
            self.log.write(Event.STATE_UNWRITABLE, path=str(path), reason=reason)

    def later(self, event: Event, **fields: Any) -> None:
        """An event found before the agent started (its log opens with ``agent_start``)."""
        self.pending.append((event, fields))

    def leftovers_ended(self, pids: list[int], folder: Path) -> None:
        self.echo(f"[hacfg] ended {len(pids)} processes left by an earlier agent on {folder}: {pids}")
        self.log.write(Event.LEFTOVERS_ENDED, pids=pids)

    def precheck(self, result: PrecheckResult) -> None:
        self.echo(result.line())
        self.log.write(
            Event.PRECHECK,
            item=result.name,
            status=result.status,
            value=result.value,
            need=result.need,
            detail=result.detail,
        )

    def group_lost(self, reason: str, rejected: tuple[str, str] | None, code: int) -> int:
        """The group cannot go on (its store is gone, or a value failed its check): the platform
        restarts the job. ``rejected``: the key and why, when a value was refused."""
        self.echo(f"[hacfg] {reason}; exiting {code} so the platform restarts the job")
        if rejected is not None:
            self.log.write(Event.GROUP_REJECTED, key=rejected[0], reason=rejected[1])
        self.log.write(Event.DECISION, action=Action.JOB_RESCHEDULE, cause=Cause.ENVIRONMENT, reason=reason)
        return self.agent_exit(code)

    # -- an attempt -----------------------------------------------------------------------------

    def checkpoint_doubt(self, plan: Plan, doubt: str) -> None:
        self.echo(f"[hacfg] {doubt}")
        self.log.write(Event.CHECKPOINT_DOUBT, round=plan.round, resume_from=plan.resume_from, detail=doubt)

    def attempt_start(self, plan: Plan, resume_from: str | None, tier: str, start: str, why: str | None) -> None:
        self.log.write(
            Event.ATTEMPT_START,
            round=plan.round,
            resume_from=resume_from,
            resume_tier=tier,
            start=start,
            start_reason=why,
            **self.counters(plan.budgets),
        )

    def milestone(self, event: Event, plan: Plan, after: float) -> None:
        """The attempt's first activity or first step, ``after`` seconds in."""
        self.log.write(event, round=plan.round, attempt=plan.budgets.attempt, after=round(after, 3))

    def signal(self, signum: int, attempt: int) -> None:
        self.log.write(Event.SIGNAL, signal=signal.Signals(signum).name, attempt=attempt)

    def hang(
        self, attempt: int, limit: Limit, steps: bool, phase: str, idle: float, tail: tuple[str, ...], training: str
    ) -> None:
        """``limit`` fired: the initial one, or the one of ``phase``; ``steps``: only progress counted."""
        within = f" in phase {phase}" if phase != training else ""
        quiet = "no step progress" if steps else "no output and no heartbeat"
        learned = " (learned)" if limit.source == "learned" else ""
        self.echo(f"[hacfg] attempt {attempt} hung{within}: {quiet} for {limit.seconds:g}s{learned}; stopping it")
        self.log.write(
            Event.HANG,
            attempt=attempt,
            timeout=round(limit.seconds, 3),
            timeout_from=limit.source,
            learned=limit.source == "learned",
            progress=steps,
            phase=phase,
            idle=round(idle, 3),
            last_output=[line[-500:] for line in tail[-10:]],
        )

    def straggler(self, plan: Plan, pace: straggler.Pace, step: int | None, price: StragglerPrice) -> None:
        where = f"node {pace.node} rank {pace.rank}"
        self.echo(
            f"[hacfg] straggler: {where} computes {pace.slowdown:g}x as long as the others over "
            f"{pace.collectives} collectives (score {pace.score:g}); {price.action}: {price.reason}"
        )
        self.log.write(
            Event.STRAGGLER,
            round=plan.round,
            attempt=plan.budgets.attempt,
            node=pace.node,
            rank=pace.rank,
            score=pace.score,
            slowdown=pace.slowdown,
            collectives=pace.collectives,
            period=pace.period,
            before=pace.before,
            since=stamp(datetime.fromtimestamp(pace.since, UTC)),
            step=step,
            action=price.action,
            reason=price.reason,
            cost=rounded(price.cost),
        )

    def checkpoint_overdue(
        self, path: Path | None, interval: float, training: float, newest: SavedCheckpoint | None
    ) -> None:
        resume = f"from {newest.path}" if newest else "from the start"
        self.echo(
            f"[hacfg] no new complete checkpoint under {path} in {training:.0f}s of training, "
            f"twice checkpoint.interval ({interval:g}s): does the script save there? A restart would resume {resume}"
        )
        self.log.write(
            Event.CHECKPOINT_OVERDUE, path=str(path), interval=interval, training=round(training, 3),
            newest=str(newest.path) if newest else None,
        )

    def checkpoint_written(self, step: int, written: Written) -> None:
        """A step of the memory tier written to disk in the background (from the tier's own thread)."""
        if written.error is not None:
            self.echo(f"[hacfg] step {step} of the memory tier could not be written to disk: {written.error}")
        self.log.write(
            Event.CHECKPOINT_WRITTEN, step=step, path=str(written.path) if written.path else None,
            seconds=round(written.seconds, 3), bytes=written.nbytes, error=written.error,
        )

    def attempt_exit(self, plan: Plan, cause: Ending | str, **fields: Any) -> None:
        self.log.write(Event.ATTEMPT_EXIT, round=plan.round, cause=cause, **fields)

    def card_exit(self, fields: dict[str, Any]) -> None:
        self.log.write(Event.CARD_EXIT, **fields)

    # -- a round's verdict ----------------------------------------------------------------------

    def decision(self, verdict: Verdict) -> None:
        """The round's verdict, identical on every node, and the lines that say it."""
        culprit = (
            {"culprit": verdict.culprit.to_json() if verdict.culprit else None, "culprit_note": verdict.culprit_note}
            if verdict.cause == Ending.HANG
            else {}
        )
        self.log.write(
            Event.DECISION,
            round=verdict.round,
            cause=verdict.cause,
            cause_node=verdict.rank,
            action=verdict.action,
            reason=verdict.detail,
            cause_reason=verdict.reason,
            progressed=verdict.progressed,
            checkpoint=verdict.resume_from,
            **self.counters(verdict.budgets),
            **culprit,
        )
        if verdict.cause == Ending.HANG:
            self.echo(f"[hacfg] {describe_culprit(verdict.culprit, verdict.culprit_note)}")
        if verdict.action != Action.SUCCESS:
            where = f" on node {verdict.rank}" if self.log.node is not None and verdict.rank is not None else ""
            self.echo(
                f"[hacfg] attempt {verdict.budgets.attempt} {verdict.cause}{where} ({verdict.reason}): "
                f"{verdict.action}, {verdict.detail}"
            )
        if verdict.action == Action.GIVE_UP and verdict.budgets.restarts:
            self.echo(
                f"[hacfg] {FAILED_AFTER_RESTARTS}: the job failed after {verdict.budgets.restarts} restart(s); "
                f"last cause: {verdict.cause}, {verdict.reason}"
            )

    # -- plugins --------------------------------------------------------------------------------

    def call_plugins(self, hook: str, **arguments: Any) -> None:
        """A recovery hook: every implementation runs; one that raises is a ``plugin_failure`` event."""
        for _ in plugin_manager.get().results(hook, **arguments):
            pass  # they return nothing the agent uses
        self.plugin_failures()

    def plugin_failures(self) -> None:
        """A plugin that broke is one line and one event, once; the agent carries on without it."""
        for failure in plugin_manager.drain():
            self.echo(f"[hacfg] {failure}")
            self.log.write(Event.PLUGIN_FAILURE, plugin=failure.plugin, hook=failure.hook, error=failure.error)

    def _tell_plugins(self, record: dict[str, Any]) -> None:
        if not getattr(self._telling, "active", False):
            self._telling.active = True
            try:
                self.call_plugins("hacfg_agent_event", event=MappingProxyType(record))
            finally:
                self._telling.active = False


def rounded(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 3)
