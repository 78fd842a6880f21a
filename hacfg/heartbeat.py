"""One call for training loops to tell `hacfg agent` they are alive.

    from hacfg.heartbeat import beat
    for step in range(steps):
        train_step()
        beat()

``beat()`` touches the file named by ``HACFG_HEARTBEAT_FILE`` (set by the agent for its child)
at most once a second, so calling it every step costs a clock read. Outside the agent it
does nothing.
"""

from __future__ import annotations

import os
import time

_INTERVAL = 1.0
_last = float("-inf")


def beat() -> None:
    global _last
    now = time.monotonic()
    if now - _last < _INTERVAL:
        return
    path = os.environ.get("HACFG_HEARTBEAT_FILE")
    if not path:
        return
    try:
        os.utime(path)
    except FileNotFoundError:
        with open(path, "a"):
            pass
    except OSError:
        return  # a heartbeat must never break training
    _last = now
