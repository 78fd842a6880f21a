"""The job itself: its name, its environment, its pre-check and its accelerator."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from hacfg.plugin import JobContext, LogicalPath, Problem, Rule, ScenarioContext, annotation_path, hookimpl, rule
from hacfg.plugin import modelarts as ma

_JOB_NAME = re.compile(ma.JOB_NAME_PATTERN)
_ENV_NAME = re.compile(ma.ENV_NAME_PATTERN)
_PRECHECK_OFF = "pre-check is off on a {nodes}-node job: one bad node fails the run after start"


@rule("HA010", "operator-retry-off-npu", "error")
def operator_retry_off_npu(ctx: ScenarioContext) -> Iterator[Problem]:
    """Operator re-execution (`hccl_op_retry`) on a job that does not run on Ascend NPUs.

    ## What it does
    Fires when `operator_retry` / `fault-tolerance/hccl_op_retry` is on and the job is not an
    NPU job (for a request body: its flavor is a GPU or CPU flavor; a dedicated pool's
    `modelarts.pool.visual.*` flavor runs GPU or Ascend cards, as the pool has them).

    ## Why is this bad?
    Operator re-execution retries HCCL collectives on Ascend Snt9b23 supernode pools only
    (PyTorch preset images, full-card jobs). Elsewhere it is not available; on the pools where
    it is, it costs performance and cannot be turned off once enabled.

    ## Example
    ```yaml
    job: {accelerator: gpu}
    operator_retry: true
    ```

    ## Fix
    Remove it, or move the job to an Ascend supernode pool: `job: {accelerator: npu}`.
    """
    accelerator = ctx.config.job.accelerator
    if ctx.config.operator_retry and accelerator != "npu":
        message = f"operator re-execution needs Ascend NPUs, this job runs on {accelerator}: remove operator_retry"
        yield Problem(("operator_retry",), message)


@operator_retry_off_npu.job
def operator_retry_off_npu_in_body(ctx: JobContext) -> Iterator[Problem]:
    body = ctx.body
    if body.flag(ma.HCCL_OP_RETRY) and body.accelerator not in (None, "npu"):
        message = f"{ma.HCCL_OP_RETRY} needs an Ascend supernode flavor, not {body.flavor}: remove it"
        yield Problem(annotation_path(ma.HCCL_OP_RETRY), message)


@rule("HA012", "job-name", "error", kind="job")
def job_name(ctx: JobContext) -> Iterator[Problem]:
    """The job name is not 1–64 characters of letters, digits, `_` and `-`.

    ## What it does
    Checks `metadata.name` of a request body against the platform's rule.

    ## Why is this bad?
    The create-training-job API rejects the request.

    ## Example
    ```json
    {"metadata": {"name": "llama pretrain v2.1"}}
    ```

    ## Fix
    `"llama-pretrain-v2_1"`.
    """
    name = ctx.body.get(("metadata", "name"))
    if name is None and ctx.body.snippet:
        return  # the platform docs' snippet of annotations names no job, and needs none
    if not isinstance(name, str) or not _JOB_NAME.fullmatch(name):
        where = ctx.first_present(("metadata", "name"), ("metadata",))
        rule = "must be 1-64 characters of A-Z a-z 0-9 _ -"
        message = f"job name {name!r} {rule}" if name is not None else f"metadata.name is missing: a job name {rule}"
        yield Problem(where, message)


@rule("HA013", "environment-rejected", "error")
def environment_rejected(ctx: ScenarioContext) -> Iterator[Problem]:
    """Environment variables the platform rejects.

    ## What it does
    Fires for a variable whose name is not letters, digits and `_` (starting with a letter or
    `_`), a value containing `$`, more than 100 variables, a name over 8192 characters or a
    value over 4096.

    ## Why is this bad?
    The create-training-job API refuses the whole request. `$` is refused because values are
    not expanded: `$HOME/data` would reach the job literally.

    ## Example
    ```yaml
    environment: {DATA-DIR: $HOME/data}
    ```

    ## Fix
    `environment: {DATA_DIR: /home/ma-user/data}`; expand variables in the start command.
    """
    return _rejected(ctx.environment, ctx.ENVIRONMENT)


@environment_rejected.job
def environment_rejected_in_body(ctx: JobContext) -> Iterator[Problem]:
    return _rejected(ctx.environment, ctx.ENVIRONMENT)


def _rejected(environment: Mapping[Any, Any], base: LogicalPath) -> Iterator[Problem]:
    if len(environment) > ma.MAX_ENV_PAIRS:
        yield Problem(base, f"{len(environment)} environment variables; the platform takes at most {ma.MAX_ENV_PAIRS}")
    for name, value in environment.items():
        path = (*base, name)
        name_text = str(name)
        if len(name_text) > ma.MAX_ENV_NAME:
            yield Problem(path, f"environment variable name over {ma.MAX_ENV_NAME} characters", on_key=True)
        elif not _ENV_NAME.fullmatch(name_text):
            message = (
                f"environment variable name {name_text!r} must be letters, digits and _, not starting with a digit"
            )
            yield Problem(path, message, on_key=True)
        value_text = str(value)
        if "$" in value_text:
            message = (
                f"{name_text} contains '$': the platform refuses it and would not expand it; "
                "expand variables in the command"
            )
            yield Problem(path, message)
        if len(value_text) > ma.MAX_ENV_VALUE:
            yield Problem(
                path, f"{name_text} is {len(value_text)} characters; the platform takes at most {ma.MAX_ENV_VALUE}"
            )


@rule("HA014", "platform-prefix-variable", "warning")
def platform_prefix_variable(ctx: ScenarioContext) -> Iterator[Problem]:
    """A custom environment variable uses the platform's `MA_` prefix.

    ## What it does
    Fires for variables starting with `MA_`, other than the two meant to be set by jobs:
    `MA_HANG_DETECT_TIME` and `MA_DETECT_TRAIN_INJECT_CODE`.

    ## Why is this bad?
    ModelArts sets `MA_*` variables itself (`MA_NUM_HOSTS`, `MA_CURRENT_IP`, ...). A custom
    one may collide with a platform variable now or in a later release.

    ## Example
    ```yaml
    environment: {MA_DATASET: obs://b/data}
    ```

    ## Fix
    Pick another prefix: `environment: {TRAIN_DATASET: obs://b/data}`.
    """
    return _platform_prefixed(ctx.environment, ctx.ENVIRONMENT)


@platform_prefix_variable.job
def platform_prefix_variable_in_body(ctx: JobContext) -> Iterator[Problem]:
    return _platform_prefixed(ctx.environment, ctx.ENVIRONMENT)


def _platform_prefixed(environment: Mapping[Any, Any], base: LogicalPath) -> Iterator[Problem]:
    for name in environment:
        if str(name).startswith("MA_") and name not in ma.SETTABLE_PLATFORM_VARIABLES:
            message = f"{name} uses the platform's MA_ prefix and may collide with a ModelArts variable: rename it"
            yield Problem((*base, name), message, on_key=True)


@rule("HA019", "precheck-off-multi-node", "warning")
def precheck_off_multi_node(ctx: ScenarioContext) -> Iterator[Problem]:
    """The environment pre-check is off on a multi-node job.

    ## What it does
    Fires when `precheck: false` (or `MA_DETECT_TRAIN_INJECT_CODE: "0"`) on a job with more than
    one node.

    ## Why is this bad?
    The pre-check finds bad nodes (DNS, disks, ulimits, GPUs) before the job starts. Without
    it, one bad node fails the whole job after it has started, and the restart lands on the
    same node again.

    ## Example
    ```yaml
    job: {nodes: 4}
    precheck: false
    ```

    ## Fix
    Leave the pre-check on (the default).
    """
    nodes = ctx.config.job.nodes
    if not ctx.config.precheck and nodes > 1:
        yield Problem(("precheck",), f"{_PRECHECK_OFF.format(nodes=nodes)}; remove precheck: false")


@precheck_off_multi_node.job
def precheck_off_multi_node_in_body(ctx: JobContext) -> Iterator[Problem]:
    nodes = ctx.body.node_count or 1
    if str(ctx.environment.get(ma.PRECHECK_SWITCH, "")).strip() == "0" and nodes > 1:
        where = (*ctx.ENVIRONMENT, ma.PRECHECK_SWITCH)
        yield Problem(where, f"{_PRECHECK_OFF.format(nodes=nodes)}; remove {ma.PRECHECK_SWITCH}")


@hookimpl
def hacfg_rules() -> list[Rule]:
    return [operator_retry_off_npu, job_name, environment_rejected, platform_prefix_variable, precheck_off_multi_node]
