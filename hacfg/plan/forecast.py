"""One job's forecast: what the model says of its inputs, and the lines that would do better."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import timedelta

from hacfg.plan import model
from hacfg.plan.inputs import KEYS, Inputs, from_config
from hacfg.scenario import modelarts as ma
from hacfg.scenario.model import HAConfig, format_duration

ETTR_SLACK = 0.01  # an interval within 1 point of the optimum's ETTR is fine
BUDGET_RISK = 0.05  # a budget that runs out more often than this needs raising
HOPELESS_FAILURES = 100_000  # past this, no budget is worth computing
NEVER = 1e10  # failures: as good as endless
LONGEST = timedelta(days=999_999_999).total_seconds()  # the longest duration a scenario file can write


class NotEnough(Exception):
    """The inputs lack what the forecast needs; the message names the lines to add, and ``name``
    the input at fault when it is one value that was given."""

    def __init__(self, message: str, name: str | None = None) -> None:
        super().__init__(message)
        self.name = name


@dataclass(frozen=True)
class Change:
    """A suggestion: why, and the scenario lines that make it."""

    why: str
    lines: str


@dataclass(frozen=True)
class Budget:
    restart_max: int
    pod_reschedules: int
    p_exhausted: float
    method: str
    restart_max_needed: int | None  # within the platform's range; None when no restart.max is enough
    limit: float = BUDGET_RISK  # a chance above this is too high
    p_low: float | None = None  # where p_exhausted is an upper bound, the lower one

    @property
    def risky(self) -> bool:
        return self.p_exhausted > self.limit


@dataclass(frozen=True)
class Forecast:
    inputs: Inputs
    job_mtbf: float
    young: float
    daly: float
    ettr_optimal: float
    ettr_configured: float | None
    wall_optimal: float | None
    wall_configured: float | None
    failures: dict[str, float] | None  # expected, by the kinds the restart rules tell apart
    budget: Budget | None
    changes: list[Change] = field(default_factory=list)
    interval_off: bool = False  # the configured interval's ETTR is over 1 point below the optimum's
    tiers: list[TierPrice] = field(default_factory=list)  # with a memory save time: disk's and memory's

    @property
    def spelled_daly(self) -> str:
        """Daly's optimum as the line to write."""
        return spelled(self.daly)


@dataclass(frozen=True)
class TierPrice:
    """One checkpoint tier: what a save costs, its optimum interval, and the work a failure that
    resumes from it redoes (half an interval and half a save, at the optimum)."""

    tier: str
    save_time: float
    young: float
    daly: float
    lost_per_failure: float
    resumes: str  # the failures that resume from this tier


def tier_prices(costs: model.Costs, memory_save_time: float) -> list[TierPrice]:
    """Disk's price and memory's. Memory's optimum is priced at the job's whole failure rate, the
    node losses among them included (which resume from a peer's copy, as old as the copies' pacing
    lets it grow, or from disk): its interval errs short, and a node's loss costs more than it says."""

    def price(tier: str, save: float, resumes: str) -> TierPrice:
        daly = model.daly_interval(save, costs.mtbf)
        return TierPrice(tier, save, model.young_interval(save, costs.mtbf), daly, (daly + save) / 2, resumes)

    return [
        price("disk", costs.save_time, "every failure, a node's loss included"),
        price("memory", memory_save_time, "a crash, kill or hang of the trainer; a node's loss from its peer's copy"),
    ]


def costs_of(inputs: Inputs) -> model.Costs:
    missing = inputs.missing("save_time", "restart_time")
    if missing:
        them = "them, pass them as flags" if len(missing) > 1 else "it, pass it as a flag"
        raise NotEnough(f"the plan needs {' and '.join(missing)}: state {them}, or give --from-events")
    for name in ("node_mtbf", "save_time"):
        if not (getattr(inputs, name).value or 0) > 0:
            what = name.replace("_", " ")
            raise NotEnough(f"{KEYS[name]} must be longer than 0s: a {what} of nothing has no optimum")
    assert inputs.nodes.value and inputs.node_mtbf.value and inputs.save_time.value
    try:
        nodes = float(inputs.nodes.value)
    except OverflowError:
        raise NotEnough("more nodes than the plan can count", "nodes") from None
    return model.Costs(
        mtbf=model.job_mtbf(inputs.node_mtbf.value, nodes),
        save_time=inputs.save_time.value,
        restart_time=inputs.restart_time.value or 0.0,
        hang_share=inputs.hang_share.value or 0.0,
        hang_timeout=inputs.hang_timeout.value or 0.0,
    )


def forecast(inputs: Inputs, memory_save_time: float | None = None) -> Forecast:
    """The whole forecast; raises NotEnough without a save time and a restart time, or when no
    interval lets the job make progress. With ``memory_save_time``, each tier is priced too."""
    costs = costs_of(inputs)
    daly = model.daly_interval(costs.save_time, costs.mtbf)
    if (daly + costs.save_time + costs.restart_time) / costs.mtbf > model.HOPELESS:
        raise NotEnough(
            f"with a failure every {spelled(costs.mtbf)}, a {spelled(costs.save_time)} save and a "
            f"{spelled(costs.restart_time)} restart, no checkpoint interval lets the job make progress"
        )
    configured = inputs.interval.value
    work = inputs.duration.value
    # The interval the run will use: the configured one, or, if none, the optimum.
    used = configured or daly
    failures = budget = None
    changes: list[Change] = []
    off = configured is not None and costs.ettr(daly) - costs.ettr(configured) > ETTR_SLACK
    if configured is None or off:
        changes.append(interval_change(costs, configured, daly))
    if work:
        expected = min(costs.failures(work, used), NEVER)
        hangs = expected * costs.hang_share
        uncounted = hangs if inputs.on_hang else 0.0
        failures = {
            "expected": expected,
            "environment": expected - hangs,
            "hang": hangs,
            "counted": expected - uncounted,
            "uncounted": uncounted,
        }
        budget, advice = restart_budget(inputs, costs, work, used)
        changes += advice
    return Forecast(
        inputs=inputs,
        job_mtbf=costs.mtbf,
        young=model.young_interval(costs.save_time, costs.mtbf),
        daly=daly,
        ettr_optimal=costs.ettr(daly),
        ettr_configured=costs.ettr(configured) if configured else None,
        wall_optimal=min(costs.wall_time(work, daly), math.inf) if work else None,
        wall_configured=min(costs.wall_time(work, configured), math.inf) if work and configured else None,
        failures=failures,
        budget=budget,
        changes=changes,
        interval_off=off,
        tiers=tier_prices(costs, memory_save_time) if memory_save_time else [],
    )


