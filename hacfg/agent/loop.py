"""The agent loop: pre-checks, then rounds of plan -> attempt -> verdict, until one is final.

The states it passes through, and the event each writes, are tabled in
:mod:`hacfg.restart.vocabulary`.

A round's plan and verdict come from :class:`~hacfg.agent.rounds.SingleNodeRounds` on one node and
from :class:`~hacfg.agent.group.protocol.GroupRounds` on several, so every node of a job starts each round
from the same checkpoint and ends it with the same decision.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, replace
from datetime import UTC, datetime
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from hacfg import heartbeat, memory
from hacfg.agent import checkpoints
from hacfg.agent.classify import classify
from hacfg.agent.culprit import inquiry, straggler
from hacfg.agent.culprit.analysis import NodeEvidence, describe_culprit
from hacfg.agent.group import rendezvous
from hacfg.agent.group.channel import GroupLost, GroupRejected
from hacfg.agent.group.signing import JobSecret, NoSecret, without_secret
from hacfg.agent.prechecks import run_prechecks
from hacfg.agent.process import leftovers
from hacfg.agent.process.accelerator import nvml_probe
from hacfg.agent.process.attempt import Limit, Supervisor, become_subreaper, reported_step
from hacfg.agent.process.warm import WarmStarts
from hacfg.agent.records.identity import job_identity
from hacfg.agent.records.state import EventLog, NodeState, StateStore, refuse_links, stamp
from hacfg.agent.rounds import Outcome, Plan, Rounds, SingleNodeRounds, Verdict, attempt_env, resume_visible
from hacfg.plan.model import straggler_price
from hacfg.plugin import manager as plugin_manager
from hacfg.plugin.precheck import PrecheckContext, PrecheckSettings
from hacfg.plugin.recovery import Failure, Restart, SavedCheckpoint
from hacfg.restart.learning import Learned
from hacfg.restart.policy import RETRY_ELSEWHERE, Budgets, Policy
from hacfg.restart.vocabulary import Action, Cause, Ending, Event, StragglerAction
from hacfg.untrusted import printable

if TYPE_CHECKING:
    from hacfg.agent.options import RunOptions
    from hacfg.agent.records.metrics import Metrics

HEARTBEAT_FILE = "heartbeat"
WARM_LOG = "warm.log"  # the warm interpreters' own output: what they imported, why one could not serve
# The platform's log keyword for a restarted job that ends in failure (ha-configuration seed).
FAILED_AFTER_RESTARTS = "error,exiting"
CANNOT_START = 2  # hacfg's own plugins did not load: an installation to fix, not a job to judge
# The hooks whose built-in plugins the agent's judgement stands on: pre-checks and checkpoint layouts.
AGENT_HOOKS = ("hacfg_prechecks", "hacfg_checkpoint_layouts")


def _culprit_fields(verdict: Verdict) -> dict[str, Any]:
    """A hang's decision names its culprit, or says with ``null`` and a note that it cannot."""
    if verdict.cause != Ending.HANG:
        return {}
    return {"culprit": verdict.culprit.to_json() if verdict.culprit else None, "culprit_note": verdict.culprit_note}


def _say(line: str) -> None:
    """The agent's own lines: what they quote of a log, a path or a file can neither break the line
    nor reach the terminal as a control sequence (the command's own output is relayed untouched)."""
    print(printable(line), file=sys.stderr, flush=True)


