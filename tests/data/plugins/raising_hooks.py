"""Recovery hooks that raise."""
from hacfg.plugin import hookimpl


@hookimpl
def hacfg_agent_event(event):
    if event["event"] == "attempt_start":
        raise ConnectionError("webhook unreachable")


@hookimpl
def hacfg_before_restart(restart):
    raise PermissionError("/dev/shm")
