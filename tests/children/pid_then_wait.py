"""Prints its pid and waits to be killed; the attempt named by argv[1] succeeds instead."""
import os
import sys
import time

print(f"pid {os.getpid()} attempt {os.environ['HACFG_ATTEMPT']}", flush=True)
if os.environ["HACFG_ATTEMPT"] == sys.argv[1]:
    sys.exit(0)
time.sleep(3600)
