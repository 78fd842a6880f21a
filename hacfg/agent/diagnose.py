"""Why a training job failed, from its log alone, and what the restart rules would do about it.

Under ``hacfg agent`` the exit status of an attempt is known; a log downloaded from a job that
ran without it (a ModelArts job log, torchrun's output, a plain traceback) has to say it in
words. :func:`exit_status` reads what launchers print (:func:`hacfg.agent.failure_log.ending`:
torchrun's failure report, DeepSpeed's launcher, a shell's ``Killed``, ModelArts' ``Training end
with return code``). Failing that, a Python traceback means exit 1 (an uncaught exception), and
with nothing at all exit 1 is assumed, and said to be.

The log's last lines then go through the one classifier the agent asks,
:func:`hacfg.agent.classify.classify`, and the evidence is the lines its verdict names. A
plugin's verdict that names none is explained by leaving lines out one at a time: a line stays
only when leaving it out changes the verdict.
"""

from __future__ import annotations

import re
import signal
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import groupby
from pathlib import Path
from typing import Any, Literal

from hacfg.agent import failure_log
from hacfg.agent.classify import classify
from hacfg.plugin import manager as plugin_manager
from hacfg.plugin.recovery import TAIL_LINES, Classification, Failure
from hacfg.restart.policy import Budgets, Decision, Policy, decide
from hacfg.restart.vocabulary import Cause
from hacfg.scenario.source import InputError
from hacfg.untrusted import printable

WINDOW = 2 * TAIL_LINES  # the agent keeps the last lines of stdout and of stderr; a log holds both
LINE_BYTES = 4096  # of each line: an error message fits; a progress bar or a dumped tensor is cut
CHUNK_BYTES = 1 << 20
STDIN = "-"

# The agent's own lines in the log of a run under ``hacfg agent``: how each attempt ended, and a hang.
AGENT_PREFIX = "[hacfg] "
_AGENT_ENDED = re.compile(r"\[hacfg\] attempt (\d+) ended: (?:exit (-?\d+)|killed by (SIG[A-Z0-9]+))")
_AGENT_HUNG = re.compile(r"\[hacfg\] attempt (\d+) hung: ")


@dataclass(frozen=True)
class Line:
    number: int  # 1-based, in the whole log
    text: str


@dataclass(frozen=True)
class ExitStatus:
    """How the command ended, and on what grounds: ``read`` from a line, ``inferred`` or ``assumed``."""

    exit_code: int | None
    signal: int | None
    how: Literal["read", "inferred", "assumed"]
    line: Line | None = None
    hung: bool = False  # the agent found the attempt hung before it ended
    agent: bool = False  # read from the agent's own line: the log is of a run under ``hacfg agent``

    @property
    def failure(self) -> Failure:
        return Failure(self.exit_code, self.signal, (), self.hung)

    def describe(self) -> str:
        ended = self.failure.describe() + (" after the agent found it hung" if self.hung else "")
        if self.line is None:
            return f"{ended} assumed: the log does not say how the command ended"
        if self.how == "inferred":
            return f"{ended}, as a Python traceback ends (line {self.line.number})"
        return f"{ended}, read from line {self.line.number}"


@dataclass(frozen=True)
class Log:
    """A log's name, its length and its last lines (what the classifiers see)."""

    name: str
    total: int
    tail: tuple[Line, ...]


@dataclass(frozen=True)
class Diagnosis:
    log: Log
    status: ExitStatus
    classification: Classification | None  # None when the log ends in success
    evidence: tuple[Line, ...]
    decisions: tuple[Decision, ...]  # this failure, then the same again until the rules stop

    @property
    def failed(self) -> bool:
        return self.classification is not None


