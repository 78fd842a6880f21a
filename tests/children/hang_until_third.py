"""Says its attempt, then hangs in ``wait_here`` (no output, no heartbeat); attempt 3 succeeds."""
import os
import time


def wait_here() -> None:
    time.sleep(120)


print(f"attempt {os.environ['HACFG_ATTEMPT']}", flush=True)
if os.environ["HACFG_ATTEMPT"] != "3":
    wait_here()
