"""One round's workers on this node: started (warm or cold) with the round's environment, supervised
until they end, asked for their evidence at a hang, watched for a straggler; how they ended.

The loop (:mod:`hacfg.agent.loop`) decides what a round is; this runs it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hacfg import heartbeat, memory
from hacfg.agent import checkpoints
from hacfg.agent.classify import classify
from hacfg.agent.culprit import inquiry, straggler
from hacfg.agent.culprit.analysis import NodeEvidence
from hacfg.agent.group import rendezvous
from hacfg.agent.group.signing import without_secret
from hacfg.agent.journal import Journal, rounded
from hacfg.agent.process import leftovers
from hacfg.agent.process.accelerator import nvml_probe
from hacfg.agent.process.attempt import Limit, Supervisor, reported_step
from hacfg.agent.process.warm import WarmStarts
from hacfg.agent.records.state import StateStore, stamp
from hacfg.agent.rounds import Outcome, Plan, Rounds, attempt_env
from hacfg.plan.model import straggler_price
from hacfg.plugin.recovery import Failure
from hacfg.restart.learning import Learned
from hacfg.restart.policy import RETRY_ELSEWHERE, Budgets
from hacfg.restart.vocabulary import Ending, StragglerAction

if TYPE_CHECKING:
    from hacfg.agent.options import RunOptions


# torch's CPU allocator gives buffers of 2 MB or more transparent huge pages: a restarted rank makes
# its state again, and 1 GB faults in 0.26 s instead of 4.5 s on a busy node whose kernel grants them
# on request only, as most distributions' do. Set before the first import (a warm interpreter's
# too), since torch reads it once; the job's own setting wins.
HUGE_PAGES = {"THP_MEM_ALLOC_ENABLE": "1"}


@dataclass
class Workers:
    """What the workers of every round on this node share: the command, its rules, where it records."""

    options: RunOptions
    rank: int  # this node's
    rounds: Rounds
    store: StateStore
    heartbeat: Path
    journal: Journal
    warm: WarmStarts
    learned: Learned
    began: float  # when the job began (for what is left of its compute)
    echo: Callable[[str], None]
    session: int | None = None  # the running attempt's session (its leader's pid)
    moving: tuple[int, str] | None = None  # the straggler's node, and why the attempt is stopped to move

    def run(self, plan: Plan, resume: checkpoints.Resume, tier: Path | None) -> Outcome:
        """The workers of one round on this node, resuming from ``resume``; how they ended."""
        policy, journal, budgets = self.options.policy, self.journal, plan.budgets
        started = time.time()
        env = {
            **HUGE_PAGES,
            **without_secret(os.environ),
            **attempt_env(plan, self.heartbeat, policy),
            "HACFG_RESUME_FROM": resume.path or "",
            "HACFG_RESUME_TIER": resume.tier,
            memory.DIR_ENV: str(tier or ""),
            memory.DISK_ENV: str(policy.checkpoint_path) if tier and policy.checkpoint_path else "",  # MemoryTier's
            memory.COPY_EVERY_ENV: str(plan.memory.copy_every) if plan.memory else "",
            leftovers.TREE_ENV: leftovers.tree_mark(self.store.directory),
            **(rendezvous.worker_env(budgets.attempt, plan.workers_port) if plan.workers_port else {}),
        }
        for doubt in plan.doubts:
            journal.checkpoint_doubt(plan, doubt)
        detect = policy.hang_detect
        folder = inquiry.folder_for(self.store.directory, budgets.attempt) if detect else None
        if folder is not None:
            env = inquiry.armed(env, folder)

        over = threading.Event()  # the attempt ended
        pacing = (
            straggler.Watch(
                self.rank,
                sample=lambda: inquiry.arrivals(folder),
                share=self.rounds.pace,
                found=lambda pace: self._straggler(plan, started, pace, supervisor, over),
            )
            if folder is not None
            else None
        )

        def witness() -> NodeEvidence:
            if pacing is not None:
                pacing.stop()  # one asker at a time: the stacks signal must not meet the hook's thread at work
            return self._witness(folder, started)

        start = self.warm.start(env)
        journal.attempt_start(plan, resume.path, resume.tier, start.how, start.reason)
        unseen = resume.missing
        if unseen:
            start.discard()
            self.echo(f"[hacfg] {unseen}")
            journal.attempt_exit(plan, Ending.ENVIRONMENT, reason=unseen, exit_code=None)
            return Outcome(self.rank, Ending.ENVIRONMENT, unseen, RETRY_ELSEWHERE)
        self.session = None
        supervisor = Supervisor(
            list(self.options.command),
            env,
            hang_timeout=policy.hang_timeout if detect else None,
            first_hang_timeout=policy.first_hang_timeout if detect else None,
            phase_timeouts=dict(policy.phase_timeout),
            learned=self.learned if detect and policy.learn_hang_timeouts else None,
            heartbeat=self.heartbeat,
            grace=policy.grace,
            on_hang=lambda tail, idle, limit, phase, steps: self._hang(
                budgets, tail, idle, limit, phase, steps, witness
            ),
            on_signal=lambda signum: journal.signal(signum, budgets.attempt),
            on_milestone=lambda event, after: journal.milestone(event, plan, after),
            on_start=self._started,
            accelerator=nvml_probe() if detect and policy.accelerator in ("gpu", None) else None,  # None: unknown
            launch=start,
            keep=self.warm.keep,
        )
        command = self.options.command[0]
        try:
            with self.rounds.watch(supervisor.request_stop, witness), pacing or contextlib.nullcontext():
                result = supervisor.run()
            over.set()
        except OSError as err:  # the command could not be started at all
            self.echo(f"[hacfg] cannot run {command!r}: {err.strerror or err}")
            journal.attempt_exit(plan, Ending.USER, exit_code=127, reason=f"cannot start: {err}")
            return Outcome(self.rank, Ending.USER, f"cannot start {command!r}: {err.strerror or err}", 127)
        failure = Failure(result.exit_code, result.signal, result.tail, result.hung)
        if failure.code or failure.hung or budgets.attempt > 1:  # a first clean run's output stays the command's own
            self.echo(f"[hacfg] attempt {budgets.attempt} ended: {failure.describe()}")  # what hacfg diagnose reads
        ended = {
            "exit_code": result.exit_code,
            "signal": signal_name(result.signal),
            "duration": round(result.duration, 3),
            "stopping": rounded(result.stopping),
            "gathering": rounded(result.gathering),
            "step": result.step,
            "checkpoints": saved_since(policy.checkpoint_path, started),
        }
        if result.interrupted is not None:
            reason = f"agent received {signal_name(result.interrupted)}"
            journal.attempt_exit(plan, Ending.STOPPED, reason=reason, **ended)
            return Outcome(self.rank, Ending.STOPPED, reason, 128 + result.interrupted)
        if result.exit_code == 0 and not result.hung:
            journal.attempt_exit(plan, Ending.SUCCESS, **ended)
            return Outcome(self.rank, Ending.SUCCESS, "finished", 0)
        if self.moving is not None and result.stop_reason == self.moving[1]:
            node, reason = self.moving
            journal.attempt_exit(plan, Ending.STRAGGLER, reason=reason, **ended)
            return Outcome(self.rank, Ending.STRAGGLER, reason, RETRY_ELSEWHERE, seen_on=node)
        if result.stop_reason is not None:  # the round ended elsewhere first
            journal.attempt_exit(plan, Ending.PEER, reason=result.stop_reason, **ended)
            return Outcome(self.rank, Ending.ENVIRONMENT, result.stop_reason, failure.code, peer=True)
        verdict = classify(failure)
        journal.plugin_failures()
        journal.attempt_exit(
            plan,
            verdict.cause,
            reason=verdict.reason,
            classifier=verdict.classifier,
            peer=verdict.peer,
            evidence=[line[-500:] for line in verdict.evidence],
            not_counted=list(verdict.not_counted),
            relocate=verdict.relocate,
            **ended,
        )
        return Outcome(
            self.rank, Ending(verdict.cause), verdict.reason, failure.code, peer=verdict.peer, relocate=verdict.relocate
        )

    def _started(self, pid: int) -> None:
        """Record the attempt's session, so an agent after this one can end it however this one dies."""
        self.session = pid
        try:
            leftovers.remember(self.store.directory, pid, self.store.key)
        except OSError as err:
            record = self.store.directory / leftovers.RECORD
            self.journal.state_unwritable(
                "record the attempt's session in", record, err, "the next agent finds it by its mark"
            )

    def _witness(self, folder: Path | None, since: float) -> NodeEvidence:
        """This node's evidence of a hang: what its ranks show now, and the step its heartbeat last said."""
        step = reported_step(self.heartbeat, since)
        if folder is None or self.session is None:
            return NodeEvidence(self.rank, (), step)
        return inquiry.collect(self.session, folder, self.rank, step, py_spy=self.options.py_spy)

    def _hang(
        self,
        budgets: Budgets,
        tail: tuple[str, ...],
        idle: float,
        limit: Limit,
        phase: str,
        steps: bool,
        witness: Callable[[], NodeEvidence],
    ) -> None:
        """``limit`` is the timeout that fired: the initial one before the first sign of life, else the
        one of the ``phase`` the command last reported, declared, learned or hang.timeout; ``steps``:
        the command reported steps, so only progress counted. Before the stop signal, every node's
        evidence is gathered, so the verdict can name the culprit."""
        self.journal.hang(budgets.attempt, limit, steps, phase, idle, tail, heartbeat.TRAIN)
        self.rounds.hung(witness)

    def _straggler(
        self, plan: Plan, started: float, pace: straggler.Pace, supervisor: Supervisor, over: threading.Event
    ) -> None:
        """A rank straggles (seen where the group's samples meet): say so once, price what to do,
        and to move the job, stop the round at its next complete checkpoint."""
        policy = self.options.policy
        price = straggler_price(
            pace.slowdown, self._remaining(), policy.restart_time, pace.ranks, (pace.period, pace.before)
        )
        self.journal.straggler(plan, pace, reported_step(self.heartbeat, started), price)
        if price.action == StragglerAction.RESTART_ELSEWHERE:
            threading.Thread(
                target=self._move_at_next_checkpoint, args=(pace, supervisor, over), daemon=True, name="hacfg-move"
            ).start()

    def _move_at_next_checkpoint(self, pace: straggler.Pace, supervisor: Supervisor, over: threading.Event) -> None:
        """Stop the attempt once a checkpoint newer than the current one is complete: nothing is lost."""
        path = self.options.policy.checkpoint_path
        before = checkpoints.newest_complete(path)
        while supervisor.stop_reason is None and not over.wait(1.0):
            found = checkpoints.newest_complete(path)
            if found is not None and (before is None or found.position > before.position):
                why = f"straggler on node {pace.node} rank {pace.rank}: "
                why += f"moving the job elsewhere after step {found.step}"
                self.moving = pace.node, why
                supervisor.request_stop(why)
                return

    def _remaining(self) -> float | None:
        """The compute the run still needs, at most: job.duration less the wall time since the job
        began (which includes failures and restarts, so this errs towards keeping)."""
        duration = self.options.policy.duration
        return None if duration is None else duration - (time.time() - self.began)


def signal_name(signum: int | None) -> str | None:
    return signal.Signals(signum).name if signum else None


def saved_since(root: Path | None, since: float) -> list[dict[str, Any]]:
    """The complete checkpoints written since ``since`` (their mtimes and, when known, how long each
    took to save), in step order: what the attempt saved."""
    saved = []
    for found in sorted(checkpoints.complete(root), key=lambda c: c.position):
        try:
            mtime = found.path.stat().st_mtime
        except OSError:
            continue  # removed by the script's own retention since it was listed
        if mtime >= since:
            record: dict[str, Any] = {
                "step": found.step,
                "path": str(found.path),
                "time": stamp(datetime.fromtimestamp(mtime, UTC)),
            }
            seconds = checkpoints.save_seconds(found.path)
            if seconds is not None:
                record["save_s"] = round(seconds, 3)
            saved.append(record)
    return saved