def read_log(path: str | Path, chunk_bytes: int = CHUNK_BYTES) -> Log:
    """The last ``WINDOW`` lines of a log file (``-`` is stdin), numbered as in the whole file.

    The log is read a chunk at a time and only the last lines are kept, each cut to its first
    :data:`LINE_BYTES`: time grows with the log and memory does not, however long a line is (a
    progress bar without line breaks, a dumped tensor). Lines break at ``\n``, ``\r\n`` and
    ``\r``, as Python's text files and editors count them."""
    name = str(path)
    tail: deque[Line] = deque(maxlen=WINDOW)
    number = 0
    head, length = b"", 0  # the unfinished line: its first bytes, and how long it is so far
    after_cr = False  # the previous chunk ended in \r, so a \n starting this one ends no line
    try:
        with open(0 if name == STDIN else path, "rb", closefd=name != STDIN) as stream:
            while chunk := stream.read(chunk_bytes):
                if after_cr and chunk.startswith(b"\n"):
                    chunk = chunk[1:]
                after_cr = chunk.endswith(b"\r")
                if b"\r" in chunk:
                    chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
                first, last = chunk.find(b"\n"), chunk.rfind(b"\n")
                if first < 0:
                    head, length = head + chunk[: LINE_BYTES - len(head)], length + len(chunk)
                    continue
                number += 1
                tail.append(_line(number, head + chunk[: min(first, LINE_BYTES - len(head))], length + first))
                between = chunk.count(b"\n") - 1  # whole lines after the first break, up to the last
                if between:
                    kept = chunk[first + 1 : last].rsplit(b"\n", WINDOW)[-min(between, WINDOW) :]
                    number += between - len(kept)
                    for text in kept:
                        number += 1
                        tail.append(_line(number, text[:LINE_BYTES], len(text)))
                head, length = chunk[last + 1 : last + 1 + LINE_BYTES], len(chunk) - last - 1
    except OSError as err:
        raise InputError(f"cannot read: {err.strerror or err}", file=name) from None
    if length:
        number += 1
        tail.append(_line(number, head, length))
    return Log(name, number, tuple(tail))


def _line(number: int, head: bytes, length: int) -> Line:
    text = head.decode("utf-8", errors="replace")
    return Line(number, text if length <= len(head) else f"{text} [... {length - len(head)} more bytes]")


def exit_status(lines: Iterable[Line]) -> ExitStatus:
    """The exit status the log states (:func:`hacfg.agent.failure_log.ending`), else a traceback's exit 1.
    Under the agent, the agent's line for the last attempt says it, whatever the command printed."""
    lines = list(lines)
    if (told := _agent_status(lines)) is not None:
        return told
    report = failure_log.ending([line.text for line in lines])
    if report is not None:
        return ExitStatus(report.exit_code, report.signal, "read", lines[report.index])
    traceback = next((line for line in reversed(lines) if failure_log.TRACEBACK.match(line.text)), None)
    if traceback is not None:
        return ExitStatus(1, None, "inferred", traceback)
    return ExitStatus(1, None, "assumed")


def _agent_status(lines: list[Line]) -> ExitStatus | None:
    """How the last attempt ended, from the agent's ``attempt N ended`` line; None in a log without one."""
    hung: set[str] = set()
    told = None
    for line in lines:
        if match := _AGENT_HUNG.search(line.text):
            hung.add(match.group(1))
        elif match := _AGENT_ENDED.search(line.text):
            attempt, code, name = match.groups()
            number = signal.Signals[name].value if name in signal.Signals.__members__ else None
            told = ExitStatus(int(code) if code else None, number, "read", line, attempt in hung, agent=True)
    return told


def attempt_output(lines: tuple[Line, ...], status: ExitStatus) -> tuple[Line, ...]:
    """The lines the classifiers see: under the agent, only the command's own output in the last
    attempt (as the agent saw it), without the agent's lines, whose reasons quote earlier errors."""
    if not status.agent or status.line is None:
        return lines
    end = lines.index(status.line)
    start = max((i + 1 for i, line in enumerate(lines[:end]) if _AGENT_ENDED.search(line.text)), default=0)
    return tuple(line for line in lines[start:end] if AGENT_PREFIX not in line.text)


