"""`hacfg events`: the recovery log as a table and as a picture of where the time went."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

from hacfg.agent.culprit.analysis import describe_culprit
from hacfg.agent.records import goodput
from hacfg.fsutil import write_figure
from hacfg.restart.vocabulary import Action, Event
from hacfg.untrusted import printable

Record = dict[str, Any]

_SHOWN: dict[str, Callable[[Record], str]] = {
    Event.AGENT_START: lambda e: f"pid {e.get('pid')}: {' '.join(map(str, e.get('command') or []))}",
    Event.PRECHECK: lambda e: " ".join(
        str(e.get(key) or "") for key in ("item", "status", "value", "need", "detail")
    ).strip(),
    Event.ATTEMPT_START: lambda e: f"resume from {e.get('resume_from') or '(nothing)'}",
    Event.FIRST_ACTIVITY: lambda e: f"first output or heartbeat after {e.get('after')}s",
    Event.FIRST_STEP: lambda e: f"first step reported after {e.get('after')}s",
    Event.HANG: lambda e: ("no step progress" if e.get("progress") else "no output or heartbeat")
    + f" for {e.get('idle', e.get('timeout'))}s"
    + (f" in phase {e['phase']}" if e.get("phase") not in (None, "train") else "")
    + (f" (learned timeout {e.get('timeout')}s)" if e.get("learned") else ""),
    Event.SIGNAL: lambda e: f"agent received {e.get('signal')}",
    Event.ATTEMPT_EXIT: lambda e: " ".join(
        part
        for part in (
            f"signal {e['signal']}" if e.get("signal") else f"exit {e.get('exit_code')}",
            f"[{e.get('cause')}]",
            e.get("reason") or "",
            "(progress)" if e.get("progressed") else "",
            f"{e.get('duration')}s" if e.get("duration") is not None else "",
            f"saved up to step {e['checkpoints'][-1]['step']}" if e.get("checkpoints") else "",
        )
        if part
    ),
    Event.DECISION: lambda e: (
        f"{e.get('action')}: {e.get('reason')}"
        + (
            f" (round {e['round']}, {e.get('cause')}"
            + (f" on node {e['cause_node']})" if e.get("cause_node") is not None else ")")
            if "cause_node" in e and e.get("action") != Action.SUCCESS
            else ""
        )
        + (f"; {describe_culprit(e['culprit'], e.get('culprit_note'))}" if "culprit" in e else "")
    ),
    Event.AGENT_EXIT: lambda e: f"exit {e.get('exit_code')}",
    Event.CARD_EXIT: lambda e: (
        f"card {e.get('card')} (rank {e.get('rank')}): exit {e.get('exit_code')} [{e.get('cause')}] {e.get('reason')}"
    ),
    Event.STATE_RECOVERED: lambda e: str(e.get("detail")),
    Event.CHECKPOINT_DOUBT: lambda e: str(e.get("detail")),
    Event.CHECKPOINT_WRITTEN: lambda e: f"step {e.get('step')} from memory: "
    + (f"not written, {e['error']}" if e.get("error") else f"{e.get('path')} in {e.get('seconds')}s"),
    Event.STRAGGLER: lambda e: (
        f"rank {e.get('rank')} computes {e.get('slowdown')}x as long as the others (score {e.get('score')}): "
        f"{e.get('action')}, {e.get('reason')}"
    ),
}


def _nothing(event: Record) -> str:
    return ""


def table(events: list[dict[str, Any]]) -> str:
    nodes = len({goodput.node_of(e) for e in events}) > 1
    rows: list[tuple[str, ...]] = [("time", "attempt", "restarts", "event", "detail")]
    attempt = restarts = ""
    for event in events:
        attempt = str(event.get("attempt", attempt))
        restarts = (
            f"{event['counted']}/{event['max_restarts']}"
            if "counted" in event and "max_restarts" in event
            else restarts
        )
        describe = _SHOWN.get(str(event.get("event", "")), _nothing)
        time_text = str(event.get("time", ""))[11:23]
        node = f"node {goodput.node_of(event)}: " if nodes else ""
        row = (time_text, attempt, restarts, str(event.get("event", "?")), node + describe(event))
        rows.append(tuple(map(printable, row)))  # an event's fields hold what a log or a rank said
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    return (
        "\n".join(
            "  ".join(cell.ljust(width) for cell, width in zip(row[:4], widths, strict=True)) + "  " + row[4]
            for row in rows
        )
        + "\n"
    )


def merge(logs: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Several nodes' event logs as one job timeline, in time order (the sort is stable per node)."""
    return sorted((event for log in logs for event in log), key=lambda e: (str(e.get("time", "")), goodput.node_of(e)))


