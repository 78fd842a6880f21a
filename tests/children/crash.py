"""Dies by SIGKILL, as the OOM killer or a failed node would leave it: an environment fault."""
import os
import signal

print(f"attempt {os.environ['HACFG_ATTEMPT']} restarts {os.environ['HACFG_RESTART_COUNT']}", flush=True)
os.kill(os.getpid(), signal.SIGKILL)
