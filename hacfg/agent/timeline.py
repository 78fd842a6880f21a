"""`hacfg events`: the recovery log as a table, a timeline picture and an effective-time ratio."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

_SHOWN = {
    "agent_start": lambda e: f"pid {e.get('pid')}: {' '.join(map(str, e.get('command') or []))}",
    "precheck": lambda e: f"{e.get('item')} {e.get('status')} {e.get('value') or ''} {e.get('need') or ''} {e.get('detail') or ''}".strip(),
    "attempt_start": lambda e: f"resume from {e.get('resume_from') or '(nothing)'}",
    "hang": lambda e: f"no output or heartbeat for {e.get('timeout')}s",
    "signal": lambda e: f"agent received {e.get('signal')}",
    "attempt_exit": lambda e: " ".join(
        part
        for part in (
            f"signal {e['signal']}" if e.get("signal") else f"exit {e.get('exit_code')}",
            f"[{e.get('cause')}]",
            e.get("reason") or "",
            "(progress)" if e.get("progressed") else "",
            f"{e.get('duration')}s" if e.get("duration") is not None else "",
        )
        if part
    ),
    "decision": lambda e: f"{e.get('action')}: {e.get('reason')}" + (f" (round {e['round']}, {e.get('cause')} on node {e.get('cause_node')})" if "cause_node" in e and e.get("action") != "success" else ""),
    "agent_exit": lambda e: f"exit {e.get('exit_code')}",
    "state_recovered": lambda e: str(e.get("detail")),
}


def table(events: list[dict[str, Any]]) -> str:
    nodes = len({e.get("node") for e in events}) > 1
    rows = [("time", "attempt", "restarts", "event", "detail")]
    attempt = restarts = ""
    for event in events:
        attempt = str(event.get("attempt", attempt))
        restarts = f"{event['counted']}/{event['max_restarts']}" if "counted" in event and "max_restarts" in event else restarts
        describe = _SHOWN.get(event.get("event", ""), lambda e: "")
        time_text = str(event.get("time", ""))[11:23]
        node = f"node {event.get('node')}: " if nodes else ""
        rows.append((time_text, attempt, restarts, str(event.get("event", "?")), node + describe(event)))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row[:4], widths, strict=True)) + "  " + row[4] for row in rows
    ) + "\n"


@dataclass(frozen=True)
class AttemptSpan:
    attempt: int
    start: datetime
    end: datetime
    cause: str  # success | environment | user | hang | stopped
    progressed: bool
    decision: str | None


def _time(event: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(str(event["time"]).replace("Z", "+00:00"))


def attempts(events: list[dict[str, Any]]) -> list[AttemptSpan]:
    """Each attempt with how it ended and what was decided after it (node 0's view of a group)."""
    spans: list[AttemptSpan] = []
    start: dict[str, Any] | None = None
    for event in (e for e in events if e.get("node", 0) == 0):
        kind = event.get("event")
        if kind == "attempt_start":
            start = event
        elif kind == "attempt_exit" and start is not None:
            spans.append(AttemptSpan(int(start.get("attempt", 0)), _time(start), _time(event), event.get("cause", "?"), False, None))
            start = None
        elif kind == "decision" and spans and spans[-1].decision is None:
            last = spans[-1]
            progressed = bool(event.get("progressed")) or event.get("action") == "success"
            spans[-1] = AttemptSpan(last.attempt, last.start, last.end, event.get("cause", last.cause), progressed, event.get("action"))
    return spans


def merge(logs: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Several nodes' event logs as one job timeline, in time order (the sort is stable per node)."""
    return sorted((event for log in logs for event in log), key=lambda e: (str(e.get("time", "")), e.get("node", 0)))


def effective_ratio(events: list[dict[str, Any]]) -> float:
    """Time in attempts that made progress (a newer checkpoint, or success) over the wall time."""
    if not events:
        return 0.0
    wall = (_time(events[-1]) - _time(events[0])).total_seconds()
    useful = sum((s.end - s.start).total_seconds() for s in attempts(events) if s.progressed)
    return useful / wall if wall > 0 else 0.0


COLOURS = {"success": "#2e7d32", "environment": "#ef6c00", "user": "#c62828", "hang": "#6a1b9a", "stopped": "#757575"}


def plot(events: list[dict[str, Any]], path: str) -> None:
    """Attempts as bars on a time axis, coloured by how each ended; restart decisions marked."""
    try:
        import matplotlib
    except ImportError:
        from hacfg.source import InputError

        raise InputError("--plot needs matplotlib: pip install 'hacfg[plot]'") from None
    matplotlib.use("Agg")
    from matplotlib import pyplot
    from matplotlib.patches import Patch

    spans = attempts(events)
    origin = _time(events[0]) if events else datetime.now()
    figure, axes = pyplot.subplots(figsize=(10, 1.2 + 0.45 * max(1, len(spans))))
    for row, span in enumerate(spans):
        left = (span.start - origin).total_seconds()
        width = max((span.end - span.start).total_seconds(), 1e-3)
        axes.barh(row, width, left=left, color=COLOURS.get(span.cause, "#9e9e9e"), edgecolor="black" if span.progressed else "none")
        if span.decision:
            axes.annotate(span.decision, ((span.end - origin).total_seconds(), row), xytext=(4, 0), textcoords="offset points", va="center", fontsize=8)
    axes.set_yticks(range(len(spans)), [f"attempt {s.attempt}" for s in spans])
    axes.invert_yaxis()
    axes.set_xlabel("seconds since the agent started")
    axes.set_title(f"hacfg recovery timeline: effective training time {effective_ratio(events):.0%}")
    axes.legend(handles=[Patch(color=c, label=k) for k, c in COLOURS.items()], loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)
    figure.tight_layout()
    figure.savefig(path)
    pyplot.close(figure)
