"""Which ``passthrough:`` keys override what the scenario's own keys mean.

``passthrough`` is merged last into the request body, so a key there that hacfg also writes from
the scenario (``restart.max`` becomes ``fault-tolerance/job-retry-num``) wins. HA020 reports each
:func:`passthrough_overrides`; the lint engine asks :func:`passthrough_agreements` where a key
only repeats the scenario, so that whether a rule is enabled changes nothing else.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from hacfg.scenario import modelarts as ma
from hacfg.scenario.source import LogicalPath, lookup

if TYPE_CHECKING:
    from hacfg.scenario.model import HAConfig

PASSTHROUGH: LogicalPath = ("passthrough",)  # where a scenario file holds the rest of the request body

# Each key hacfg writes, by where it sits in the request body, and the scenario key it comes from.
_OWNED: dict[LogicalPath, dict[str, str]] = {
    ma.ANNOTATIONS_AT: {
        ma.JOB_RETRY_NUM: "restart.max",
        ma.UNCONDITIONAL_RETRY: "restart.unconditional",
        ma.HANG_RETRY: "restart.on_hang",
        ma.POD_RETRY_NUM: "restart.pod_reschedules",
        ma.HCCL_OP_RETRY: "operator_retry",
    },
    ma.ENVIRONMENTS_AT: {ma.HANG_DETECT_TIME: "hang.timeout", ma.PRECHECK_SWITCH: "precheck"},
}


class Override(NamedTuple):
    """A passthrough value that replaces what a scenario key means on the platform."""

    at: LogicalPath  # in the scenario file: ("passthrough", "metadata", "annotations", KEY)
    value: Any  # as passthrough writes it
    owner: str  # the scenario key that means it, e.g. "restart.max"
    means: str  # what the owner says, spelled as the platform reads it

    @property
    def key(self) -> str:
        return str(self.at[-1])


def passthrough_overrides(config: HAConfig) -> list[Override]:
    """Every owned key under ``passthrough`` whose value is not exactly what the scenario means
    (one that agrees, as ``hacfg import`` leaves them, is harmless)."""
    return [override for override in _owned_in_passthrough(config) if override.value != override.means]


def passthrough_agreements(config: HAConfig) -> set[LogicalPath]:
    """Where ``passthrough`` writes an owned key as exactly what the scenario means: the scenario's own
    rules have judged it there, in their words."""
    return {override.at for override in _owned_in_passthrough(config) if override.value == override.means}


def _owned_in_passthrough(config: HAConfig) -> list[Override]:
    says = _scenario_says(config)
    found = []
    for base, owned in _OWNED.items():
        written = lookup(config.passthrough, base)
        for key, value in written.items() if isinstance(written, dict) else ():
            if key in owned:
                found.append(Override(("passthrough", *base, key), value, owned[key], says[key]))
    return found


def _scenario_says(config: HAConfig) -> dict[str, str]:
    """Each owned key as the platform spells what the scenario means."""
    restart = config.restart

    def switch(on: bool) -> str:
        return "true" if on else "false"

    return {
        ma.JOB_RETRY_NUM: str(restart.max),
        ma.UNCONDITIONAL_RETRY: switch(restart.unconditional),
        ma.HANG_RETRY: switch(restart.on_hang),
        ma.POD_RETRY_NUM: str(restart.pod_reschedules),
        ma.HCCL_OP_RETRY: switch(config.operator_retry),
        ma.HANG_DETECT_TIME: str(ma.hang_minutes(config.hang.timeout)),
        ma.PRECHECK_SWITCH: "1" if config.precheck else "0",
    }
