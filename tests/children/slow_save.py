"""Reports steps, then takes 2 s to save a checkpoint through save_step (quiet all along), then one more step."""
import sys
import time

from hacfg.checkpoint import save_step
from hacfg.heartbeat import beat

for step in range(1, 4):
    beat(step=step)
    time.sleep(0.1)
save_step(sys.argv[1], 3, lambda folder: time.sleep(2))
beat(step=4)
print("done", flush=True)
