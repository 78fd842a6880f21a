"""One call for training loops to tell `hacfg agent` they are alive.

    from hacfg.heartbeat import beat
    for step in range(steps):
        train_step()
        beat(step=step + 1)

``beat()`` touches the file named by ``HACFG_HEARTBEAT_FILE`` (set by the agent for its child)
at most once per ``HACFG_HEARTBEAT_INTERVAL`` seconds (the agent picks a quarter of its hang
timeout, at most 1 s), so calling it every step costs a clock read. With ``step``, the file holds
the step (replaced atomically), so the agent's goodput accounting knows when progress stopped,
not only when the process went quiet. Outside the agent it does nothing.
"""

from __future__ import annotations

import os
import time

_last = float("-inf")


def beat(step: int | None = None) -> None:
    global _last
    now = time.monotonic()
    if now - _last < float(os.environ.get("HACFG_HEARTBEAT_INTERVAL", "1")):
        return
    path = os.environ.get("HACFG_HEARTBEAT_FILE")
    if not path:
        return
    try:
        if step is None:
            _touch(path)
        else:
            staging = f"{path}.{os.getpid()}.tmp"
            with open(staging, "w") as handle:
                handle.write(f"{int(step)}\n")
            os.replace(staging, path)
    except OSError:
        return  # a heartbeat must never break training
    _last = now


def _touch(path: str) -> None:
    try:
        os.utime(path)
    except FileNotFoundError:
        with open(path, "a"):
            pass
