"""The agent loop: pre-checks, then rounds of plan -> attempt -> verdict, until one is final.

The states it passes through, and the event each writes, are tabled in
:mod:`hacfg.restart.vocabulary`.

A round's plan and verdict come from :class:`~hacfg.agent.rounds.SingleNodeRounds` on one node and
from :class:`~hacfg.agent.group.protocol.GroupRounds` on several, so every node of a job starts each round
from the same checkpoint and ends it with the same decision.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hacfg import memory
from hacfg.agent import checkpoints
from hacfg.agent.group.channel import GroupLost, GroupRejected
from hacfg.agent.group.signing import JobSecret, NoSecret
from hacfg.agent.journal import Journal
from hacfg.agent.prechecks import run_prechecks
from hacfg.agent.process import leftovers
from hacfg.agent.process.attempt import become_subreaper
from hacfg.agent.process.warm import WarmStarts
from hacfg.agent.records.identity import job_identity
from hacfg.agent.records.state import NodeState, StateStore, refuse_links
from hacfg.agent.rounds import Outcome, Plan, Rounds, SingleNodeRounds, Verdict
from hacfg.agent.workers import Workers
from hacfg.plugin import manager as plugin_manager
from hacfg.plugin.precheck import PrecheckContext, PrecheckSettings
from hacfg.plugin.recovery import Restart
from hacfg.restart.learning import Learned
from hacfg.restart.policy import RETRY_ELSEWHERE, Budgets, Policy
from hacfg.restart.vocabulary import Event
from hacfg.untrusted import printable

if TYPE_CHECKING:
    from hacfg.agent.options import RunOptions
    from hacfg.agent.records.metrics import Metrics

HEARTBEAT_FILE = "heartbeat"
WARM_LOG = "warm.log"  # the warm interpreters' own output: what they imported, why one could not serve
CANNOT_START = 2  # hacfg's own plugins did not load: an installation to fix, not a job to judge
# The hooks whose built-in plugins the agent's judgement stands on: pre-checks and checkpoint layouts.
AGENT_HOOKS = ("hacfg_prechecks", "hacfg_checkpoint_layouts")


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
        self.secret = secret or JobSecret(os.environ, state_dir, job, create=True, timeout=0)
        self.heartbeat = state_dir / HEARTBEAT_FILE
        self.echo = echo
        self.journal = Journal(events, echo=echo, node=node, max_restarts=policy.max_restarts)
        self.memory = checkpoints.MemoryTier(job, self.rank, policy.checkpoint_path, self.journal.checkpoint_written)
        # what the phases took so far, kept in the job's state (taken over in _run)
        self.learned = Learned(policy.learn_floor, policy.learn_beyond_hang_timeout)
        self.began = time.time()  # when the job began: this agent's start, or its first agent's (taken over in _run)
        self.saves = None
        if policy.checkpoint_path is not None and policy.checkpoint_interval:
            self.saves = checkpoints.SaveWatch(
                policy.checkpoint_path,
                policy.checkpoint_interval,
                lambda training, newest: self.journal.checkpoint_overdue(
                    policy.checkpoint_path, policy.checkpoint_interval or 0, training, newest
                ),
            )
            self.journal.listeners.append(self.saves.record)

    def run(self) -> int:
        self.store.acquire()
        try:
            refuse_links(self.journal.path)
            self.store.key = self._file_key()
            self._end_leftovers()
            if self.rounds.holds_memory:
                self.memory.open()
                self.rounds.use_tier(self.memory.path)
            return self._run()
        except GroupLost as err:
            rejected = (err.key, err.reason) if isinstance(err, GroupRejected) else None
            return self.journal.group_lost(str(err), rejected, RETRY_ELSEWHERE)
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
            self.journal.state_recovered(self.store.recovered)
        if (left := self.store.left) is not None:
            self.journal.state_left(self.store.describe_left(), left)
        elif state.budgets.attempt:
            self.echo(f"[hacfg] taking over this job's counters from {self.store.path}: {self._so_far(state.budgets)}")
        self.journal.agent_start(os.getpid(), self.command, self.store.job, self.began, state.budgets)
        if state.running:
            self.echo("[hacfg] the previous agent stopped during an attempt; counting it as an environment fault")
        precheck_failure = self._prechecks() if self.policy.precheck else None
        workers = Workers(
            self.options, self.rank, self.rounds, self.store, self.heartbeat, self.journal, self.warm, self.learned,
            self.began, self.echo,
        )
        verdict = self.rounds.recover(state)
        if verdict is not None:
            state = self._apply(verdict)
            if verdict.exit_code is not None:
                return self.journal.agent_exit(verdict.exit_code, state.budgets)
        become_subreaper()
        while True:
            start = self.rounds.begin(state, precheck_failure)
            precheck_failure = None
            if isinstance(start, Plan):
                state = NodeState(start.budgets, start.round, running=True)
                self._save(state)
                verdict = self.rounds.end(self._attempt(workers, start))
            else:
                verdict = start
            state = self._apply(verdict)
            if verdict.exit_code is not None:
                return self.journal.agent_exit(verdict.exit_code, state.budgets)

    def _attempt(self, workers: Workers, plan: Plan) -> Outcome:
        """Run the workers of one round on this node; how they ended, and whether they saved a newer
        step to the memory tier (progress, as a newer checkpoint on disk is)."""
        resume = self.rounds.resume(plan)
        outcome = workers.run(plan, resume, self.memory.path)
        held = memory.newest_complete(self.memory.path)
        newer = held is not None and (resume.position is None or (held[0],) > resume.position)
        return replace(outcome, saved_in_memory=newer)

    def _save(self, state: NodeState, *, ended: str | None = None) -> None:
        """Persist the counters and what was learned; a full or read-only disk is said once, and the
        agent goes on from memory."""
        state = replace(state, learned=self.learned.samples, began=self.began)
        try:
            self.store.save(state, ended=ended)
        except OSError as err:
            self.journal.state_unwritable("save the state to", self.store.path, err, "attempts are judged from memory")

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
            self.journal.later(Event.STATE_UNWRITABLE, path=str(self.secret.folder), reason=str(err))
            return self.secret.file_key()

    def _end_leftovers(self) -> None:
        """One trainer at a time: nothing an earlier agent on this folder started still runs."""
        ended = leftovers.end_leftovers(self.store.directory, self.store.key)
        if ended:
            self.journal.leftovers_ended(ended, self.store.directory)

    def _apply(self, verdict: Verdict) -> NodeState:
        """Persist the round's verdict and record it, identically on every node."""
        state = NodeState(verdict.budgets, verdict.round, running=False)
        self._save(state, ended=verdict.action if verdict.action.ends_job else None)
        if verdict.action.ends_job:  # a stop or a reschedule is taken over, sealed with the same key
            self.secret.forget()
        self.journal.decision(verdict)
        if verdict.action.runs_again:
            ended = Restart(
                verdict.action, verdict.budgets.attempt, verdict.cause, verdict.reason, self.rank, verdict.resume_from
            )
            self.journal.call_plugins("hacfg_before_restart", restart=ended)
        return state

    def _prechecks(self) -> str | None:
        """Run the pre-checks; what failed, or None."""
        ctx = PrecheckContext(self.policy, PrecheckSettings.from_environment(), dict(os.environ))
        failed = []
        for result in run_prechecks(ctx):
            self.journal.precheck(result)
            if result.status == "failed":
                failed.append(result.name)
        self.journal.plugin_failures()
        return f"{', '.join(failed)} failed" if failed else None

    def _so_far(self, budgets: Budgets) -> str:
        return f"{budgets.attempt} attempt(s), {budgets.counted} of {self.policy.max_restarts} restarts counted"


def default_state_dir(policy: Policy, node: int) -> Path:
    """Per node, so agents sharing the checkpoint storage never share a lock or a log."""
    base = policy.checkpoint_path / ".hacfg" if policy.checkpoint_path else Path(".hacfg")
    return base / f"node-{node}"


def run_agent(options: RunOptions, *, echo: Callable[[str], None] = _say) -> int:
    """Supervise the command on this node: alone, or as one node of a group formed through torch's store;
    under a per-card launch, as the node's speaker or as one of its cards' followers."""
    from hacfg.agent.group import discovery, protocol, ranktable, rendezvous, transport

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
                spec, policy, store_class, echo=echo, secret=secret, workers_store=workers_store,
                copy_every=options.peer_copy_every, copy_share=options.peer_copy_share,
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
        node_cards.on_card_exit = agent.journal.card_exit
    if unserved is not None:
        agent.journal.later(Event.METRICS_UNAVAILABLE, **unserved)
    if metrics is None:
        return agent.run()
    agent.journal.listeners.append(metrics.record)
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
