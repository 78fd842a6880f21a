"""A recovery, second by second: from a worker's fault to the next round's first step, per node.

Each stage runs from the end of the one before::

    fault ── first agent knows ── worker stopped ── next attempt ── first line ── group ── loaded ── step
       detection           stop            decision          start     rendezvous   load   first step

* **detection**: the fault to the first agent knowing (its worker exited, or it stopped on a signal).
* **stop**: to this node's worker stopped (``attempt_exit``).
* **decision**: to this node's next attempt started: every node stopped, one decision for the
  round, the same checkpoint chosen for every rank.
* **start**: to the script's first line (``first_activity``): interpreter and imports.
* **rendezvous**: to the process group set up (``init_process_group``).
* **load**: to the checkpoint loaded.
* **first step**: to the first training step done.

The agent's events give stop, decision and start, and with the trainer's heartbeat the end of the
first step (``first_step``). The fault and the trainer's other moments are known only from its
timestamped lines (``Marks``). A moment not known is not guessed: the stages on either side of it
are shown as one ("rendezvous+load+first step"). A round resumes when its slowest node does: a
recovery's total is the largest node's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hacfg.agent.records.goodput import node_of, when
from hacfg.restart.vocabulary import Action, Event
from hacfg.untrusted import printable

STAGES = ("detection", "stop", "decision", "start", "rendezvous", "load", "first step")


@dataclass(frozen=True)
class Marks:
    """The trainer's own wall-clock times (seconds since the epoch) in one attempt on one node."""

    fault: float | None = None
    started: float | None = None  # its first line, once imported
    grouped: float | None = None  # the process group set up
    resumed: float | None = None  # the checkpoint loaded
    stepped: float | None = None  # the first step done


@dataclass(frozen=True)
class Recovery:
    round: int  # the round that failed
    cause: str
    cause_node: int | None
    stages: dict[int, dict[str, float]]  # node -> stage -> seconds; a stage not known is absent

    def total(self, node: int) -> float:
        return round(sum(self.stages[node].values()), 3)

    @property
    def seconds(self) -> float:
        """Fault (or first knowing) to the slowest node's end of the known stages."""
        return max((self.total(node) for node in self.stages), default=0.0)

    def to_json(self) -> dict[str, Any]:
        return {
            "round": self.round,
            "cause": self.cause,
            "cause_node": self.cause_node,
            "seconds": self.seconds,
            "nodes": {str(node): {**stages, "total": self.total(node)} for node, stages in self.stages.items()},
        }


def recoveries(events: list[dict[str, Any]], marks: dict[tuple[int, int], Marks] | None = None) -> list[Recovery]:
    """Every recovery of the job: each failed round followed by another, split into the stages
    above per node. ``marks``: the trainer's times, by (node, attempt)."""
    marks = marks or {}
    found = []
    for decision in (e for e in events if e.get("event") == Event.DECISION and node_of(e) == 0):
        failed = decision.get("round")
        if decision.get("action") in (Action.SUCCESS, None) or failed is None:
            continue
        nodes = _moments(events, failed)
        if not nodes:
            continue
        knowing = min(moments["knowing"] for moments in nodes.values())
        # the trainer printed the fault in the attempt before the next one
        faults = [marks[node, m["attempt"] - 1].fault for node, m in nodes.items() if (node, m["attempt"] - 1) in marks]
        fault = min((f for f in faults if f is not None), default=None)
        stages = {}
        for node, moments in nodes.items():
            mark = marks.get((node, moments["attempt"]), Marks())
            line = [
                fault,
                knowing,
                moments["exit"],
                moments["start"],
                mark.started if mark.started is not None else moments.get("first_activity"),
                mark.grouped,
                mark.resumed,
                mark.stepped if mark.stepped is not None else moments.get("first_step"),
            ]
            stages[node] = _stages(line)
        found.append(Recovery(failed, str(decision.get("cause", "?")), decision.get("cause_node"), stages))
    return found


def _stages(moments: list[float | None]) -> dict[str, float]:
    """Seconds per stage between consecutive known ``moments`` (one more than STAGES); a stage that
    ends at an unknown moment is joined to the next one."""
    stages: dict[str, float] = {}
    begin, joined = moments[0], []
    for stage, end in zip(STAGES, moments[1:], strict=True):
        joined.append(stage)
        if end is None:
            continue
        if begin is not None:
            stages["+".join(joined)] = round(end - begin, 3)
        begin, joined = end, []
    return stages


def _moments(events: list[dict[str, Any]], failed: int) -> dict[int, dict[str, Any]]:
    """Per node that took part in both rounds: when it knew, stopped, started again and showed life."""
    nodes: dict[int, dict[str, Any]] = {}
    for event in events:
        node, kind, number = node_of(event), event.get("event"), event.get("round")
        if kind == Event.ATTEMPT_EXIT and number == failed:
            stopped = when(event).timestamp()
            knowing = stopped - float(event.get("stopping") or 0) - float(event.get("gathering") or 0)
            nodes.setdefault(node, {}).update(exit=stopped, knowing=knowing)
        elif kind == Event.ATTEMPT_START and number == failed + 1:
            nodes.setdefault(node, {}).update(start=when(event).timestamp(), attempt=int(event.get("attempt") or 0))
        elif kind in (Event.FIRST_ACTIVITY, Event.FIRST_STEP) and number == failed + 1:
            started = nodes.get(node, {}).get("start")
            if started is not None:
                nodes[node][kind] = started + float(event.get("after") or 0)
    return {node: moments for node, moments in nodes.items() if {"exit", "start"} <= moments.keys()}


def report(found: list[Recovery]) -> str:
    """Each recovery as a table: one row per node, one column per stage known, then the total."""
    lines = []
    for recovery in found:
        shown = sorted(
            {stage for stages in recovery.stages.values() for stage in stages},
            key=lambda joined: [STAGES.index(stage) for stage in reversed(joined.split("+"))],
        )
        where = f" on node {recovery.cause_node}" if recovery.cause_node is not None else ""
        lines.append(
            f"recovery after round {recovery.round} ({printable(recovery.cause)}{where}): {recovery.seconds:.2f}s,"
            " seconds per stage:"
        )
        rows = [["node", *shown, "total"]]
        for node, stages in sorted(recovery.stages.items()):
            rows.append(
                [str(node), *[f"{stages[s]:.3f}" if s in stages else "-" for s in shown], f"{recovery.total(node):.3f}"]
            )
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        lines += ["  " + "  ".join(cell.rjust(w) for cell, w in zip(row, widths, strict=True)) for row in rows]
    return "\n".join(lines) + ("\n" if lines else "")
