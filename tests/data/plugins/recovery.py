"""Recovery hooks that write what they were told, one JSON line each, to $RECOVERY_LOG."""
import json
import os

from hacfg.plugin import Restart, hookimpl


def _write(record):
    with open(os.environ["RECOVERY_LOG"], "a") as log:
        log.write(json.dumps(record) + "\n")


@hookimpl
def hacfg_agent_event(event):
    _write({"hook": "event", **event})


@hookimpl
def hacfg_before_restart(restart: Restart):
    _write({"hook": "restart", **restart._asdict()})