def diagnose(log: Log, policy: Policy) -> Diagnosis:
    """Classify the log's failure, find the lines the verdict rests on, and apply the restart rules."""
    status = exit_status(log.tail)
    if status.exit_code == 0 and status.line is not None:  # only a line says so
        return Diagnosis(log, status, None, (status.line,), ())
    output = attempt_output(log.tail, status)
    failure = status.failure._replace(tail=tuple(line.text for line in output))
    verdict = classify(failure)
    named = _named(output, verdict.evidence) if verdict.evidence else None
    relied = set(named if named is not None else _relied_on(output, failure, verdict))
    if status.line is not None:
        relied.add(status.line)
    return Diagnosis(
        log,
        status,
        verdict,
        tuple(sorted(relied, key=lambda line: line.number)),
        _decisions(verdict, policy, failure.code),
    )


def _named(lines: tuple[Line, ...], texts: tuple[str, ...]) -> list[Line] | None:
    """The lines a verdict names, each the last with its text; None if one is not in the log."""
    last = {line.text: line for line in lines}
    found = [last.get(text) for text in texts]
    return None if None in found else [line for line in found if line is not None]


def _relied_on(lines: tuple[Line, ...], failure: Failure, verdict: Classification) -> list[Line]:
    """The lines without which the classifiers would say something else: for a plugin's verdict
    that does not name its lines."""
    manager = plugin_manager.get()
    reported = len(manager.failures)
    kept = list(lines)
    for line in lines:
        without = [other for other in kept if other is not line]
        if classify(failure._replace(tail=tuple(other.text for other in without))) == verdict:
            kept = without
    del manager.failures[reported:]  # a broken plugin is reported once, not once per line tried
    return kept


def _decisions(verdict: Classification, policy: Policy, command_code: int) -> tuple[Decision, ...]:
    """The rules' answer to this failure, then to the same failure again, until they stop restarting."""
    budgets = Budgets()

    def next_decision() -> Decision:
        return decide(
            verdict.cause, budgets, policy, progressed=False, command_code=command_code, relocate=verdict.relocate
        )

    decisions = [next_decision()]
    while decisions[-1].exit_code is None:
        decisions.append(next_decision())
    return tuple(decisions)


def policy_label(policy: Policy, source: str | None) -> str:
    """``ha.yaml: restart.max 3, unconditional, on_hang``: where the rules came from and what they allow."""
    allowed = [f"restart.max {policy.max_restarts}"]
    allowed += [name for name, on in (("unconditional", policy.unconditional), ("on_hang", policy.hang_retry)) if on]
    if policy.pod_reschedules:
        allowed.append(f"pod_reschedules {policy.pod_reschedules}")
    return f"{source or 'no --config'}: {', '.join(allowed)}"


CAUSES = {
    Cause.ENVIRONMENT: "environment fault", Cause.USER: "user error", Cause.HANG: "hang", Cause.DISK_FULL: "disk full"
}


def render_text(diagnoses: list[Diagnosis], policy_name: str) -> str:
    out = []
    for d in diagnoses:
        log, status = d.log, d.status
        where = f"{log.name}:{d.evidence[-1].number}" if d.evidence else log.name
        if d.classification is None:
            out.append(f"{where}: success: {status.describe()}")
            continue
        verdict = d.classification
        out.append(f"{where}: {CAUSES.get(verdict.cause, verdict.cause)}: {verdict.reason}")
        out.append(f"  exit status: {status.describe()}")
        out.append(f"  classifier:  {verdict.classifier}")
        if verdict.peer:
            out.append("  consequence: another rank failed first; the log of its node holds the cause")
        if verdict.relocate:
            out.append("  relocate:    no restart on this node can fix it; with restarts on, the job moves at once")
        out.append("  evidence:" if d.evidence else "  evidence:    none; no line was recognised")
        width = len(str(d.evidence[-1].number)) if d.evidence else 0
        out += [f"    {line.number:>{width}} | {line.text}" for line in d.evidence]
        out += ["  not counted:"] * bool(verdict.not_counted) + [f"    {why}" for why in verdict.not_counted]
        out.append(f"  restart rules ({policy_name}): {_decision_text(d.decisions[0])}")
        if len(d.decisions) > 1:
            out.append(f"  if it keeps failing this way: {_summary(d.decisions)}")
    return "".join(f"{printable(line)}\n" for line in out)  # a log's line holds anything