def forecast_config(config: HAConfig) -> Forecast | None:
    """The forecast of a validated scenario, or None when it lacks what the model needs: for the
    lint rules, which stay quiet then."""
    try:
        return forecast(from_config(config))
    except NotEnough:
        return None


def spelled(seconds: float) -> str:
    """A duration as a scenario file writes it, to the minute once it is over ten minutes; past
    what a file may write, in days to three figures; "never" only for what overflowed."""
    if seconds > LONGEST:
        return f"{seconds / 86400:.3g}d" if math.isfinite(seconds) else "never"
    step = 60 if seconds >= 600 else 1
    return format_duration(timedelta(seconds=max(step, round(seconds / step) * step)))


def interval_change(costs: model.Costs, configured: float | None, daly: float) -> Change:
    best = f"{costs.ettr(daly):.1%}"
    why = f"save every {spelled(daly)} (Daly's optimum): ETTR {best}" + (
        f" instead of {costs.ettr(configured):.1%} at {spelled(configured)}" if configured else ""
    )
    return Change(why, f"checkpoint:\n  interval: {spelled(daly)}")


def restart_budget(inputs: Inputs, costs: model.Costs, work: float, interval: float) -> tuple[Budget, list[Change]]:
    """The chance the budget runs out before the end, and, when it is too high, what to write: the
    smallest budget that brings it under :data:`BUDGET_RISK`, so that writing it plans within."""
    rules = model.Rules(inputs.restart_max, inputs.on_hang, inputs.pod_reschedules)
    if costs.failures(work, interval) > HOPELESS_FAILURES:
        why = f"at {spelled(interval)} the run would need more than {HOPELESS_FAILURES:,} restarts: save more often"
        return Budget(rules.restart_max, rules.pod_reschedules, 1.0, "beyond counting", None), [Change(why, "")]
    units = model.Units(costs.hang_share, inputs.on_hang, costs.progress_chance(interval))
    spent = units.spending(costs.failures(work, interval), work / interval)
    low, high = ma.RETRY_LIMITS.get(inputs.platform, (1, 128))
    p = spent.p_exhausted(rules.budget)
    enough = spent.budget_for(BUDGET_RISK)
    needed = max(low, enough - inputs.pod_reschedules)
    budget = Budget(
        rules.restart_max,
        rules.pod_reschedules,
        p,
        spent.method,
        needed if needed <= high else None,
        p_low=spent.p_low(rules.budget),
    )
    if not budget.risky:
        return budget, []
    risk = f"{p:.0%} chance the restart budget runs out before the end"
    if needed <= high:
        return budget, [
            Change(f"{risk}; restart.max {needed} brings it under {BUDGET_RISK:.0%}", f"restart:\n  max: {needed}")
        ]
    # The platform's range cannot hold it: what else spends less, or gives more.
    advice = []
    pods = enough - high
    advice.append(
        Change(
            f"{risk}, and {inputs.platform} allows at most restart.max {high}: "
            f"{pods} pod reschedules on top would bring it under {BUDGET_RISK:.0%}",
            f"restart:\n  max: {high}\n  pod_reschedules: {pods}",
        )
    )
    if not inputs.on_hang and costs.hang_share:
        upto = model.Rules(high, True, inputs.pod_reschedules).budget
        hang_restarts = model.Units(costs.hang_share, True, costs.progress_chance(interval))
        with_hang = hang_restarts.spending(costs.failures(work, interval), work / interval, upto).p_exhausted(upto)
        advice.append(Change(f"hang restarts do not count: with them on, {with_hang:.0%}", "restart:\n  on_hang: true"))
    longest = longest_job(units, inputs, costs, interval, high)
    if longest:
        advice.append(
            Change(
                f"or split the run into jobs of at most {spelled(longest)} of compute each "
                "(each starts with a fresh budget)",
                f"job:\n  duration: {spelled(longest)}",
            )
        )
    return budget, advice


def longest_job(
    units: model.Units, inputs: Inputs, costs: model.Costs, interval: float, restart_max: int
) -> float | None:
    """The longest run whose budget, at the platform's highest restart.max, runs out at most 5% of the time."""
    budget = model.Rules(restart_max, inputs.on_hang, inputs.pod_reschedules).budget
    low, high = 0.0, inputs.duration.value or 0.0
    for _ in range(14):  # to a few hundredths of a percent of the run
        middle = (low + high) / 2
        spent = units.spending(costs.failures(middle, interval), middle / interval, upto=budget)
        if spent.p_exhausted(budget) <= BUDGET_RISK:
            low = middle
        else:
            high = middle
    return low if low >= interval else None
