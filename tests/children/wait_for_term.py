"""Waits for SIGTERM, SIGINT or SIGHUP, says which, exits 0 (a graceful shutdown)."""
import signal
import sys
import time


def stop(signum, frame):
    print(f"got {signal.Signals(signum).name}", flush=True)
    sys.exit(0)


for handled in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(handled, stop)
print("ready", flush=True)
time.sleep(3600)
