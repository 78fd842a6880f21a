"""Leaves grandchildren behind: one in its process group, one that escaped with setsid. Writes their pids."""
import os
import subprocess
import sys

pids = []
pids.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"]).pid)
pids.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"], start_new_session=True).pid)
with open(sys.argv[1], "w") as handle:
    handle.write(" ".join(map(str, pids)))
os._exit(3)
