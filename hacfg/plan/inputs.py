"""What the model is given, and where each value came from: the scenario file (``stated``), a
what-if flag, the agent's measurements, or a published default with its source.

Measured overrides stated, which overrides the default; a what-if flag overrides them all for
one run. The sources of the defaults are discussed in docs/plan.md.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from hacfg.scenario import modelarts as ma

if TYPE_CHECKING:
    from hacfg.scenario.model import HAConfig
    from hacfg.scenario.source import LogicalPath

DAY = 86400.0

# Llama 3 (Meta, "The Llama 3 Herd of Models", 2024, section 3.3.4 and Table 5): 419 unexpected
# interruptions in a 54-day snapshot on 16,384 H100 GPUs, that is 2,048 nodes of 8.
LLAMA3_INTERRUPTIONS, LLAMA3_DAYS, LLAMA3_NODES, LLAMA3_WATCHDOG_TIMEOUTS = 419, 54, 2048, 7
NODE_MTBF = LLAMA3_DAYS * LLAMA3_NODES / LLAMA3_INTERRUPTIONS * DAY
NODE_MTBF_SOURCE = "Llama 3 report, Table 5: 419 interruptions in 54 days on 2,048 8-GPU nodes"
HANG_SHARE = LLAMA3_WATCHDOG_TIMEOUTS / LLAMA3_INTERRUPTIONS
HANG_SHARE_SOURCE = "Llama 3 report, Table 5: 7 of 419 were NCCL watchdog timeouts"

# What each input is called in a scenario file, for the lines the plan asks the user to write.
KEYS = {
    "nodes": "job.nodes",
    "node_mtbf": "reliability.node_mtbf",
    "hang_share": "reliability.hang_share",
    "save_time": "checkpoint.save_time",
    "restart_time": "reliability.restart_time",
    "hang_timeout": "hang.timeout",
    "interval": "checkpoint.interval",
    "duration": "job.duration",
}


@dataclass(frozen=True)
class Input:
    """One value (seconds, a share or a count; None when nobody knows it) and where it came from."""

    value: float | None
    origin: str

    @property
    def known(self) -> bool:
        return self.value is not None


UNKNOWN = Input(None, "unknown")


def _count(count: int, noun: str) -> str:
    """``1 save``, ``2 saves``."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


@dataclass(frozen=True)
class Measured:
    """What the agent measured over one or more runs (:mod:`hacfg.agent.records.calibration` reads it from events)."""

    failures: int  # the failures the rates rest on
    node_hours: float
    save_time: float | None = None  # mean seconds per checkpoint save
    saves: int = 0
    restart_time: float | None = None  # mean seconds from a failure to the next attempt's first activity
    restarts: int = 0
    hangs: int = 0

    def summary(self) -> str:
        """One paragraph for ``hacfg events``: what ``hacfg plan --from-events`` would use."""
        rate = (
            f"{_count(self.failures, 'failure')} in {self.node_hours:.3g} node-hours "
            f"(node MTBF {self.node_hours / self.failures:.3g} h), {self.hangs} of them hangs"
            if self.failures
            else f"no failures in {self.node_hours:.3g} node-hours"
        )

        def mean(value: float | None, count: int, what: str) -> str:
            return f"{value:.3g}s (mean of {_count(count, what)})" if value is not None else "not measured"

        return (
            f"measured for hacfg plan: {rate}; restart cost {mean(self.restart_time, self.restarts, 'restart')}; "
            f"save time {mean(self.save_time, self.saves, 'save')}\n"
        )

    def note(self, count: int, noun: str, where: str = "") -> str:
        """``measured: 12 saves`` and, when that is few, how far to trust it."""
        caution = "; few, so a rough figure" if count < 10 else ""
        return f"measured: {_count(count, noun)}{where}{caution}"


@dataclass(frozen=True)
class Inputs:
    """Everything the model needs for one job, each with its origin, and the restart rules."""

    nodes: Input
    node_mtbf: Input
    hang_share: Input
    save_time: Input
    restart_time: Input
    hang_timeout: Input
    interval: Input
    duration: Input
    restart_max: int
    on_hang: bool
    pod_reschedules: int
    platform: str

    def items(self) -> list[tuple[str, Input]]:
        return [(name, getattr(self, name)) for name in KEYS]

    def missing(self, *names: str) -> list[str]:
        """The scenario keys of the named inputs nobody knows."""
        return [KEYS[name] for name in names if not getattr(self, name).known]


def from_config(config: HAConfig, written: Collection[LogicalPath] = ()) -> Inputs:
    """The inputs a validated scenario states, with published defaults for the rest.

    ``written``: the paths the file (or what it extends) writes, to tell a stated ``job.nodes``
    or ``hang.timeout`` from the format's default."""

    def seconds(value: timedelta | None) -> Input:
        return UNKNOWN if value is None else Input(value.total_seconds(), "stated")

    def defaulted(path: LogicalPath, value: float, source: str) -> Input:
        return Input(value, "stated" if path in written else f"default: {source}")

    reliability = config.reliability
    return Inputs(
        nodes=defaulted(("job", "nodes"), config.job.nodes, "1 node"),
        node_mtbf=seconds(reliability.node_mtbf)
        if reliability.node_mtbf
        else Input(NODE_MTBF, f"default: {NODE_MTBF_SOURCE}"),
        hang_share=(
            Input(reliability.hang_share, "stated")
            if reliability.hang_share is not None
            else Input(HANG_SHARE, f"default: {HANG_SHARE_SOURCE}")
        ),
        save_time=seconds(config.checkpoint.save_time),
        restart_time=seconds(reliability.restart_time),
        hang_timeout=defaulted(
            ("hang", "timeout"), config.hang.timeout.total_seconds(), f"the platform's {ma.HANG_DETECT_TIME}"
        ),
        interval=seconds(config.checkpoint.interval),
        duration=seconds(config.job.duration),
        restart_max=config.restart.max,
        on_hang=config.restart.on_hang,
        pod_reschedules=config.restart.pod_reschedules,
        platform=config.platform,
    )


def with_measured(inputs: Inputs, measured: Measured) -> Inputs:
    """What the agent measured, over what was stated: per node, so it carries to other sizes."""
    changes: dict[str, Any] = {}  # input name -> Input
    if measured.failures and measured.node_hours:
        changes["node_mtbf"] = Input(
            measured.node_hours * 3600 / measured.failures,
            measured.note(measured.failures, "failure", f" in {measured.node_hours:.3g} node-hours"),
        )
        changes["hang_share"] = Input(measured.hangs / measured.failures, measured.note(measured.failures, "failure"))
    if measured.save_time is not None:
        changes["save_time"] = Input(measured.save_time, measured.note(measured.saves, "save"))
    if measured.restart_time is not None:
        changes["restart_time"] = Input(measured.restart_time, measured.note(measured.restarts, "restart"))
    return dataclasses.replace(inputs, **changes)


def with_what_if(inputs: Inputs, flags: Mapping[str, float | None]) -> Inputs:
    """The what-if flags given (``{"nodes": 512, "interval": 1800.0, ...}``) over everything else."""
    changes: dict[str, Any] = {
        name: Input(value, f"what-if: --{name.replace('_', '-')}") for name, value in flags.items() if value is not None
    }
    return dataclasses.replace(inputs, **changes)