class Agent:
    def __init__(
        self,
        options: RunOptions,
        state_dir: Path,
        events: Path,
        *,
        rounds: Rounds | None = None,  # default: this node on its own
        node: int | None = None,  # this node's rank in a group
        secret: JobSecret | None = None,  # default: this node's own, in its state folder
        echo: Callable[[str], None] = _say,
    ):
        self.options = options
        self.command = list(options.command)
        self.policy = policy = options.policy
        preload = list(options.preload) if options.preload is not None else None
        self.warm = WarmStarts(self.command, state_dir / WARM_LOG, enabled=options.warm, preload=preload)
        self.rounds = rounds or SingleNodeRounds(policy)
        self.rank = node or 0
        job = job_identity(os.environ)
        self.store = StateStore(state_dir, job=job)
        self.memory = checkpoints.MemoryTier(job, self.rank)
        self.secret = secret or JobSecret(os.environ, state_dir, job, create=True, timeout=0)
        self.heartbeat = state_dir / HEARTBEAT_FILE
        self.echo = echo
        self.events = EventLog(events, echo=echo, node=node)
        self.events.listeners.append(self._tell_plugins)
        self.notes: list[tuple[Event, dict[str, Any]]] = []  # found before the agent started, written after agent_start
        self.unwritable: set[Path] = set()  # files of the state folder that could not be written, said once
        # inside hacfg_agent_event: its own failures are not told again; per thread, as the save
        # watch writes its event from its own
        self._telling = threading.local()
        self.session: int | None = None  # the running attempt's session (its leader's pid)
        # what the phases took so far, kept in the job's state (taken over in _run)
        self.learned = Learned(policy.learn_floor, policy.learn_beyond_hang_timeout)
        self.began = time.time()  # when the job began: this agent's start, or its first agent's (taken over in _run)
        self.moving: tuple[int, str] | None = None  # the straggler's node, and why the attempt is stopped to move
        self.saves = None
        if policy.checkpoint_path is not None and policy.checkpoint_interval:
            self.saves = checkpoints.SaveWatch(policy.checkpoint_path, policy.checkpoint_interval, self._saves_overdue)
            self.events.listeners.append(self.saves.record)

    def run(self) -> int:
        self.store.acquire()
        try:
            refuse_links(self.events.path)
            self.store.key = self._file_key()
            self._end_leftovers()
            if isinstance(self.rounds, SingleNodeRounds):  # see _tier
                self.memory.open()
            return self._run()
        except GroupLost as err:
            self.echo(f"[hacfg] {err}; exiting {RETRY_ELSEWHERE} so the platform restarts the job")
            if isinstance(err, GroupRejected):
                self.events.write(Event.GROUP_REJECTED, key=err.key, reason=err.reason)
            self.events.write(Event.DECISION, action=Action.JOB_RESCHEDULE, cause=Cause.ENVIRONMENT, reason=str(err))
            self.events.write(Event.AGENT_EXIT, exit_code=RETRY_ELSEWHERE)
            return RETRY_ELSEWHERE
        finally:
            if self.saves is not None:
                self.saves.close()
            self.warm.close()
            self.rounds.close()
            self.memory.release()
            self.store.release()

    def _run(self) -> int:
        state = self.store.load()
        self.learned.samples = state.learned
        self.began = state.began or self.began
        if self.store.recovered:
            self.echo(f"[hacfg] {self.store.recovered}")
            self.events.write(Event.STATE_RECOVERED, detail=self.store.recovered)
        if (left := self.store.left) is not None:
            detail = self.store.describe_left()
            self.echo(f"[hacfg] {detail}")
            self.events.write(Event.STATE_LEFT, detail=detail, job=left.job, ended=left.ended)
        elif state.budgets.attempt:
            self.echo(f"[hacfg] taking over this job's counters from {self.store.path}: {self._so_far(state.budgets)}")
        counters = self._counters(state.budgets)
        began = stamp(datetime.fromtimestamp(self.began, UTC))
        self.events.write(
            Event.AGENT_START, pid=os.getpid(), command=self.command, job=self.store.job, began=began, **counters
        )
        for event, fields in self.notes:
            self.events.write(event, **fields)
        if state.running:
            self.echo("[hacfg] the previous agent stopped during an attempt; counting it as an environment fault")
        precheck_failure = self._prechecks() if self.policy.precheck else None
        verdict = self.rounds.recover(state)
        if verdict is not None:
            state = self._apply(verdict)
            if verdict.exit_code is not None:
                return self._exit(verdict.exit_code, state.budgets)
        become_subreaper()
        while True:
            start = self.rounds.begin(state, precheck_failure)
            precheck_failure = None
            if isinstance(start, Plan):
                state = NodeState(start.budgets, start.round, running=True)
                self._save(state)
                verdict = self.rounds.end(self._attempt(start))
            else:
                verdict = start
            state = self._apply(verdict)
            if verdict.exit_code is not None:
                return self._exit(verdict.exit_code, state.budgets)

    def _tier(self) -> Path | None:
        """The memory tier the workers save to and rounds resume from: on one node only. The nodes
        of a group would each hold their own newest step, and must resume the same one."""
        return self.memory.path

    def _attempt(self, plan: Plan) -> Outcome:
        """Run the workers of one round on this node; how they ended, and whether they saved a newer
        step to the memory tier (progress, as a newer checkpoint on disk is)."""
        resume = checkpoints.newest_tier(plan.resume_position, plan.resume_from, self._tier())
        outcome = self._workers(plan, resume)
        held = memory.newest_complete(self._tier())
        newer = held is not None and (resume.position is None or (held[0],) > resume.position)
        return replace(outcome, saved_in_memory=newer)

    def _workers(self, plan: Plan, resume: checkpoints.Resume) -> Outcome:
        """The workers of one round on this node, resuming from ``resume``; how they ended."""
        budgets = plan.budgets
        started = time.time()
        env = {
            **without_secret(os.environ),
            **attempt_env(plan, self.heartbeat, self.policy),
            "HACFG_RESUME_FROM": resume.path or "",
            "HACFG_RESUME_TIER": resume.tier,
            memory.DIR_ENV: str(self._tier() or ""),
            leftovers.TREE_ENV: leftovers.tree_mark(self.store.directory),
            **(rendezvous.worker_env(budgets.attempt, plan.workers_port) if plan.workers_port else {}),
        }
        for doubt in plan.doubts:
            self.echo(f"[hacfg] {doubt}")
            self.events.write(Event.CHECKPOINT_DOUBT, round=plan.round, resume_from=plan.resume_from, detail=doubt)
        detect = self.policy.hang_detect
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
        self.events.write(
            Event.ATTEMPT_START,
            round=plan.round,
            resume_from=resume.path,
            resume_tier=resume.tier,
            start=start.how,
            start_reason=start.reason,
            **self._counters(budgets),
        )
        unseen = resume_visible(plan)
        if unseen:
            start.discard()
            self.echo(f"[hacfg] {unseen}")
            self.events.write(
                Event.ATTEMPT_EXIT, round=plan.round, cause=Ending.ENVIRONMENT, reason=unseen, exit_code=None
            )
            return Outcome(self.rank, Ending.ENVIRONMENT, unseen, RETRY_ELSEWHERE)
        self.session = None
        supervisor = Supervisor(
            self.command,
            env,
            hang_timeout=self.policy.hang_timeout if detect else None,
            first_hang_timeout=self.policy.first_hang_timeout if detect else None,
            phase_timeouts=dict(self.policy.phase_timeout),
            learned=self.learned if detect and self.policy.learn_hang_timeouts else None,
            heartbeat=self.heartbeat,
            grace=self.policy.grace,
            on_hang=lambda tail, idle, limit, phase, steps: self._hang(
                budgets, tail, idle, limit, phase, steps, witness
            ),
            on_signal=lambda signum: self.events.write(
                Event.SIGNAL, signal=signal.Signals(signum).name, attempt=budgets.attempt
            ),
            on_milestone=lambda event, after: self.events.write(
                event, round=plan.round, attempt=budgets.attempt, after=round(after, 3)
            ),
            on_start=self._started,
            accelerator=nvml_probe() if detect and self.policy.accelerator in ("gpu", None) else None,  # None: unknown
            launch=start,
            keep=self.warm.keep,
        )
        try:
            with self.rounds.watch(supervisor.request_stop, witness), pacing or contextlib.nullcontext():
                result = supervisor.run()
            over.set()
        except OSError as err:  # the command could not be started at all
            self.echo(f"[hacfg] cannot run {self.command[0]!r}: {err.strerror or err}")
            self.events.write(
                Event.ATTEMPT_EXIT, round=plan.round, exit_code=127, cause=Ending.USER, reason=f"cannot start: {err}"
            )
            return Outcome(self.rank, Ending.USER, f"cannot start {self.command[0]!r}: {err.strerror or err}", 127)
        failure = Failure(result.exit_code, result.signal, result.tail, result.hung)
        if failure.code or failure.hung or budgets.attempt > 1:  # a first clean run's output stays the command's own
            self.echo(f"[hacfg] attempt {budgets.attempt} ended: {failure.describe()}")  # what hacfg diagnose reads
        exit_fields = {
            "round": plan.round,
            "exit_code": result.exit_code,
            "signal": signal.Signals(result.signal).name if result.signal else None,
            "duration": round(result.duration, 3),
            "stopping": _rounded(result.stopping),
            "gathering": _rounded(result.gathering),
            "step": result.step,
            "checkpoints": _saved_since(self.policy.checkpoint_path, started),
        }
        if result.interrupted is not None:
            reason = f"agent received {signal.Signals(result.interrupted).name}"
            self.events.write(Event.ATTEMPT_EXIT, cause=Ending.STOPPED, reason=reason, **exit_fields)
            return Outcome(self.rank, Ending.STOPPED, reason, 128 + result.interrupted)
        if result.exit_code == 0 and not result.hung:
            self.events.write(Event.ATTEMPT_EXIT, cause=Ending.SUCCESS, **exit_fields)
            return Outcome(self.rank, Ending.SUCCESS, "finished", 0)
        if self.moving is not None and result.stop_reason == self.moving[1]:
            node, reason = self.moving
            self.events.write(Event.ATTEMPT_EXIT, cause=Ending.STRAGGLER, reason=reason, **exit_fields)
            return Outcome(self.rank, Ending.STRAGGLER, reason, RETRY_ELSEWHERE, seen_on=node)
        if result.stop_reason is not None:  # the round ended elsewhere first
            self.events.write(Event.ATTEMPT_EXIT, cause=Ending.PEER, reason=result.stop_reason, **exit_fields)
            return Outcome(self.rank, Ending.ENVIRONMENT, result.stop_reason, failure.code, peer=True)
        verdict = classify(failure)
        self._plugin_failures()
        self.events.write(
            Event.ATTEMPT_EXIT,
            cause=verdict.cause,
            reason=verdict.reason,
            classifier=verdict.classifier,
            peer=verdict.peer,
            evidence=[line[-500:] for line in verdict.evidence],
            not_counted=list(verdict.not_counted),
            relocate=verdict.relocate,
            **exit_fields,
        )
        return Outcome(
            self.rank, Ending(verdict.cause), verdict.reason, failure.code, peer=verdict.peer, relocate=verdict.relocate
        )

    def _save(self, state: NodeState, *, ended: str | None = None) -> None:
        """Persist the counters and what was learned; a full or read-only disk is said once, and the
        agent goes on from memory."""
        state = replace(state, learned=self.learned.samples, began=self.began)
        try:
            self.store.save(state, ended=ended)
        except OSError as err:
            self._unwritable("save the state to", self.store.path, err, "attempts are judged from memory")

    def _file_key(self) -> bytes:
        """The key the agent's own files are sealed with, from the job's secret. An agent on its own
        that cannot keep one (a full or read-only state folder) seals with a secret of its life alone,
        and says so: what it writes then, no later agent takes over."""
        try:
            return self.secret.file_key()
        except NoSecret as err:
            if self.secret.shared:
                raise GroupLost(str(err)) from None
            self.secret.for_this_agent()
            self.echo(f"[hacfg] {err}; supervision continues, and no later agent takes over the state this one writes")
            self.notes.append((Event.STATE_UNWRITABLE, {"path": str(self.secret.folder), "reason": str(err)}))
            return self.secret.file_key()

    def _end_leftovers(self) -> None:
        """One trainer at a time: nothing an earlier agent on this folder started still runs."""
        ended = leftovers.end_leftovers(self.store.directory, self.store.key)
        if ended:
            self.echo(
                f"[hacfg] ended {len(ended)} processes left by an earlier agent on {self.store.directory}: {ended}"
            )
            self.events.write(Event.LEFTOVERS_ENDED, pids=ended)

    def _started(self, pid: int) -> None:
        self.session = pid
        self._remember(pid)

    def _witness(self, folder: Path | None, since: float) -> NodeEvidence:
        """This node's evidence of a hang: what its ranks show now, and the step its heartbeat last said."""
        step = reported_step(self.heartbeat, since)
        if folder is None or self.session is None:
            return NodeEvidence(self.rank, (), step)
        return inquiry.collect(self.session, folder, self.rank, step, py_spy=self.options.py_spy)

    def _straggler(
        self, plan: Plan, started: float, pace: straggler.Pace, supervisor: Supervisor, over: threading.Event
    ) -> None:
        """A rank straggles (seen where the group's samples meet): say so once, price what to do,
        and to move the job, stop the round at its next complete checkpoint."""
        price = straggler_price(
            pace.slowdown, self._remaining(), self.policy.restart_time, pace.ranks, (pace.period, pace.best)
        )
        where = f"node {pace.node} rank {pace.rank}"
        self.echo(
            f"[hacfg] straggler: {where} computes {pace.slowdown:g}x as long as the others over "
            f"{pace.collectives} collectives (score {pace.score:g}); {price.action}: {price.reason}"
        )
        self.events.write(
            Event.STRAGGLER,
            round=plan.round,
            attempt=plan.budgets.attempt,
            node=pace.node,
            rank=pace.rank,
            score=pace.score,
            slowdown=pace.slowdown,
            collectives=pace.collectives,
            period=pace.period,
            best=pace.best,
            since=stamp(datetime.fromtimestamp(pace.since, UTC)),
            step=reported_step(self.heartbeat, started),
            action=price.action,
            reason=price.reason,
            cost=_rounded(price.cost),
        )
        if price.action == StragglerAction.RESTART_ELSEWHERE:
            threading.Thread(
                target=self._move_at_next_checkpoint, args=(pace, supervisor, over), daemon=True, name="hacfg-move"
            ).start()

    def _move_at_next_checkpoint(self, pace: straggler.Pace, supervisor: Supervisor, over: threading.Event) -> None:
        """Stop the attempt once a checkpoint newer than the current one is complete: nothing is lost."""
        path = self.policy.checkpoint_path
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
        if self.policy.duration is None:
            return None
        return self.policy.duration - (time.time() - self.began)

    def _remember(self, pid: int) -> None:
        """Record the attempt's session, so an agent after this one can end it however this one dies."""
        try:
            leftovers.remember(self.store.directory, pid, self.store.key)
        except OSError as err:
            record = self.store.directory / leftovers.RECORD
            self._unwritable("record the attempt's session in", record, err, "the next agent finds it by its mark")

    def _unwritable(self, what: str, path: Path, err: OSError, meanwhile: str) -> None:
        """A file the agent could not write: one line and one event the first time, then silence."""
        if path not in self.unwritable:
            self.unwritable.add(path)
            reason = err.strerror or str(err)
            self.echo(f"[hacfg] cannot {what} {path}: {reason}; supervision continues, {meanwhile}")
            self.events.write(Event.STATE_UNWRITABLE, path=str(path), reason=reason)

    def _apply(self, verdict: Verdict) -> NodeState:
        """Persist the round's verdict and record it, identically on every node."""
        state = NodeState(verdict.budgets, verdict.round, running=False)
        self._save(state, ended=verdict.action if verdict.action.ends_job else None)
        if verdict.action.ends_job:  # a stop or a reschedule is taken over, sealed with the same key
            self.secret.forget()
        self.events.write(
            Event.DECISION,
            round=verdict.round,
            cause=verdict.cause,
            cause_node=verdict.rank,
            action=verdict.action,
            reason=verdict.detail,
            cause_reason=verdict.reason,
            progressed=verdict.progressed,
            checkpoint=verdict.resume_from,
            **self._counters(verdict.budgets),
            **_culprit_fields(verdict),
        )
        if verdict.cause == Ending.HANG:
            self.echo(f"[hacfg] {describe_culprit(verdict.culprit, verdict.culprit_note)}")
        if verdict.action != Action.SUCCESS:
            where = f" on node {verdict.rank}" if self.events.node is not None and verdict.rank is not None else ""
            self.echo(
                f"[hacfg] attempt {verdict.budgets.attempt} {verdict.cause}{where} ({verdict.reason}): "
                f"{verdict.action}, {verdict.detail}"
            )
        if verdict.action.runs_again:
            ended = Restart(
                verdict.action, verdict.budgets.attempt, verdict.cause, verdict.reason, self.rank, verdict.resume_from
            )
            self._call_plugins("hacfg_before_restart", restart=ended)
        if verdict.action == Action.GIVE_UP and verdict.budgets.restarts:
            self.echo(
                f"[hacfg] {FAILED_AFTER_RESTARTS}: the job failed after {verdict.budgets.restarts} restart(s); "
                f"last cause: {verdict.cause}, {verdict.reason}"
            )
        return state

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
        within = f" in phase {phase}" if phase != heartbeat.TRAIN else ""
        quiet = "no step progress" if steps else "no output and no heartbeat"
        learned = " (learned)" if limit.source == "learned" else ""
        self.echo(
            f"[hacfg] attempt {budgets.attempt} hung{within}: {quiet} for {limit.seconds:g}s{learned}; stopping it"
        )
        self.events.write(
            Event.HANG,
            attempt=budgets.attempt,
            timeout=round(limit.seconds, 3),
            timeout_from=limit.source,
            learned=limit.source == "learned",
            progress=steps,
            phase=phase,
            idle=round(idle, 3),
            last_output=[line[-500:] for line in tail[-10:]],
        )
        self.rounds.hung(witness)

    def _saves_overdue(self, training: float, newest: SavedCheckpoint | None) -> None:
        path, interval = self.policy.checkpoint_path, self.policy.checkpoint_interval
        resume = f"from {newest.path}" if newest else "from the start"
        self.echo(
            f"[hacfg] no new complete checkpoint under {path} in {training:.0f}s of training, "
            f"twice checkpoint.interval ({interval:g}s): does the script save there? A restart would resume {resume}"
        )
        self.events.write(
            Event.CHECKPOINT_OVERDUE, path=str(path), interval=interval, training=round(training, 3),
            newest=str(newest.path) if newest else None,
        )

    def _prechecks(self) -> str | None:
        """Run the pre-checks; what failed, or None."""
        ctx = PrecheckContext(self.policy, PrecheckSettings.from_environment(), dict(os.environ))
        failed = []
        for result in run_prechecks(ctx):
            self.echo(result.line())
            self.events.write(
                Event.PRECHECK,
                item=result.name,
                status=result.status,
                value=result.value,
                need=result.need,
                detail=result.detail,
            )
            if result.status == "failed":
                failed.append(result.name)
        self._plugin_failures()
        return f"{', '.join(failed)} failed" if failed else None

    def _tell_plugins(self, record: dict[str, Any]) -> None:
        if not getattr(self._telling, "active", False):
            self._telling.active = True
            try:
                self._call_plugins("hacfg_agent_event", event=MappingProxyType(record))
            finally:
                self._telling.active = False

    def _call_plugins(self, hook: str, **arguments: Any) -> None:
        """A recovery hook: every implementation runs; one that raises is a ``plugin_failure`` event."""
        for _ in plugin_manager.get().results(hook, **arguments):
            pass  # they return nothing the agent uses
        self._plugin_failures()

    def _plugin_failures(self) -> None:
        """A plugin that broke is one line and one event, once; the agent carries on without it."""
        for failure in plugin_manager.drain():
            self.echo(f"[hacfg] {failure}")
            self.events.write(Event.PLUGIN_FAILURE, plugin=failure.plugin, hook=failure.hook, error=failure.error)

    def _exit(self, code: int, budgets: Budgets) -> int:
        self.events.write(Event.AGENT_EXIT, exit_code=code, **self._counters(budgets))
        return code

    def _so_far(self, budgets: Budgets) -> str:
        return f"{budgets.attempt} attempt(s), {budgets.counted} of {self.policy.max_restarts} restarts counted"

    def _counters(self, budgets: Budgets) -> dict[str, int]:
        counters = asdict(budgets)
        counters["max_restarts"] = self.policy.max_restarts
        return counters


