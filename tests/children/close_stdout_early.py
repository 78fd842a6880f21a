"""Writes a line, closes its stdout and stderr, keeps working a while, then exits 5."""
import os
import time

print("before close", flush=True)
os.close(1)
os.close(2)
time.sleep(0.5)
os._exit(5)
