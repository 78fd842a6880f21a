"""Reports a step, then tears down quietly for 2 s (the last barrier, say) before it exits."""
import time

from hacfg import heartbeat

heartbeat.beat(step=1)
print("trained", flush=True)
heartbeat.beat(phase="shutdown")
time.sleep(2)
