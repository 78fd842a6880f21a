"""Waits for SIGTERM, says so, exits 0 (a graceful shutdown)."""
import signal
import sys
import time

def stop(signum, frame):
    print("got SIGTERM", flush=True)
    sys.exit(0)

signal.signal(signal.SIGTERM, stop)
print("ready", flush=True)
time.sleep(3600)
