"""One call for training loops to tell `hacfg agent` they are alive.

    from hacfg.heartbeat import beat
    for step in range(steps):
        train_step()
        beat()

``beat()`` touches the file named by ``HACFG_HEARTBEAT_FILE`` (set by the agent for its child)
at most once per ``HACFG_HEARTBEAT_INTERVAL`` seconds (the agent picks a quarter of its hang
timeout, at most 1 s), so calling it every step costs a clock read. Outside the agent it does
nothing.
"""

from __future__ import annotations

import os
import time

_last = float("-inf")


def beat() -> None:
    global _last
    now = time.monotonic()
    if now - _last < float(os.environ.get("HACFG_HEARTBEAT_INTERVAL", "1")):
        return
    path = os.environ.get("HACFG_HEARTBEAT_FILE")
    if not path:
        return
    try:
        os.utime(path)
    except FileNotFoundError:
        try:
            with open(path, "a"):
                pass
        except OSError:
            return
    except OSError:
        return  # a heartbeat must never break training
    _last = now
