"""Checkpoints: restarts are only worth as much as what they resume from."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

from hacfg.plugin import JobContext, Problem, Rule, ScenarioContext, Severity, annotation_path, hookimpl, rule
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
    if body.retries and not has_output:
        yield Problem(
            annotation_path(ma.JOB_RETRY_NUM),
            "auto restart is on but the job has no output channel or volume to keep checkpoints: "
            "add algorithm.outputs or spec.volumes",
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
    """A long or large run saves checkpoints rarely, or says nothing about how often.

    ## What it does
    Fires for `llm-long-term` scenarios, and for jobs on 8 or more nodes, when
    `checkpoint.interval` is missing or longer than 2 hours. A preset never supplies the
    interval (only the training script knows it); the message quotes the preset's recommendation.

    ## Why is this bad?
    At that scale faults are routine. Every fault throws away the work done since the last
    checkpoint, on every node: with a 6 h interval, a fault costs on average 3 h of the whole
    cluster.

    ## Example
    ```yaml
    scenario: llm-long-term
    checkpoint: {path: obs://b/ckpt, interval: 6h}
    ```

    ## Fix
    Save at least every 2 hours (30 minutes is common) and record it: `interval: 30m`.
    """
    config = ctx.config
    if config.scenario != "llm-long-term" and config.job.nodes < LONG_RUN_NODES:
        return
    interval = config.checkpoint.interval
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
