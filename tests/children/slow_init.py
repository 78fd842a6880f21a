"""Quiet for 2 s in the init phase (a slow rendezvous, say), then reports a step and succeeds."""
import time

from hacfg import heartbeat

with heartbeat.phase("init"):
    time.sleep(2)
heartbeat.beat(step=1)
print("done", flush=True)
