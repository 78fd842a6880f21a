"""Where a job's time went: goodput and named kinds of badput, from the agent's events alone.

Each attempt's span, from ``attempt_start`` to ``attempt_exit``, is cut at five moments::

    start ── first sign of life ── kept checkpoint ── fault ── stop signal ── exit ── next start
      start-up          productive             lost     hang wait      grace     restart

* **start-up**: until the first output or heartbeat (``first_activity``): interpreter, imports,
  communication set-up, checkpoint load.
* **productive**: up to the newest checkpoint the attempt saved that the next attempt resumed
  from (or, for the job's last attempt, that it left behind); a finished job's whole run;
  less the saves in that span.
* **save**: the time the kept span spent saving checkpoints, as each checkpoint recorded it
  (``save_s``: ``hacfg.checkpoint.save_step`` writes it; for other layouts, the spread of the
  files' modification times). Google's goodput library counts it apart too, and so does
  ``hacfg plan``: ETTR here and there is productive compute over wall time.
* **fail-slow**: within the productive span, from when a straggler turned slow (``straggler``'s
  ``since``) to its end, the share of the time the slowdown added: ``1 - 1/slowdown``.
  The job ran at the slowest rank's pace; this is what a healthy rank would have saved.
* **lost**: from that checkpoint to the fault: work that was thrown away and done again. The
  fault is the stop signal or the exit; for a hang, the last sign of life. With
  ``beat(step=...)`` the steps thrown away are counted too.
* **hang wait**: from the fault to the hang verdict (about ``hang.timeout``).
* **grace**: from the first stop signal (hang, the agent's own signal, a peer's failure) to the exit.
* **restart**: from the exit to the next attempt's start (decision, pre-checks of a new agent).

What lies outside every attempt (the first pre-checks, the agent's start and exit) is **other**.
ETTR, the effective training time ratio, is productive time over the wall time from the first
event to the last. Checkpoint times are the checkpoints' modification times as the agent saw them
when the attempt ended; a job of several nodes is measured on node 0, which every round includes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from hacfg.restart.vocabulary import Ending, Event
from hacfg.untrusted import printable

KINDS = ("startup", "productive", "save", "fail_slow", "lost", "hang_wait", "grace", "restart")
MICROSECONDS = 6  # decimals of a second: event times are exact to the microsecond, and no finer

LABELS = {
    "startup": ("start-up", "attempt start to the first output or heartbeat"),
    "productive": ("productive", "work kept: up to the checkpoint resumed from, or to the end"),
    "save": ("save", "checkpoint saves within the work kept"),
    "fail_slow": ("fail-slow", "work kept, slowed by a straggler: the share it added"),
    "lost": ("lost", "work after the last kept checkpoint, thrown away"),
    "hang_wait": ("hang wait", "last sign of life to the hang verdict"),
    "grace": ("grace", "stop signal to exit (SIGTERM, then SIGKILL)"),
    "restart": ("restart", "exit to the next attempt's start"),
    "other": ("other", "pre-checks, agent start and exit"),
}


def when(event: dict[str, Any]) -> datetime:
    return parse_time(str(event["time"]))


def node_of(event: dict[str, Any]) -> int:
    """The node whose agent wrote ``event``: a single node's log names none, and null (not known)
    reads the same."""
    return event.get("node") or 0


def parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text)


@dataclass
class Attempt:
    """One attempt on one node, with the moments that divide its time."""

    attempt: int
    node: int
    start: datetime
    end: datetime
    cause: str = "?"
    action: str | None = None
    first_activity: datetime | None = None
    hang: datetime | None = None
    idle: float = 0.0  # seconds without a sign of life when the hang was declared
    stopping: float | None = None
    step: int | None = None  # the last step reported through the heartbeat
    resume_from: str | None = None
    checkpoints: list[dict[str, Any]] = field(default_factory=list)
    kept: dict[str, Any] | None = None  # the checkpoint its productive time runs up to
    next_start: datetime | None = None
    slow: tuple[datetime, float] | None = None  # since when a straggler was seen, and its slowdown
    cut: bool = False  # no attempt_exit: the agent itself was stopped during it
    running: bool = False  # still running at the moment the breakdown is taken

    def moments(self) -> dict[str, datetime]:
        """The cuts of the span, each clamped between its neighbours."""
        alive = min(self.first_activity or self.end, self.end)
        if self.cause == Ending.SUCCESS or self.running:  # a running attempt has lost nothing yet
            return {"alive": alive, "kept": self.end, "fault": self.end, "stop": self.end}
        stop = max(self.end - timedelta(seconds=self.stopping or 0), alive)
        # a saved checkpoint is progress, whatever else is known
        kept = _clamp(parse_time(self.kept["time"]) if self.kept else alive, alive, stop)
        fault = self.hang - timedelta(seconds=self.idle) if self.hang is not None else stop
        return {"alive": alive, "kept": kept, "fault": _clamp(fault, kept, stop), "stop": stop}

    def seconds(self) -> dict[str, float]:
        m = self.moments()
        hung = self.hang is not None
        saving = timedelta(seconds=self.saving(m["kept"]))
        slow = min(self.slowed(m["alive"], m["kept"]), max(m["kept"] - m["alive"] - saving, timedelta(0)))
        spans = {
            "startup": m["alive"] - self.start,
            "productive": m["kept"] - m["alive"] - saving - slow,
            "save": saving,
            "fail_slow": slow,
            "lost": (m["fault"] if hung else m["stop"]) - m["kept"],
            "hang_wait": m["stop"] - m["fault"] if hung else timedelta(0),
            "grace": self.end - m["stop"],
            "restart": (self.next_start - self.end) if self.next_start else timedelta(0),
        }
        if self.cut:  # nothing is known about its checkpoints: all of it after start-up is lost
            spans = {**dict.fromkeys(KINDS, timedelta(0)), "startup": spans["startup"], "lost": self.end - m["alive"]}
        return {kind: round(max(span.total_seconds(), 0.0), MICROSECONDS) for kind, span in spans.items()}

    def saving(self, kept: datetime) -> float:
        """Seconds spent saving the checkpoints written by ``kept``, as far as they recorded it."""
        alive = min(self.first_activity or self.end, self.end)
        total = sum(float(c.get("save_s") or 0) for c in self.checkpoints if parse_time(c["time"]) <= kept)
        return min(total, max((kept - alive).total_seconds(), 0.0))

    def slowed(self, alive: datetime, kept: datetime) -> timedelta:
        """What the straggler added to the work kept since it was seen."""
        if self.slow is None:
            return timedelta(0)
        named, slowdown = self.slow
        share = max(1 - 1 / slowdown, 0.0) if slowdown > 0 else 0.0
        return max(kept - max(named, alive), timedelta(0)) * share

    def lost_steps(self) -> int | None:
        if self.step is None or self.cause == Ending.SUCCESS:
            return None
        # beats are rate-limited: the last one reported can be behind the checkpoint saved after it
        return max(self.step - (self.kept["step"] if self.kept else _step_of(self.resume_from)), 0)


def _clamp(moment: datetime, low: datetime, high: datetime) -> datetime:
    return min(max(moment, low), high)


def _step_of(path: str | None) -> int:
    from hacfg.plugin.recovery import step_of

    return (step_of(path.rstrip("/").rsplit("/", 1)[-1]) or 0) if path else 0


def attempts(events: list[dict[str, Any]], node: int | None = None, now: datetime | None = None) -> list[Attempt]:
    """Every attempt of ``node`` (default: node 0, or the only node), in order, with its moments;
    with ``now``, an attempt that has not ended runs until then."""
    node = node if node is not None else 0
    found: list[Attempt] = []
    current: Attempt | None = None
    # a straggler slows the whole job: its event (node 0's, naming the straggler's node) is every node's
    for event in (e for e in events if node_of(e) == node or e.get("event") == Event.STRAGGLER):
        kind, time = event.get("event"), when(event)
        if current is not None and kind in (Event.ATTEMPT_START, Event.AGENT_START):  # the agent stopped mid-attempt
            current.end, current.cut, current.cause = time, True, Ending.ENVIRONMENT
            current = None
        if kind == Event.ATTEMPT_START:
            number = int(event.get("attempt") or len(found) + 1)
            current = Attempt(number, node, time, time, resume_from=event.get("resume_from"))
            if found:
                found[-1].next_start = time
            found.append(current)
        elif current is None:
            if kind == Event.DECISION and found and found[-1].action is None:
                found[-1].action = event.get("action")
                found[-1].cause = event.get("cause", found[-1].cause)
        elif kind == Event.FIRST_ACTIVITY:
            current.first_activity = current.start + timedelta(seconds=float(event.get("after") or 0))
        elif kind == Event.STRAGGLER and current.slow is None:
            since = parse_time(event["since"]) if event.get("since") else time  # when it turned slow
            current.slow = min(since, time), float(event.get("slowdown") or 0)
        elif kind == Event.HANG:
            idle = event.get("idle")
            current.hang, current.idle = time, float(idle if idle is not None else event.get("timeout") or 0)
        elif kind == Event.ATTEMPT_EXIT:
            current.end, current.cause = time, event.get("cause", "?")
            current.stopping, current.step = event.get("stopping"), event.get("step")
            current.checkpoints = list(event.get("checkpoints") or [])
            current = None
    if current is not None and now is not None and now > current.end:
        current.end, current.running = now, True
    for index, attempt in enumerate(found):
        following = found[index + 1].resume_from if index + 1 < len(found) else None
        kept = [c for c in attempt.checkpoints if index + 1 == len(found) or c.get("path") == following]
        attempt.kept = kept[-1] if kept else None
    return found


@dataclass(frozen=True)
class Breakdown:
    wall: float
    totals: dict[str, float]
    attempts: list[Attempt]

    @property
    def ettr(self) -> float:
        """To a tenth of a percent, rounded here only: the table, the JSON and the metric show one figure."""
        return round(self.totals["productive"] / self.wall, 3) if self.wall > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "wall": round(self.wall, 3),
            "ettr": self.ettr,
            "seconds": {kind: round(value, 3) for kind, value in self.totals.items()},
            "attempts": [
                {
                    "attempt": a.attempt,
                    "node": a.node,
                    "cause": a.cause,
                    "action": a.action,
                    "start": a.start.isoformat(),
                    "end": a.end.isoformat(),
                    "seconds": {kind: round(value, 3) for kind, value in a.seconds().items()},
                    "checkpoints": a.checkpoints,
                    "kept_checkpoint": a.kept["path"] if a.kept else None,
                    "last_step": a.step,
                    "lost_steps": a.lost_steps(),
                }
                for a in self.attempts
            ],
        }


def breakdown(events: list[dict[str, Any]], now: datetime | None = None) -> Breakdown:
    """The job's time, split into the kinds above; they add up to the wall time.

    As of the latest event, or of ``now`` while the job runs: the attempt running then counts as
    productive so far, and moves to lost what it had not saved if it fails."""
    if not events:
        return Breakdown(0.0, dict.fromkeys((*KINDS, "other"), 0.0), [])
    end = max(when(events[-1]), now) if now is not None else when(events[-1])
    wall = (end - when(events[0])).total_seconds()
    spans = attempts(events, now=now)
    # event times are exact to the microsecond: sums and differences are rounded there, so a
    # float's noise (0.05699999999999994) never reaches a table, a JSON field or a metric
    totals = {kind: round(sum(a.seconds()[kind] for a in spans), MICROSECONDS) for kind in KINDS}
    totals["other"] = round(max(wall - sum(totals.values()), 0.0), MICROSECONDS)
    return Breakdown(wall, totals, spans)


def report(result: Breakdown) -> str:
    """The breakdown as text: the totals, then one line per attempt."""
    productive = result.totals["productive"]
    lines = [f"goodput: {productive:.1f}s productive of {result.wall:.1f}s wall, ETTR {result.ettr:.1%}"]
    for kind, (label, meaning) in LABELS.items():
        share = result.totals[kind] / result.wall if result.wall > 0 else 0.0
        lines.append(f"  {label:<11}{result.totals[kind]:>8.1f}s {share:>6.1%}  {meaning}")
    lines += ["", "seconds per attempt:"]
    header = ["attempt", *[LABELS[k][0] for k in KINDS], "ended"]
    rows = [header]
    for a in result.attempts:
        seconds = a.seconds()
        ended = f"{a.cause} -> {a.action}" if a.action else a.cause
        if a.lost_steps():  # a lower bound: the heartbeat reports the step at most once per interval
            ended += f", at least {a.lost_steps()} step(s) lost"
        rows.append([str(a.attempt), *[f"{seconds[k]:.1f}" for k in KINDS], printable(ended)])  # words of an event
    widths = [max(len(row[i]) for row in rows) for i in range(len(header) - 1)]
    for row in rows:
        lines.append("  " + "  ".join(cell.rjust(w) for cell, w in zip(row, widths, strict=False)) + "  " + row[-1])
    return "\n".join(lines) + "\n"
