"""Checkpoints: restarts are only worth as much as what they resume from."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

from hacfg.plugin import (
    JobContext,
    Problem,
    Rule,
    ScenarioContext,
    Severity,
    annotation_path,
    format_duration,
    hookimpl,
    rule,
)
from hacfg.plugin import modelarts as ma

VOLATILE_PREFIXES = ("/tmp", "/var/tmp", "/cache", "/dev/shm", "/run")
LONG_RUN_NODES = 8
MAX_LONG_RUN_INTERVAL = timedelta(hours=2)


@rule("HA001", "restart-without-checkpoint", "error")
def restart_without_checkpoint(ctx: ScenarioContext) -> Iterator[Problem]:
    """Auto restart is on but there is no checkpoint location.

    ## What it does
    Fires when `restart.max` (or `fault-tolerance/job-retry-num`) is 1 or more and the job has
    nowhere to save checkpoints: no `checkpoint.path` in a scenario file; no output channel
    (`algorithm.outputs`) and no volume (`spec.volumes`) in a request body. Only the user knows
    where the training script saves: a preset never supplies `checkpoint.path` (a base file of
    your own, through `extends:`, may), and the message quotes the preset's recommendation, the
    training output channel `/home/ma-user/modelarts/outputs/train_url_0`.

    In a request body it is a warning: a script may write its checkpoints to OBS itself (as
    MoXing's `mox.file.copy_parallel` does), which the body cannot show.

    ## Why is this bad?
    The platform restarts the job, but every restart starts again from step 0. A job that
    fails every few hours may never finish, and each attempt burns the whole cluster's time.

    ## Example
    ```yaml
    restart: {max: 3}
    ```

    ## Fix
    ```yaml
    checkpoint: {path: /mnt/sfs/run1/ckpt, interval: 30m, resume: true}
    restart: {max: 3}
    ```
    and in a request body, the storage that holds it: `spec.volumes` (SFS Turbo over nfs, or
    OBS) mounted at `/mnt/sfs`, or an output channel in `algorithm.outputs`.
    """
    if ctx.config.restart.max and not ctx.config.checkpoint.path:
        fix = ctx.advised(("checkpoint", "path"), "checkpoint.path")
        yield Problem(
            ctx.own_place(("restart", "max"), ("checkpoint",)),
            f"auto restart is on but checkpoint.path is not set: every restart starts from step 0; set {fix}",
        )


@restart_without_checkpoint.job
def restart_without_checkpoint_in_body(ctx: JobContext) -> Iterator[Problem]:
    body = ctx.body
    has_output = bool(body.get(("algorithm", "outputs"))) or bool(body.get(("spec", "volumes")))
    if body.retries and not has_output and not body.snippet:  # a snippet of annotations shows no outputs
        yield Problem(
            annotation_path(ma.JOB_RETRY_NUM),
            "auto restart is on but the job has no output channel or volume to keep checkpoints: unless the "
            "script writes them to OBS itself, every restart starts from step 0; add algorithm.outputs or spec.volumes",
            severity="warning",
        )


@rule("HA002", "checkpoint-not-durable", "error")
def checkpoint_not_durable(ctx: ScenarioContext) -> Iterator[Problem]:
    """`checkpoint.path` does not survive a reschedule.

    ## What it does
    Fires when `checkpoint.path` is relative, or under `/tmp`, `/var/tmp`, `/cache`,
    `/dev/shm` or `/run`. A warning on single-node jobs, an error otherwise.

    ## Why is this bad?
    Job- and pod-level rescheduling give the job a new container, often on another node:
    local and in-memory directories start empty, so the restart resumes from nothing.

    ## Example
    ```yaml
    checkpoint: {path: /cache/ckpt}
    ```

    ## Fix
    Use shared storage: `obs://bucket/run/ckpt`, an SFS Turbo mount, or the training output
    channel (`/home/ma-user/modelarts/outputs/train_url_0`).
    """
    path = ctx.config.checkpoint.path
    if not path:
        return
    volatile = next((p for p in VOLATILE_PREFIXES if path == p or path.startswith(p + "/")), None)
    if "://" in path or (path.startswith("/") and volatile is None):
        return
    reason = f"{volatile} is local to one container" if volatile else "a relative path depends on the working directory"
    severity: Severity | None = "warning" if ctx.config.scenario == "single-node" else None
    yield Problem(
        ("checkpoint", "path"),
        f"checkpoint.path does not survive a reschedule ({reason}): use obs:// or a shared mount",
        severity=severity,
    )


@rule("HA011", "long-run-checkpoint-interval", "warning")
def long_run_checkpoint_interval(ctx: ScenarioContext) -> Iterator[Problem]:
    """The checkpoint interval costs training time: too rare, or far from the optimum.

    ## What it does
    Where the file gives what `hacfg plan` needs (`checkpoint.save_time` and
    `reliability.restart_time`; the node MTBF and share of hangs default to published figures),
    fires when the configured interval's expected ETTR is more than 1 point below the
    optimum's, and says both figures and the interval to write. The model (docs/plan.md):

    - job MTBF M = node MTBF / nodes; save time δ; restart time R; hang share h; hang timeout H
    - Daly's optimum τ = √(2δM)·[1 + ⅓√(δ/2M) + ⅑(δ/2M)] − δ for δ < 2M, else M
      (Young's first-order τ = √(2δM) is printed beside it by `hacfg plan`)
    - wall time T_w = (e^{(τ+δ)/M} − 1)·(M·e^{R/M} + h·H)·T_s/τ for compute time T_s
    - ETTR = T_s / T_w

    Without those numbers it falls back to a rule of thumb: for `llm-long-term` scenarios and
    jobs on 8 or more nodes, it fires when `checkpoint.interval` is missing or longer than
    2 hours. A preset never supplies the interval (only the training script knows it); the
    message quotes the preset's recommendation.

    ## Why is this bad?
    Every fault throws away the work done since the last checkpoint, on every node; every save
    stops training. Too rare an interval loses work, too frequent spends it on saving: on 1024
    nodes that fail as Llama 3's did, a 2 h interval with 5 min saves keeps 78.5% of the time
    productive, and 58 min keeps 82.1%.

    ## Example
    ```yaml
    job: {nodes: 1024}
    checkpoint: {path: obs://b/ckpt, interval: 2h, save_time: 5m}
    reliability: {restart_time: 10m}
    ```

    ## Fix
    Write the interval the message names (`interval: 58m`), or run `hacfg plan` to see the
    curve; without the numbers, save at least every 2 hours and record it.
    """
    config = ctx.config
    interval = config.checkpoint.interval
    if config.checkpoint.save_time is not None and config.reliability.restart_time is not None:
        from hacfg.plugin import forecast_config

        forecast = forecast_config(config)
        if forecast is None:
            return
        best, optimum = forecast.spelled_daly, f"{forecast.ettr_optimal:.1%}"
        if interval is None:
            if config.scenario == "llm-long-term" or config.job.nodes >= LONG_RUN_NODES:
                yield Problem(
                    ctx.own_place(("checkpoint",)),
                    f"long run without checkpoint.interval: every {best} (Daly's optimum) gives an expected "
                    f"ETTR of {optimum}; set checkpoint.interval: {best}",
                )
        elif forecast.interval_off and forecast.ettr_configured is not None:
            yield Problem(
                ("checkpoint", "interval"),
                f"checkpoint.interval {format_duration(interval)} gives an expected ETTR of "
                f"{forecast.ettr_configured:.1%}, every {best} (Daly's optimum) {optimum}: "
                f"set checkpoint.interval: {best}",
            )
        return
    if config.scenario != "llm-long-term" and config.job.nodes < LONG_RUN_NODES:
        return
    if interval is None:
        where = ctx.own_place(("checkpoint",))
        fix = ctx.advised(("checkpoint", "interval"), "checkpoint.interval")
        yield Problem(where, f"long run without checkpoint.interval: save at least every 2h and set {fix}")
    elif interval > MAX_LONG_RUN_INTERVAL:
        yield Problem(
            ("checkpoint", "interval"),
            "checkpoint.interval is over 2h: a fault loses up to that much work on every node; save more often",
        )


@rule("HA017", "restart-without-resume", "warning")
def restart_without_resume(ctx: ScenarioContext) -> Iterator[Problem]:
    """Auto restart is on but the script does not resume from its checkpoint.

    ## What it does
    Fires when `restart.max` is 1 or more and `checkpoint.resume` is false or unset. A preset
    never supplies `resume`: only the user knows what the script does at start-up.

    ## Why is this bad?
    The platform restarts the command as it was; a script that does not look for its newest
    checkpoint at start-up repeats all the finished work.

    ## Example
    ```yaml
    checkpoint: {path: obs://b/ckpt}
    restart: {max: 3}
    ```

    ## Fix
    Load the newest complete checkpoint at start-up (the agent passes it as
    `HACFG_RESUME_FROM`), then say so: `checkpoint: {resume: true}`.
    """
    if ctx.config.restart.max and not ctx.config.checkpoint.resume:
        fix = ctx.advised(("checkpoint", "resume"), "checkpoint.resume: true")
        yield Problem(
            ctx.own_place(("checkpoint", "resume"), ("checkpoint",), ("restart", "max")),
            "auto restart is on but checkpoint.resume is false: "
            f"reload the newest checkpoint at start-up and set {fix}",
        )


@hookimpl
def hacfg_rules() -> list[Rule]:
    return [restart_without_checkpoint, checkpoint_not_durable, long_run_checkpoint_interval, restart_without_resume]
