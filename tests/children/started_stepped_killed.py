"""Half a second in the init phase, one step reported, then SIGKILLed in the first attempt."""
import os
import signal
import time

from hacfg import heartbeat

with heartbeat.phase("init"):
    print("started", flush=True)
    time.sleep(0.5)  # the process group and the checkpoint
heartbeat.beat(step=1)
if os.environ["HACFG_ATTEMPT"] == "1":
    os.kill(os.getpid(), signal.SIGKILL)
