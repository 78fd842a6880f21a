"""A forecast for people (text) and for scripts (JSON), and its picture (ETTR against the interval)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from hacfg.fsutil import write_figure
from hacfg.plan.forecast import Forecast, costs_of, spelled
from hacfg.plan.inputs import KEYS, Input


def _value(name: str, item: Input) -> str:
    if item.value is None:
        return "unknown"
    if name == "nodes":
        return str(int(item.value))
    if name == "hang_share":
        return f"{item.value:.1%}"
    return spelled(item.value)


def _short(seconds: float) -> str:
    """A save time, below a second in milliseconds."""
    return f"{seconds * 1000:.0f}ms" if seconds < 1 else spelled(seconds)


def _count(expected: float) -> str:
    return f"{expected:.1f}" if expected < 1e6 else f"{expected:.2g}"


def text(forecast: Forecast, file: str) -> str:
    inputs, out = forecast.inputs, []
    nodes = int(inputs.nodes.value or 1)
    out.append(f"{file}: {nodes} node{'s' * (nodes > 1)}, a failure every {spelled(forecast.job_mtbf)} on average")
    out.append("inputs:")
    for name, item in inputs.items():
        out.append(f"  {KEYS[name]:<27}{_value(name, item):<12}{item.origin}")
    configured = inputs.interval.value
    at = f"at {spelled(configured)}" if configured else ""
    daly = spelled(forecast.daly)
    if forecast.failures is None:
        out.append("failures over the run: unknown (state job.duration, or pass --duration)")
    else:
        f = forecast.failures
        hang_kind = "restarted, not counted" if inputs.on_hang else "handed to the platform, counted"
        out.append(
            f"failures over the run: {_count(f['expected'])} expected: "
            f"{_count(f['environment'])} environment faults (counted), "
            f"{_count(f['hang'])} hangs ({hang_kind})"
        )
    out.append(
        f"checkpoint interval: {spelled(configured) if configured else 'not stated'}; "
        f"optimum {daly} (Daly), {spelled(forecast.young)} (Young)"
    )
    if forecast.wall_optimal is not None:
        wall = f"{spelled(forecast.wall_configured)} {at}, " if forecast.wall_configured else ""
        out.append(f"expected wall time: {wall}{spelled(forecast.wall_optimal)} at {daly}")
    ettr = f"{forecast.ettr_configured:.1%} {at}, " if forecast.ettr_configured is not None else ""
    out.append(f"ETTR: {ettr}{forecast.ettr_optimal:.1%} at {daly}")
    budget = forecast.budget
    if budget is None:
        out.append("restart budget: unknown (state job.duration, or pass --duration)")
    else:
        pods = f" and {budget.pod_reschedules} pod reschedules" if budget.pod_reschedules else ""
        how = f"exact: {budget.method}" if budget.p_low is None else f"at least {budget.p_low:.1%}: {budget.method}"
        out.append(
            f"restart budget: restart.max {budget.restart_max}{pods}: {budget.p_exhausted:.1%} chance it runs out "
            f"before the end ({how})"
        )
    if forecast.tiers:
        out.append("checkpoint tiers:")
        for tier in forecast.tiers:
            out.append(
                f"  {tier.tier:<7}save {_short(tier.save_time)}: optimum every {spelled(tier.daly)} (Daly), "
                f"{spelled(tier.young)} (Young); a failure redoes {spelled(tier.lost_per_failure)}; "
                f"resumes {tier.resumes}"
            )
    if forecast.changes:
        out.append("what to change:")
        for change in forecast.changes:
            out.append(f"  {change.why}")
            out += [f"    {line}" for line in change.lines.splitlines()]
    return "\n".join(out) + "\n"


def to_json(forecast: Forecast, file: str) -> dict[str, Any]:
    budget = forecast.budget
    return {
        "file": file,
        "inputs": {
            name: {"key": KEYS[name], "value": item.value, "origin": item.origin}
            for name, item in forecast.inputs.items()
        },
        "job_mtbf_s": forecast.job_mtbf,
        "failures": forecast.failures or {"expected": None},
        "interval": {
            "configured_s": forecast.inputs.interval.value,
            "young_s": forecast.young,
            "daly_s": forecast.daly,
        },
        "wall_time": {"configured_s": _finite(forecast.wall_configured), "optimal_s": _finite(forecast.wall_optimal)},
        "ettr": {"configured": forecast.ettr_configured, "optimal": forecast.ettr_optimal},
        "budget": {
            "restart_max": budget.restart_max,
            "pod_reschedules": budget.pod_reschedules,
            "p_exhausted": budget.p_exhausted,
            "p_exhausted_low": budget.p_low,
            "method": budget.method,
            "restart_max_needed": budget.restart_max_needed,
        }
        if budget
        else {"p_exhausted": None},
        "changes": [{"why": change.why, "lines": change.lines} for change in forecast.changes],
        **({"tiers": [dataclasses.asdict(tier) for tier in forecast.tiers]} if forecast.tiers else {}),
    }


def _finite(seconds: float | None) -> float | None:
    """JSON has no infinity: a wall time that overflowed is null."""
    return seconds if seconds is not None and math.isfinite(seconds) else None


def plot(forecast: Forecast, path: str) -> None:
    """ETTR against the interval (log scale), the optimum and the configured interval marked."""
    try:
        import matplotlib
    except ImportError:
        from hacfg.scenario.source import InputError

        raise InputError("--plot needs matplotlib: pip install 'hacfg[plot]'") from None

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    costs = costs_of(forecast.inputs)
    configured = forecast.inputs.interval.value
    low = min(forecast.daly, configured or forecast.daly) / 8
    high = max(forecast.daly, configured or forecast.daly) * 8
    points = [low * (high / low) ** (i / 199) for i in range(200)]
    figure, axes = plt.subplots(figsize=(7, 4))
    axes.plot([p / 3600 for p in points], [100 * costs.ettr(p) for p in points], color="#1f77b4")
    axes.set_xscale("log")
    axes.axvline(forecast.daly / 3600, color="#2ca02c", linestyle="--")
    axes.plot(
        [forecast.daly / 3600],
        [100 * forecast.ettr_optimal],
        "o",
        color="#2ca02c",
        label=f"optimum (Daly) {spelled(forecast.daly)}: {forecast.ettr_optimal:.1%}",
    )
    if configured and forecast.ettr_configured is not None:
        axes.plot(
            [configured / 3600],
            [100 * forecast.ettr_configured],
            "s",
            color="#d62728",
            label=f"configured {spelled(configured)}: {forecast.ettr_configured:.1%}",
        )
    nodes = int(forecast.inputs.nodes.value or 1)
    axes.set_title(f"{nodes} nodes, a failure every {spelled(forecast.job_mtbf)}, save {spelled(costs.save_time)}")
    axes.set_xlabel("checkpoint interval (hours)")
    axes.set_ylabel("ETTR (%)")
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(loc="lower center")
    figure.tight_layout()
    write_figure(figure, path, dpi=110)
    plt.close(figure)
