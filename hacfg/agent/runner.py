"""The agent loop: pre-checks, then attempt -> classify -> decide, until success or a final decision.

States, in the order an agent passes through them, each recorded as an event:
``agent_start`` -> ``precheck`` (each result) -> ``attempt_start`` -> [``hang``] ->
``attempt_exit`` (code or signal, cause, progress) -> ``decision`` (``proc_restart``,
``pod_reschedule``, ``job_reschedule`` or ``give_up``) -> ... -> ``agent_exit``.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from hacfg import plugin_manager
from hacfg.agent import checkpoints
from hacfg.agent.accelerator import nvml_probe
from hacfg.agent.classify import Failure, classify
from hacfg.agent.policy import RETRY_ELSEWHERE, Budgets, Policy, decide
from hacfg.agent.prechecks import PrecheckContext, PrecheckSettings, run_prechecks
from hacfg.agent.state import EventLog, StateStore
from hacfg.agent.supervise import Supervisor, become_subreaper

HEARTBEAT_FILE = "heartbeat"


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class Agent:
    def __init__(self, command: list[str], policy: Policy, state_dir: Path, events: Path, *, echo: Callable[[str], None] = _say):
        self.command = command
        self.policy = policy
        self.store = StateStore(state_dir)
        self.heartbeat = state_dir / HEARTBEAT_FILE
        self.echo = echo
        self.events = EventLog(events, echo=echo)

    def run(self) -> int:
        self.store.acquire()
        try:
            code = self._run()
        finally:
            self.store.release()
        return code

    def _run(self) -> int:
        budgets, interrupted_before = self.store.load()
        if self.store.recovered:
            self.echo(f"[hacfg] {self.store.recovered}")
            self.events.write("state_recovered", detail=self.store.recovered)
        self.events.write("agent_start", pid=os.getpid(), command=self.command, **self._counters(budgets))
        if interrupted_before:
            stop = self._after_agent_restart(budgets)
            if stop is not None:
                return self._exit(stop, budgets)
        if self.policy.precheck and not self._prechecks_pass():
            action = "pod_reschedule" if self.policy.pod_reschedules else "job_reschedule"
            self.events.write("decision", action=action, reason="pre-check failed: retry elsewhere", **self._counters(budgets))
            return self._exit(RETRY_ELSEWHERE, budgets)
        become_subreaper()
        while True:
            code = self._attempt(budgets)
            if code is not None:
                return self._exit(code, budgets)

    def _attempt(self, budgets: Budgets) -> int | None:
        """Run one attempt; the agent's exit code when it is the last, else None."""
        resume = checkpoints.newest_complete(self.policy.checkpoint_path)
        self._plugin_failures()
        budgets.attempt += 1
        self.store.save(budgets, running=True)
        self.events.write("attempt_start", resume_from=str(resume.path) if resume else None, **self._counters(budgets))
        env = {
            **os.environ,
            "HACFG_ATTEMPT": str(budgets.attempt),
            "HACFG_RESTART_COUNT": str(budgets.restarts),
            "HACFG_RESUME_FROM": str(resume.path) if resume else "",
            "HACFG_HEARTBEAT_FILE": str(self.heartbeat),
            "HACFG_HEARTBEAT_INTERVAL": f"{min(1.0, self.policy.hang_timeout / 4):g}",
        }
        detect = self.policy.hang_detect
        supervisor = Supervisor(
            self.command,
            env,
            hang_timeout=self.policy.hang_timeout if detect else None,
            first_hang_timeout=self.policy.first_hang_timeout if detect else None,
            heartbeat=self.heartbeat,
            grace=self.policy.grace,
            on_hang=lambda tail: self._hang(budgets, tail),
            on_signal=lambda signum: self.events.write("signal", signal=signal.Signals(signum).name, attempt=budgets.attempt),
            accelerator=nvml_probe() if detect and self.policy.accelerator == "gpu" else None,
        )
        try:
            result = supervisor.run()
        except OSError as err:  # the command could not be started at all
            self.echo(f"[hacfg] cannot run {self.command[0]!r}: {err.strerror or err}")
            self.store.save(budgets, running=False)
            self.events.write("attempt_exit", exit_code=127, cause="user", reason=f"cannot start: {err}", **self._counters(budgets))
            return 127
        failure = Failure(result.exit_code, result.signal, result.tail, result.hung)
        after = checkpoints.newest_complete(self.policy.checkpoint_path)
        progressed = after is not None and (resume is None or after.step > resume.step)
        exit_fields = {
            "exit_code": result.exit_code,
            "signal": signal.Signals(result.signal).name if result.signal else None,
            "duration": round(result.duration, 3),
            "progressed": progressed,
            "checkpoint": str(after.path) if after else None,
        }
        if result.interrupted is not None:
            self.store.save(budgets, running=False)
            self.events.write("attempt_exit", cause="stopped", reason=f"agent received {signal.Signals(result.interrupted).name}", **exit_fields, **self._counters(budgets))
            return 128 + result.interrupted
        if result.exit_code == 0 and not result.hung:
            self.store.save(budgets, running=False)
            self.events.write("attempt_exit", cause="success", **exit_fields, **self._counters(budgets))
            return 0
        verdict = classify(failure)
        self._plugin_failures()
        decision = decide(verdict.cause, budgets, self.policy, progressed=progressed, command_code=failure.code)
        self.store.save(budgets, running=False)
        self.events.write("attempt_exit", cause=verdict.cause, reason=verdict.reason, classifier=verdict.classifier, **exit_fields)
        self.events.write("decision", action=decision.action, reason=decision.reason, **self._counters(budgets))
        self.echo(f"[hacfg] attempt {budgets.attempt} {failure.describe()} ({verdict.cause}: {verdict.reason}): {decision.action}, {decision.reason}")
        return decision.exit_code

    def _hang(self, budgets: Budgets, tail: tuple[str, ...]) -> None:
        timeout = self.policy.hang_timeout
        self.echo(f"[hacfg] attempt {budgets.attempt} hung: no output and no heartbeat for {timeout:g}s; stopping it")
        self.events.write("hang", attempt=budgets.attempt, timeout=timeout, last_output=[line[-500:] for line in tail[-10:]])

    def _prechecks_pass(self) -> bool:
        ctx = PrecheckContext(self.policy, PrecheckSettings.from_environment(), dict(os.environ))
        ok = True
        for result in run_prechecks(ctx):
            self.echo(result.line())
            self.events.write("precheck", item=result.name, status=result.status, value=result.value, need=result.need, detail=result.detail)
            ok = ok and result.status != "failed"
        self._plugin_failures()
        return ok

    def _plugin_failures(self) -> None:
        """A plugin that broke is one line and one event, once; the agent carries on without it."""
        manager = plugin_manager.get()
        for failure in manager.failures:
            self.echo(f"[hacfg] {failure}")
            self.events.write("plugin_failure", plugin=failure.plugin, hook=failure.hook, error=failure.error)
        manager.failures.clear()

    def _after_agent_restart(self, budgets: Budgets) -> int | None:
        """The last agent stopped mid-attempt (a pod restart): an environment fault, counted as one."""
        self.echo("[hacfg] the previous agent stopped during an attempt; counting it as an environment fault")
        if not self.policy.max_restarts:
            return None
        decision = decide("environment", budgets, self.policy, progressed=False, command_code=RETRY_ELSEWHERE)
        self.store.save(budgets, running=False)
        self.events.write("decision", action=decision.action, reason=f"agent restarted mid-attempt; {decision.reason}", **self._counters(budgets))
        return decision.exit_code

    def _exit(self, code: int, budgets: Budgets) -> int:
        self.events.write("agent_exit", exit_code=code, **self._counters(budgets))
        return code

    def _counters(self, budgets: Budgets) -> dict[str, int]:
        counters = asdict(budgets)
        counters["max_restarts"] = self.policy.max_restarts
        return counters
