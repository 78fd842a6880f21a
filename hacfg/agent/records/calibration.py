"""What the agent measured that the planning model needs: failures per node-hour, the share of
hangs, restart cost and checkpoint save time, from the events alone (``hacfg plan --from-events``).

Restart cost is what the model calls R: from the stop of a failed attempt (after the hang verdict,
which the model counts apart) to the first sign of life of the next one. Save time comes from the
checkpoints that recorded how long they took (``hacfg.checkpoint.save_step`` does).
"""

from __future__ import annotations

import itertools
from typing import Any

from hacfg.agent.records.goodput import attempts, node_of, when
from hacfg.plan.inputs import Measured

FAILED = ("environment", "user", "hang")


def measure(events: list[dict[str, Any]]) -> Measured:
    """The measurements over one job's merged events (every node's log)."""
    spans = attempts(events)
    nodes = len({node_of(event) for event in events}) or 1
    hours = (when(events[-1]) - when(events[0])).total_seconds() / 3600 if events else 0.0
    failed = [a for a in spans if a.cause in FAILED]
    restarts = []
    for attempt, following in itertools.pairwise(spans):
        if attempt.cause in FAILED and following.first_activity is not None:
            restarts.append((following.first_activity - attempt.moments()["stop"]).total_seconds())
    saves = [float(c["save_s"]) for a in spans for c in a.checkpoints if c.get("save_s") is not None]
    return Measured(
        failures=len(failed),
        node_hours=hours * nodes,
        save_time=sum(saves) / len(saves) if saves else None,
        saves=len(saves),
        restart_time=sum(restarts) / len(restarts) if restarts else None,
        restarts=len(restarts),
        hangs=sum(a.cause == "hang" for a in failed),
    )
