"""Hangs: prints once, then sleeps without output or heartbeat (a rank stuck in a collective)."""
import os
import time

print(f"attempt {os.environ['HACFG_ATTEMPT']} restarts {os.environ['HACFG_RESTART_COUNT']}", flush=True)
time.sleep(3600)