def _decision_text(decision: Decision) -> str:
    code = f" (exit {decision.exit_code})" if decision.exit_code is not None else ""
    return f"{decision.action}{code}: {decision.reason}"


def _summary(decisions: tuple[Decision, ...]) -> str:
    """``proc_restart x3, then job_reschedule (exit 138): restart budget of 3 spent: retry elsewhere``."""
    *restarts, last = decisions
    steps = ", ".join(f"{action} x{len(list(run))}" for action, run in groupby(d.action for d in restarts))
    return f"{steps}, then {_decision_text(last)}"


def to_json(diagnoses: list[Diagnosis], policy_name: str) -> list[dict[str, Any]]:
    def line(item: Line | None) -> dict[str, Any] | None:
        return None if item is None else {"line": item.number, "text": item.text}

    rows = []
    for d in diagnoses:
        status, verdict = d.status, d.classification
        rows.append(
            {
                "log": d.log.name,
                "lines": d.log.total,
                "outcome": "failure" if verdict else "success",
                "cause": verdict.cause if verdict else None,
                "reason": verdict.reason if verdict else None,
                "classifier": verdict.classifier if verdict else None,
                "peer": verdict.peer if verdict else None,
                "relocate": verdict.relocate if verdict else None,
                "exit_status": {
                    "exit_code": status.exit_code,
                    "signal": signal.Signals(status.signal).name if status.signal else None,
                    "how": status.how,
                    "from": line(status.line),
                },
                "evidence": [line(item) for item in d.evidence],
                "not_counted": list(verdict.not_counted) if verdict else [],
                "policy": policy_name,
                "decisions": [{"action": x.action, "reason": x.reason, "exit_code": x.exit_code} for x in d.decisions],
            }
        )
    return rows


def render_evidence(folder: Path) -> str:
    """What the agents gathered of each hang under ``folder``, and the culprit it names."""
    from hacfg.agent.culprit.analysis import attribute, describe_culprit
    from hacfg.agent.culprit.inquiry import read_summaries

    hangs = read_summaries(folder)
    if not hangs:
        raise InputError("no hang evidence (evidence/attempt-N/summary.json) under it", file=str(folder))
    lines = []
    for attempt, reports in hangs.items():
        found = attribute(reports, max(report.node for report in reports) + 1)
        lines.append(f"{folder}: {attempt}: {describe_culprit(found.culprit, found.note)}")
        for report in sorted(reports, key=lambda r: r.node):
            step = f", last step {report.step}" if report.step is not None else ""
            if not report.ranks:
                lines.append(f"  node {report.node}{step}: no rank answered")
            for rank in report.ranks:
                counts = ", ".join(f"#{seq} on group {group}" for group, seq in (rank.collectives or {}).items())
                read = f"recorders read: {', '.join(rank.recorders)}" if rank.recorders is not None else ""
                by = f"stack read by {rank.stack_by}" if rank.stack_by else ""
                doubt = f"not believed: {rank.doubt}" if rank.doubt else ""
                shown = [rank.state, f"pid {rank.pid}", counts and f"collective {counts}", rank.last_op or "", read]
                shown += [by, doubt]
                lines.append(f"  node {report.node} rank {rank.rank}{step}: {', '.join(filter(None, shown))}")
                lines += [f"    {frame}" for frame in rank.stack[:3]]
    return "".join(f"{printable(line)}\n" for line in lines)  # what the ranks said of themselves holds anything