def _rounded(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 3)


def _saved_since(root: Path | None, since: float) -> list[dict[str, Any]]:
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


def default_state_dir(policy: Policy, node: int) -> Path:
    """Per node, so agents sharing the checkpoint storage never share a lock or a log."""
    base = policy.checkpoint_path / ".hacfg" if policy.checkpoint_path else Path(".hacfg")
    return base / f"node-{node}"


def run_agent(options: RunOptions, *, echo: Callable[[str], None] = _say) -> int:
    """Supervise the command on this node: alone, or as one node of a group formed through torch's store;
    under a per-card launch, as the node's speaker or as one of its cards' followers."""
    from hacfg.agent.group import discovery, protocol, ranktable, transport

    policy = options.policy
    env = dict(os.environ)
    try:
        table = discovery.rank_table(env, timeout=options.rdzv_timeout, echo=echo)
    except ranktable.NotReady as err:
        echo(f"[hacfg] {err}; exiting {RETRY_ELSEWHERE} so the platform restarts the job")
        return RETRY_ELSEWHERE
    card = discovery.per_card(env, table)
    spec = (
        None
        if options.standalone
        else discovery.resolve_spec(
            nnodes=options.nnodes,
            node_rank=options.node_rank,
            endpoint=options.rdzv_endpoint,
            timeout=options.rdzv_timeout,
            config_nodes=options.config_nodes,
            env=env,
            table=table,
            card=card,
        )
    )
    node = spec.rank if spec is not None else None
    directory = options.state_dir or default_state_dir(policy, node or 0)
    if card is not None and not card.speaks:
        from hacfg.agent.card import follow

        return follow(options, card, directory, echo)
    try:
        for hook in AGENT_HOOKS:
            plugin_manager.get().require_builtins(hook)
    except plugin_manager.BuiltinPluginError as err:
        echo(f"[hacfg] cannot supervise: {err}")
        return CANNOT_START

    log = options.events or directory / "events.jsonl"
    textfile, listen = options.metrics_file, options.metrics_port
    metrics, unserved = _metrics(log, textfile, listen, echo) if textfile or listen else (None, None)
    rounds: Rounds = SingleNodeRounds(policy)
    secret = None  # this node's own, in its state folder
    if spec is not None:
        store_class = transport.torch_store()
        if store_class is None:
            echo(
                f"[hacfg] node {spec.rank} of {spec.nnodes}: torch is not installed, "
                "so the nodes cannot restart together in place; "
                f"any restart exits {RETRY_ELSEWHERE} and the platform restarts the whole job"
            )
            rounds = SingleNodeRounds(policy, in_place=False)
        else:
            echo(
                f"[hacfg] node {spec.rank} of {spec.nnodes}: group store at {spec.host}:{spec.port}"
                + (" (hosted here)" if spec.leader else "")
            )
            # node 0's folder on the shared checkpoint storage, where it creates the job's secret
            folder = default_state_dir(policy, 0)
            secret = JobSecret(env, folder, job_identity(env), create=spec.leader, timeout=spec.timeout, shared=True)
            workers_store = rendezvous.endpoint(env, list(options.command)) if spec.leader else None
            rounds = protocol.GroupRounds(
                spec, policy, store_class, echo=echo, secret=secret, workers_store=workers_store
            )
    node_cards = None
    if card is not None and len(card.node_cards) > 1:
        from hacfg.agent.group import cards

        echo(f"[hacfg] {card.name()} speaks for the {len(card.node_cards)} cards of node {node or 0} (per-card launch)")
        node_cards = cards.CardRounds(
            rounds, cards.Hub(card, directory, echo), timeout=options.rdzv_timeout, grace=policy.grace
        )
        rounds = node_cards
    agent = Agent(options, directory, log, rounds=rounds, node=node, secret=secret, echo=echo)
    if node_cards is not None:
        node_cards.on_card_exit = lambda fields: agent.events.write(Event.CARD_EXIT, **fields)
    if unserved is not None:
        agent.notes.append((Event.METRICS_UNAVAILABLE, unserved))
    if metrics is None:
        return agent.run()
    agent.events.listeners.append(metrics.record)
    try:
        return agent.run()
    finally:
        metrics.close(linger=options.metrics_linger)


def _metrics(
    log: Path, textfile: Path | None, listen: tuple[str, int] | None, echo: Callable[[str], None]
) -> tuple[Metrics, dict[str, Any] | None]:
    """The Prometheus exposition, and why its port could not be served (a warning: training goes on)."""
    from hacfg.agent.records.metrics import Metrics
    from hacfg.agent.records.state import read_events
    from hacfg.scenario.source import InputError

    history: list[dict[str, Any]] = []
    try:
        history = read_events(log) if log.is_file() else []
    except (OSError, InputError) as err:  # metrics are no reason to stop a job
        echo(f"[hacfg] metrics start from this agent's events: {err}")
    metrics = Metrics(history, textfile=textfile, echo=echo)
    if listen is None:
        return metrics, None
    host, port = listen
    try:
        port = metrics.serve(host, port)
    except OSError as err:
        reason = str(err.strerror or err)
        echo(f"[hacfg] warning: cannot serve metrics on {host}:{port}: {reason}; the training starts without them")
        return metrics, {"listen": f"{host}:{port}", "reason": reason}
    echo(f"[hacfg] metrics on http://{host}:{port}/metrics")
    return metrics, None
