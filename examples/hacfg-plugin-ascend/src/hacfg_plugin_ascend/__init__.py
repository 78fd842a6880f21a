"""hacfg plugin for Ascend NPU jobs: an operator re-execution rule and an NPU pre-check."""

from __future__ import annotations

import glob

from hacfg import hookimpl
from hacfg.agent.prechecks import Precheck, PrecheckContext, PrecheckResult
from hacfg.rules import LintContext, Problem, annotation_path, rule

HCCL_OP_RETRY = "fault-tolerance/hccl_op_retry"
FULL_CARD_FLAVOR = ".16xlarge"  # all 16 cards of a 910A3 supernode server


@rule("ASC101", "operator-retry-needs-pytorch-full-card", "error", kinds=("scenario", "job"))
def operator_retry_needs_pytorch_full_card(ctx: LintContext):
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
    if ctx.config is not None:
        if not ctx.config.operator_retry:
            return
        image, flavor = ctx.config.job.image or "", ctx.config.job.flavor or ""
        where = ("operator_retry",)
    else:
        if not ctx.body.flag(HCCL_OP_RETRY):
            return
        image = str(ctx.body.get(("algorithm", "engine", "image_url")) or "")
        flavor = ctx.body.flavor
        where = annotation_path(HCCL_OP_RETRY)
    if image and "pytorch" not in image.lower() and "torch" not in image.lower():
        yield Problem(where, f"operator re-execution needs a PyTorch image, not {image}: switch image or remove it")
    if flavor and not flavor.endswith(FULL_CARD_FLAVOR):
        yield Problem(where, f"operator re-execution needs a full-card flavor (*{FULL_CARD_FLAVOR}), not {flavor}")


class NpuCheck(Precheck):
    """NPU jobs see at least one Ascend device."""

    name = "npu-check"

    def run(self, ctx: PrecheckContext) -> list[PrecheckResult]:
        if ctx.policy.accelerator != "npu":
            return [PrecheckResult(self.name, "skipped", detail=f"accelerator is {ctx.policy.accelerator}")]
        pattern = ctx.environ.get("HACFG_PRECHECK_NPU_DEVICES", "/dev/davinci[0-9]*")
        count = len(glob.glob(pattern))
        return [PrecheckResult(self.name, "passed" if count else "failed", str(count), ">=1", detail=f"devices {pattern}")]


@hookimpl
def hacfg_rules():
    return [operator_retry_needs_pytorch_full_card]


@hookimpl
def hacfg_prechecks():
    return [NpuCheck()]


__all__ = ["NpuCheck", "operator_retry_needs_pytorch_full_card"]
