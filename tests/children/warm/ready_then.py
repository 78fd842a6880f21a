"""Runs a training script as ``__main__``; started cold, first waits until the agent's warm
interpreter for the next attempt is ready, so that the restart after a fault starts warm:
``python ready_then.py train.py ARGS``."""

import os
import runpy
import sys
import time
from pathlib import Path


def next_warm_interpreter(agent: int) -> int | None:
    for entry in Path("/proc").iterdir():
        try:
            ours = entry.name.isdigit() and int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == agent
            if ours and b"_hacfg_warm" in (entry / "cmdline").read_bytes():
                return int(entry.name)
        except OSError:
            continue
    return None


log = Path(os.environ["HACFG_HEARTBEAT_FILE"]).with_name("warm.log")
deadline = time.monotonic() + 300
while "_hacfg_warm" not in sys.modules and time.monotonic() < deadline:
    pid = next_warm_interpreter(os.getppid())
    if pid is not None and f"warm interpreter {pid} " in (log.read_text() if log.exists() else ""):
        break
    time.sleep(0.05)
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
