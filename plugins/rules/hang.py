"""Suspension (hang) detection and restart upon suspension."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

from hacfg.plugin import JobContext, Problem, Rule, ScenarioContext, annotation_path, hookimpl, rule
from hacfg.plugin import modelarts as ma

MIN_HANG_TIMEOUT = timedelta(minutes=10)
_ONLY_WATCHED = "(only GPU/NPU jobs are watched): remove it"
_KILLS_HEALTHY_JOBS = "kills healthy jobs during long steps and checkpoint saves"


@rule("HA003", "multi-node-without-hang-restart", "warning")
def multi_node_without_hang_restart(ctx: ScenarioContext) -> Iterator[Problem]:
    """A multi-node job without restart upon suspension.

    ## What it does
    Fires when the job has more than one node (or is a `multi-node` or `llm-long-term`
    scenario) and `restart.on_hang` / `fault-tolerance/hang-retry` is off.

    ## Why is this bad?
    One stuck rank stalls every other rank in its next collective. The job then holds the whole
    cluster doing nothing until someone notices; the platform can detect this and restart the
    process in place, without spending the restart budget.

    ## Example
    ```yaml
    scenario: multi-node
    restart: {max: 3, on_hang: false}
    ```

    ## Fix
    `restart: {on_hang: true}` (with auto restart on).
    """
    config = ctx.config
    multi = config.job.nodes > 1 or config.scenario in ("multi-node", "llm-long-term")
    if multi and not config.restart.on_hang:
        yield Problem(
            ctx.first_present(("restart", "on_hang"), ("job", "nodes"), ("scenario",)),
            "multi-node job without restart upon suspension: one hung rank stalls them all; set restart.on_hang: true",
        )


@multi_node_without_hang_restart.job
def multi_node_without_hang_restart_in_body(ctx: JobContext) -> Iterator[Problem]:
    nodes = ctx.body.node_count or 1
    if nodes > 1 and not ctx.body.flag(ma.HANG_RETRY):
        where = (
            annotation_path(ma.HANG_RETRY)
            if ma.HANG_RETRY in ctx.body.annotations
            else ("spec", "resource", "node_count")
        )
        yield Problem(where, f'{nodes}-node job without restart upon suspension: set {ma.HANG_RETRY}: "true"')


@rule("HA004", "hang-detection-on-cpu", "error")
def hang_detection_on_cpu(ctx: ScenarioContext) -> Iterator[Problem]:
    """Suspension detection or restart upon suspension on a CPU job.

    ## What it does
    Fires when a CPU job turns on `hang.detect` or `restart.on_hang`
    (`fault-tolerance/hang-retry` on a CPU flavor).

    ## Why is this bad?
    The platform watches only GPU and NPU jobs for suspension. On a CPU job the setting does
    nothing, and the team believes hangs are handled when they are not.

    ## Example
    ```yaml
    job: {accelerator: cpu}
    restart: {max: 2, on_hang: true}
    ```

    ## Fix
    Drop the settings, and run the job under `hacfg agent`, whose hang detection works on any
    job (no output and no heartbeat for `hang.timeout`).
    """
    config = ctx.config
    if config.job.accelerator != "cpu":
        return
    if config.restart.on_hang:
        yield Problem(("restart", "on_hang"), f"restart upon suspension does nothing on a CPU job {_ONLY_WATCHED}")
    if config.hang.detect and ctx.is_set(("hang", "detect")):
        yield Problem(("hang", "detect"), f"suspension detection does nothing on a CPU job {_ONLY_WATCHED}")


@hang_detection_on_cpu.job
def hang_detection_on_cpu_in_body(ctx: JobContext) -> Iterator[Problem]:
    if ctx.body.accelerator == "cpu" and ctx.body.flag(ma.HANG_RETRY):
        yield Problem(annotation_path(ma.HANG_RETRY), f"{ma.HANG_RETRY} does nothing on a CPU flavor {_ONLY_WATCHED}")


@rule("HA016", "hang-timeout-short", "warning")
def hang_timeout_short(ctx: ScenarioContext) -> Iterator[Problem]:
    """The hang timeout is under 10 minutes, or not whole minutes.

    ## What it does
    Fires when `hang.timeout` (or `MA_HANG_DETECT_TIME`) is below 10 minutes, or is not a
    whole number of minutes.

    ## Why is this bad?
    Long steps, evaluation passes and large checkpoint saves go quiet for minutes; a short
    timeout kills healthy jobs. The platform counts whole minutes only, so `90s` becomes 2.
    A short timeout for training is safe for the agent once the quiet parts are phases of their
    own (`hacfg.heartbeat.phase("eval")`; `save_step` runs in `checkpoint` by itself), declared
    or learned. Declared, in `hang.phases`: then the rule stays quiet about the length. Learned
    (`hang.learn: true`): `timeout` stays long, as the platform's own detector needs (it knows no
    phases), and the agent judges training by 5 x the p99 of the time between step reports (at
    least `learn_floor`), each save and evaluation by what its phase took before. Either way a
    hang in training is caught in minutes instead of half an hour.

    ## Example
    ```yaml
    hang: {timeout: 5m}
    ```

    ## Fix
    10 minutes or more, whole minutes, and let the agent learn the short ones:
    `hang: {timeout: 30m, learn: true}`; or keep it short and declare the quiet phases:
    `hang: {timeout: 5m, phases: {checkpoint: 30m, eval: 20m}}`.
    """
    hang = ctx.config.hang
    if not hang.detect:
        return
    if hang.timeout < MIN_HANG_TIMEOUT and "checkpoint" not in hang.phases:
        yield Problem(
            ("hang", "timeout"),
            f"hang.timeout under 10m {_KILLS_HEALTHY_JOBS}: use 10m or more and let the agent learn shorter"
            " ones (hang.learn: true), or give the quiet phases their own: hang.phases: {checkpoint: 30m}",
        )
    elif hang.timeout.total_seconds() % 60:
        yield Problem(
            ("hang", "timeout"), "hang.timeout is not whole minutes; the platform rounds it: write it in minutes"
        )


@hang_timeout_short.job
def hang_timeout_short_in_body(ctx: JobContext) -> Iterator[Problem]:
    if ma.HANG_DETECT_TIME not in ctx.environment:
        return
    value = str(ctx.environment[ma.HANG_DETECT_TIME]).strip()
    where = (*ctx.ENVIRONMENT, ma.HANG_DETECT_TIME)
    if not value.isdigit():
        yield Problem(where, f'{ma.HANG_DETECT_TIME} must be whole minutes, like "30"')
    elif int(value) < MIN_HANG_TIMEOUT.total_seconds() // 60:
        yield Problem(where, f"{ma.HANG_DETECT_TIME} under 10 minutes {_KILLS_HEALTHY_JOBS}: use 10 or more")


@rule("HA018", "hang-restart-without-detection", "warning")
def hang_restart_without_detection(ctx: ScenarioContext) -> Iterator[Problem]:
    """Restart upon suspension is on while suspension detection is off.

    ## What it does
    Fires when `restart.on_hang` is true and `hang.detect` is false.

    ## Why is this bad?
    A hang restart is triggered by detection. With detection off, nothing will ever trigger it
    (and on ModelArts, detection cannot actually be turned off for GPU/NPU jobs, so the file
    says something the platform will not do).

    ## Example
    ```yaml
    restart: {on_hang: true}
    hang: {detect: false}
    ```

    ## Fix
    Keep detection on and tune `hang.timeout` instead.
    """
    if ctx.config.restart.on_hang and not ctx.config.hang.detect:
        message = "restart.on_hang needs suspension detection: set hang.detect: true and tune hang.timeout"
        yield Problem(("hang", "detect"), message)


@hookimpl
def hacfg_rules() -> list[Rule]:
    return [multi_node_without_hang_restart, hang_detection_on_cpu, hang_timeout_short, hang_restart_without_detection]
