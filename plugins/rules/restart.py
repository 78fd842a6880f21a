"""Restart budgets: the annotations that turn auto restart on and shape it."""

from __future__ import annotations

from collections.abc import Iterator

from hacfg.plugin import JobContext, Problem, Rule, ScenarioContext, annotation_path, format_duration, hookimpl, rule
from hacfg.plugin import modelarts as ma

CAP = ma.CONSECUTIVE_RESTART_CAP
_SPENDS_ALL = f"unconditional restarts may come {CAP} in a row and spend all"


@rule("HA005", "retry-options-without-auto-restart", "error")
def retry_options_without_auto_restart(ctx: ScenarioContext) -> Iterator[Problem]:
    """Unconditional restart, hang restart or pod reschedules are set while auto restart is off.

    ## What it does
    Fires for each of `restart.unconditional`, `restart.on_hang` and `restart.pod_reschedules`
    (or their annotations) when `restart.max` / `fault-tolerance/job-retry-num` is absent or 0.
    In a scenario file, only for those the file sets itself: `restart: {max: 0}` over a preset
    turns the preset's refinements off too, and `hacfg build` leaves them out.

    ## Why is this bad?
    They all refine auto restart; without `job-retry-num` the platform does not restart the job
    at all, and runs no environment pre-check. The settings look like protection but do nothing.

    ## Example
    ```yaml
    restart: {unconditional: true, on_hang: true}
    ```

    ## Fix
    Turn auto restart on: `restart: {max: 3, unconditional: true, on_hang: true}`.
    """
    restart = ctx.config.restart
    if restart.max:
        return
    settings = (
        ("unconditional", restart.unconditional),
        ("on_hang", restart.on_hang),
        ("pod_reschedules", restart.pod_reschedules),
    )
    for name, value in settings:
        # only what this file says itself: a preset's refinements go off with the auto restart it turns off
        if value and ctx.is_set(("restart", name)):
            yield Problem(
                ("restart", name), f"restart.{name} does nothing while auto restart is off: set restart.max >= 1"
            )


@retry_options_without_auto_restart.job
def retry_options_without_auto_restart_in_body(ctx: JobContext) -> Iterator[Problem]:
    body = ctx.body
    if body.retries:
        return
    switched_on = [key for key in (ma.UNCONDITIONAL_RETRY, ma.HANG_RETRY) if body.flag(key)]
    if body.number(ma.POD_RETRY_NUM):
        switched_on.append(ma.POD_RETRY_NUM)
    for key in switched_on:
        yield Problem(annotation_path(key), f"{key} does nothing without {ma.JOB_RETRY_NUM}: add it with a value >= 1")


@rule("HA006", "retry-num-out-of-range", "error", kind="job")
def retry_num_out_of_range(ctx: JobContext) -> Iterator[Problem]:
    """`fault-tolerance/job-retry-num` is not an integer, or outside the platform's range.

    ## What it does
    Fires when the value is not a whole number, or is outside 1–128 on Huawei Cloud
    (1–3 on Open Telekom Cloud; pick with `--platform` or `platform` in `[tool.hacfg]`).

    ## Why is this bad?
    The platform rejects the request, or the console shows a value it will not honour.

    ## Example
    ```json
    {"fault-tolerance/job-retry-num": "ten"}
    ```

    ## Fix
    A whole number in a string, within range: `"3"`. Leave the key out to turn auto restart off.
    """
    key = ma.JOB_RETRY_NUM
    if key not in ctx.body.annotations:
        return
    value = ctx.body.number(key)
    low, high = ma.RETRY_LIMITS[ctx.platform]
    if value is None:
        yield Problem(annotation_path(key), f'{key} must be a whole number in a string, like "3"')
    elif not low <= value <= high:
        message = f"{key} is {value}: {ctx.platform} allows {low} to {high}; leave it out to turn auto restart off"
        yield Problem(annotation_path(key), message)


@rule("HA009", "unconditional-spends-budget", "warning")
def unconditional_spends_budget(ctx: ScenarioContext) -> Iterator[Problem]:
    """Unconditional restart with a budget of 3 or fewer restarts.

    ## What it does
    Fires when unconditional restart is on and `restart.max` (`fault-tolerance/job-retry-num`)
    is between 1 and 3, unless the settings are one of the platform's recommended combinations
    (3 + unconditional + hang restart for multi-node jobs).

    ## Why is this bad?
    Unconditional restarts count against `restart.max` and may come three in a row. A bug that
    crashes at start-up spends the whole budget, leaving nothing for the hardware faults the
    budget is for.

    ## Example
    ```yaml
    restart: {max: 3, unconditional: true}
    ```

    ## Fix
    Raise the budget above 3 (`max: 8` for long runs). Where the platform allows no more than 3
    (Open Telekom Cloud), use its recommended combination, `max: 3` with `on_hang: true`, or
    turn unconditional restart off.
    """
    restart = ctx.config.restart
    advice = _budget_advice(
        (restart.max, restart.unconditional, restart.on_hang, restart.pod_reschedules),
        ctx.platform,
        ("restart.max", "restart.on_hang: true", "restart.unconditional"),
    )
    if advice:
        yield Problem(("restart", "max"), advice)


@unconditional_spends_budget.job
def unconditional_spends_budget_in_body(ctx: JobContext) -> Iterator[Problem]:
    body = ctx.body
    settings = (
        body.retries,
        body.flag(ma.UNCONDITIONAL_RETRY),
        body.flag(ma.HANG_RETRY),
        body.number(ma.POD_RETRY_NUM) or 0,
    )
    names = (ma.JOB_RETRY_NUM, f'{ma.HANG_RETRY}: "true"', ma.UNCONDITIONAL_RETRY)
    advice = _budget_advice(settings, ctx.platform, names)
    if advice:
        yield Problem(annotation_path(ma.JOB_RETRY_NUM), advice)


