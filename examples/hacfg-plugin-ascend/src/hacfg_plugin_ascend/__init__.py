"""hacfg plugin for Ascend NPU jobs: an operator re-execution rule and a pre-check of the CANN toolkit."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from hacfg.plugin import (
    JobContext,
    LogicalPath,
    Precheck,
    PrecheckContext,
    PrecheckResult,
    Problem,
    Rule,
    ScenarioContext,
    annotation_path,
    hookimpl,
    rule,
)

HCCL_OP_RETRY = "fault-tolerance/hccl_op_retry"
FULL_CARD_FLAVOR = ".16xlarge"  # all 16 cards of a 910A3 supernode server


@rule("ASC101", "operator-retry-needs-pytorch-full-card", "error")
def operator_retry_needs_pytorch_full_card(ctx: ScenarioContext) -> Iterator[Problem]:
    """Operator re-execution on an image that is not PyTorch, or on a flavor that is not full-card.

    ## What it does
    Fires when operator re-execution is on and the job's image does not name PyTorch, or its
    flavor is not a full-card flavor (`*.16xlarge` on Ascend supernode pools).

    ## Why is this bad?
    HCCL operator re-execution is supported only for PyTorch preset images on full-card jobs
    of Snt9b23 supernode pools (MindSpore is not supported). Elsewhere the job starts, but a
    link flap still fails it.

    ## Example
    ```yaml
    job: {accelerator: npu, image: org/mindspore:2.3, flavor: modelarts.pool.visual.8xlarge}
    operator_retry: true
    ```

    ## Fix
    Use a PyTorch image and a full-card flavor, or turn operator re-execution off.
    """
    if ctx.config.operator_retry:
        yield from _unsupported(ctx.config.job.image or "", ctx.config.job.flavor or "", ("operator_retry",))


@operator_retry_needs_pytorch_full_card.job
def operator_retry_needs_pytorch_full_card_in_body(ctx: JobContext) -> Iterator[Problem]:
    if ctx.body.flag(HCCL_OP_RETRY):
        image = str(ctx.body.get(("algorithm", "engine", "image_url")) or "")
        yield from _unsupported(image, ctx.body.flavor, annotation_path(HCCL_OP_RETRY))


def _unsupported(image: str, flavor: str, where: LogicalPath) -> Iterator[Problem]:
    if image and "torch" not in image.lower():
        yield Problem(where, f"operator re-execution needs a PyTorch image, not {image}: switch image or remove it")
    if flavor and not flavor.endswith(FULL_CARD_FLAVOR):
        yield Problem(where, f"operator re-execution needs a full-card flavor (*{FULL_CARD_FLAVOR}), not {flavor}")


class CannToolkit(Precheck):
    """NPU jobs find the CANN toolkit their framework runs on: ``ASCEND_TOOLKIT_HOME`` (or
    ``ASCEND_HOME_PATH``), which CANN's ``set_env.sh`` exports, names an installed toolkit."""

    name = "cann-toolkit"

    def run(self, ctx: PrecheckContext) -> list[PrecheckResult]:
        if ctx.policy.accelerator != "npu":
            return [PrecheckResult(self.name, "skipped", detail=f"accelerator is {ctx.policy.accelerator}")]
        home = ctx.environ.get("ASCEND_TOOLKIT_HOME") or ctx.environ.get("ASCEND_HOME_PATH")
        if not home:
            detail = "ASCEND_TOOLKIT_HOME is unset: source CANN's set_env.sh in the image"
            return [PrecheckResult(self.name, "failed", need="a CANN toolkit", detail=detail)]
        found = Path(home).is_dir()
        detail = "" if found else f"{home} does not exist"
        return [PrecheckResult(self.name, "passed" if found else "failed", home, "a CANN toolkit", detail)]


@hookimpl
def hacfg_rules() -> list[Rule]:
    return [operator_retry_needs_pytorch_full_card]


@hookimpl
def hacfg_prechecks() -> list[Precheck]:
    return [CannToolkit()]


__all__ = ["CannToolkit", "operator_retry_needs_pytorch_full_card"]
