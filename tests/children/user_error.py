"""A bug in user code: an ordinary Python exception, exit 1."""
import os

print(f"attempt {os.environ['HACFG_ATTEMPT']} restarts {os.environ['HACFG_RESTART_COUNT']}", flush=True)
raise ValueError("learning rate must be positive")