def read_logs(
    files: Iterable[Path], damaged: Callable[[Path, int], None] = lambda path, number: None
) -> list[dict[str, Any]]:
    """The nodes' event logs, read and merged into one job's records; each damaged line (a record
    torn by a crash) is skipped and told to ``damaged``."""
    from hacfg.agent.records.state import read_events
    from hacfg.scenario.source import InputError

    logs = []
    for path in files:
        try:
            logs.append(read_events(path, functools.partial(damaged, path)))
        except OSError as err:
            raise InputError(f"cannot read: {err.strerror or err}", file=str(path)) from None
    return merge(logs)


COLOURS = {
    "startup": "#90a4ae",
    "productive": "#2e7d32",
    "save": "#81c784",
    "fail_slow": "#fbc02d",
    "lost": "#c62828",
    "hang_wait": "#6a1b9a",
    "grace": "#ef6c00",
    "restart": "#e0e0e0",
}


def plot(events: list[dict[str, Any]], path: str) -> None:
    """One time axis, one lane per node: each attempt split into the goodput kinds, its checkpoints
    (filled: kept; hollow: thrown away), the hang verdicts and the restart decisions."""
    try:
        import matplotlib
    except ImportError:
        from hacfg.scenario.source import InputError

        raise InputError("--plot needs matplotlib: pip install 'hacfg[plot]'") from None
    matplotlib.use("Agg")
    from matplotlib import pyplot
    from matplotlib.artist import Artist
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    result = goodput.breakdown(events)
    nodes = sorted({goodput.node_of(e) for e in events}) or [0]
    origin = goodput.when(events[0]) if events else datetime.now()

    def x(moment: datetime) -> float:
        return (moment - origin).total_seconds()

    figure, axes = pyplot.subplots(figsize=(11, 1.2 + 0.9 * len(nodes)))
    for lane, node in enumerate(nodes):
        for attempt in goodput.attempts(events, node):
            left = x(attempt.start)
            for kind, width in attempt.seconds().items():
                if width > 0:
                    axes.barh(
                        lane,
                        width,
                        left=left,
                        height=0.5,
                        color=COLOURS[kind],
                        hatch="//" if kind == "lost" else None,
                        edgecolor="white",
                        linewidth=0.5,
                    )
                left += width
            axes.text(x(attempt.start), lane - 0.3, f"attempt {attempt.attempt}", fontsize=8, va="bottom")
            if attempt.action and attempt.action != Action.SUCCESS:
                axes.text(
                    x(attempt.end),
                    lane + 0.3,
                    f"{attempt.cause}: {attempt.action}",
                    fontsize=7,
                    va="top",
                    color="#424242",
                )
            kept = attempt.moments()["kept"]
            for saved in attempt.checkpoints:
                moment = goodput.parse_time(saved["time"])
                axes.plot(
                    x(moment),
                    lane,
                    marker="v",
                    markersize=7,
                    color="black",
                    markerfacecolor="black" if moment <= kept else "white",
                    zorder=3,
                )
            if attempt.hang is not None:
                axes.plot(
                    x(attempt.hang), lane, marker="X", markersize=10, color="#6a1b9a", markeredgecolor="white", zorder=4
                )
    axes.set_yticks(range(len(nodes)), [f"node {node}" for node in nodes])
    axes.set_ylim(len(nodes) - 0.4, -0.6)
    axes.set_xlim(left=0)
    axes.set_xlabel("seconds since the first event")
    axes.set_title(
        f"hacfg recovery timeline: ETTR {result.ettr:.0%} "
        f"({result.totals['productive']:.1f}s productive of {result.wall:.1f}s wall)"
    )
    handles: list[Artist] = [
        Patch(facecolor=c, hatch="//" if k == "lost" else None, edgecolor="white", label=goodput.LABELS[k][0])
        for k, c in COLOURS.items()
    ]
    handles += [
        Line2D([], [], marker="v", color="black", linestyle="none", label="checkpoint"),
        Line2D(
            [],
            [],
            marker="v",
            color="black",
            markerfacecolor="white",
            linestyle="none",
            label="checkpoint never resumed",
        ),
        Line2D([], [], marker="X", color="#6a1b9a", linestyle="none", markersize=9, label="hang detected"),
    ]
    axes.legend(
        handles=handles,
        loc="upper center",
        bbox_to_anchor=(0.5, -(0.1 + 0.2 / len(nodes))),
        ncol=5,
        fontsize=8,
        frameon=False,
    )
    with matplotlib.rc_context({"svg.fonttype": "none"}):  # text stays text in an SVG: searchable, selectable
        write_figure(figure, path, dpi=120, bbox_inches="tight")
    pyplot.close(figure)
