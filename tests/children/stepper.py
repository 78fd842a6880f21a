"""A training loop that reports its steps and saves through save_step, quiet during each save.

    stepper.py CKPT STEP_SECONDS SAVE_SECONDS PLAN...

PLAN is read in order: ``N`` runs N steps, ``save`` saves (SAVE_SECONDS long, quiet), ``stuck`` stops
making progress in silence, ``chatty`` makes no progress for 5 s but goes on printing and beating, and
``killsave`` starts a save and SIGKILLs itself a third into it in the first attempt (a pod evicted
mid-save), saves as ``save`` in later ones. It prints "done" at the end.
"""
import os
import signal
import sys
import time

from hacfg.checkpoint import save_step
from hacfg.heartbeat import beat

folder, step_s, save_s, *plan = sys.argv[1:]
step = 0
first = os.environ.get("HACFG_ATTEMPT", "1") == "1"


def saving(seconds: float, kill: bool) -> None:
    if kill:
        time.sleep(seconds / 3)
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(seconds)


for part in plan:
    if part.isdigit():
        for _ in range(int(part)):
            time.sleep(float(step_s))
            step += 1
            beat(step=step)
    elif part in ("save", "killsave"):
        save_step(folder, step, lambda _, kill=part == "killsave" and first: saving(float(save_s), kill))
    elif part == "stuck":
        time.sleep(120)
    elif part == "chatty":
        for line in range(50):
            print(f"waiting for data, retry {line}", flush=True)
            beat()
            time.sleep(0.1)
print("done", flush=True)
