"""The agent's policy from a scenario file and command-line overrides (``hacfg agent``, ``hacfg precheck``)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from hacfg.agent.policy import Policy, policy_from_config
from hacfg.scenario.config import Presets, load_config
from hacfg.scenario.model import parse_duration
from hacfg.scenario.source import InputError

DURATIONS = ("hang_timeout", "initial_hang_timeout")


def policy_for(config: Path | None, presets: Presets, **overrides: Any) -> Policy:
    """The scenario file's policy (the defaults without one), then each override that is not None.

    Durations are given as text (``30m``); ``hang_timeout`` also turns hang detection on.
    """
    policy = policy_from_config(load_config(config, presets).config) if config else Policy()
    changes = {key: value for key, value in overrides.items() if value is not None}
    for key in DURATIONS:
        if key in changes:
            try:
                changes[key] = parse_duration(changes[key]).total_seconds()
            except ValueError as err:
                raise InputError(f"--{key.replace('_', '-')}: {err}") from None
    if "hang_timeout" in changes:
        changes["hang_detect"] = True
    if "checkpoint_path" in changes:
        changes["checkpoint_path"] = Path(changes["checkpoint_path"])
    return replace(policy, **changes)