def _budget_advice(settings: tuple[int, bool, bool, int], platform: str, names: tuple[str, str, str]) -> str | None:
    """HA009's one verdict on (retries, unconditional, hang, pod reschedules), however they were written."""
    retries, unconditional, _, _ = settings
    if not unconditional or not 1 <= retries <= CAP or settings in ma.RECOMMENDED_RESTARTS.values():
        return None
    budget, hang, switch = names
    if ma.RETRY_LIMITS.get(platform, (1, CAP + 1))[1] > CAP:
        return f"{_SPENDS_ALL} {retries}: raise {budget} above {CAP}"
    return (
        f"{_SPENDS_ALL} {retries}, and {platform} allows no more than {CAP}: set {budget} to {CAP} "
        f"with {hang} (the platform's recommended combination), or turn {switch} off"
    )


@rule("HA021", "restart-budget-runs-out", "warning")
def restart_budget_runs_out(ctx: ScenarioContext) -> Iterator[Problem]:
    """The restart budget is likely to run out before the run ends.

    ## What it does
    Where the file gives what `hacfg plan` needs (`job.duration`, `checkpoint.save_time`,
    `reliability.restart_time`; the node MTBF and share of hangs default to published
    figures), fires when the chance that the run needs more restarts than it may have is over
    5 %, and names the smallest `restart.max` that brings it under (within the platform's
    range), or says that none can. The budget is spent as hacfg's agent spends it: an
    environment fault takes one of `restart.max`, then one pod reschedule; a hang takes none
    while `restart.on_hang` restarts it (at most 3 in a row without a new checkpoint between),
    one when it must be handed over.

    - job MTBF M = node MTBF / nodes; expected failures N = (T_s/τ)·(e^{(τ+δ)/M} − 1)·e^{R/M}
    - each segment fails a geometric number of times, so failures are negative binomial with
      T_s/τ segments and mean N; without hang restarts, the counted ones are too (exact tail)
    - with hang restarts, a Markov chain over the failures (units spent, hangs in a row), each
      failure ending a streak with the chance e^{−(R+τ+δ)/M} that a checkpoint was completed;
      where that chain would cost too much (thousands of failures), the same count thinned to
      the failures less the hangs after a completed checkpoint, an upper bound, answers

    ## Why is this bad?
    When the budget is spent the platform stops restarting: a 30-day run on 1024 nodes that fail
    as Llama 3's did meets about 148 failures, and `restart.max 5` with 3 pod reschedules ends
    it within its first three days.

    ## Example
    ```yaml
    scenario: llm-long-term
    job: {nodes: 1024, duration: 30d}
    checkpoint: {path: obs://b/ckpt, interval: 1h, save_time: 5m}
    reliability: {restart_time: 10m}
    ```

    ## Fix
    Write the `restart.max` the message names. Where the platform's range cannot hold it (OTC
    allows 1 to 3), `hacfg plan` shows what else helps: pod reschedules, restarting hangs in
    place, or a run split into shorter jobs.
    """
    config = ctx.config
    duration = config.job.duration
    if duration is None or config.checkpoint.save_time is None or config.reliability.restart_time is None:
        return
    from hacfg.plugin import forecast_config

    forecast = forecast_config(config)
    budget = forecast.budget if forecast else None
    if budget is None or not budget.risky:
        return
    restart = config.restart
    pods = f" and {restart.pod_reschedules} pod reschedules" if restart.pod_reschedules else ""
    risk = (
        f"{budget.p_exhausted:.0%} chance that the restart budget (restart.max {restart.max}{pods}) runs out "
        f"before the {format_duration(duration)} run ends"
    )
    if budget.restart_max_needed is not None:
        advice = f"restart.max {budget.restart_max_needed} brings it under {budget.limit:.0%}"
    else:
        high = ma.RETRY_LIMITS.get(config.platform, (1, 128))[1]
        advice = f"{config.platform} allows at most restart.max {high}: `hacfg plan` shows what else helps"
    yield Problem(ctx.own_place(("restart", "max"), ("job", "duration")), f"{risk}: {advice}")


@rule("HA022", "llm-without-auto-restart", "error")
def llm_without_auto_restart(ctx: ScenarioContext) -> Iterator[Problem]:
    """An LLM long-term scenario with auto restart off.

    ## What it does
    Fires when the scenario is `llm-long-term` and `restart.max` is 0.

    ## Why is this bad?
    The platform's scenario table lists auto restart as *Required* for LLM long-term training:
    a run of weeks on many nodes meets hardware faults, and without `fault-tolerance/job-retry-num`
    the first one ends the job (and the environment pre-check never runs).

    ## Example
    ```yaml
    scenario: llm-long-term
    restart: {max: 0}
    ```

    ## Fix
    Turn it on: leave `restart.max` to the preset (5), or set a budget `>= 1`.
    """
    if ctx.config.scenario == "llm-long-term" and not ctx.config.restart.max:
        message = "llm-long-term training requires auto restart: set restart.max >= 1 (the preset says 5)"
        yield Problem(("restart", "max"), message)


@hookimpl
def hacfg_rules() -> list[Rule]:
    return [
        retry_options_without_auto_restart,
        retry_num_out_of_range,
        unconditional_spends_budget,
        restart_budget_runs_out,
        llm_without_auto_restart,
    ]
