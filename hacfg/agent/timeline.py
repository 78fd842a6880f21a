"""`hacfg events`: the recovery log as a table people can read."""

from __future__ import annotations

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
    "decision": lambda e: f"{e.get('action')}: {e.get('reason')}",
    "agent_exit": lambda e: f"exit {e.get('exit_code')}",
    "state_recovered": lambda e: str(e.get("detail")),
}


def table(events: list[dict[str, Any]]) -> str:
    rows = [("time", "attempt", "restarts", "event", "detail")]
    attempt = restarts = ""
    for event in events:
        attempt = str(event.get("attempt", attempt))
        restarts = f"{event['counted']}/{event['max_restarts']}" if "counted" in event and "max_restarts" in event else restarts
        describe = _SHOWN.get(event.get("event", ""), lambda e: "")
        time_text = str(event.get("time", ""))[11:23]
        rows.append((time_text, attempt, restarts, str(event.get("event", "?")), describe(event)))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row[:4], widths)) + "  " + row[4] for row in rows
    ) + "\n"
