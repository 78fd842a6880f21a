"""Ignores SIGTERM and stays silent, so only SIGKILL ends it."""
import signal
import sys
import time

signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("ignoring SIGTERM", flush=True)
sys.stdout.flush()
time.sleep(3600)
