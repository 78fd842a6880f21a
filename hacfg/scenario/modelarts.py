"""ModelArts facts in one place: annotation keys, limits and settable variables.

Sources are in docs/platform.md; the numbers come from the ModelArts API reference and HA
configuration pages (Huawei Cloud) and the Open Telekom Cloud mirror, which allows fewer restarts.
"""

from __future__ import annotations

import math
import re
from datetime import timedelta

# Where a request body holds the annotations and the training command's variables.
ANNOTATIONS_AT = ("metadata", "annotations")
ENVIRONMENTS_AT = ("algorithm", "environments")

JOB_RETRY_NUM = "fault-tolerance/job-retry-num"
UNCONDITIONAL_RETRY = "fault-tolerance/job-unconditional-retry"
HANG_RETRY = "fault-tolerance/hang-retry"
POD_RETRY_NUM = "fault-tolerance/pod-retry-num"
HCCL_OP_RETRY = "fault-tolerance/hccl_op_retry"

FAULT_TOLERANCE_PREFIX = "fault-tolerance/"
FAULT_TOLERANCE_KEYS = (JOB_RETRY_NUM, UNCONDITIONAL_RETRY, HANG_RETRY, POD_RETRY_NUM, HCCL_OP_RETRY)
BOOLEAN_ANNOTATIONS = (
    UNCONDITIONAL_RETRY,
    HANG_RETRY,
    HCCL_OP_RETRY,
    "jupyter-lab/enable",
    "tensorboard/enable",
    "mindstudio-insight/enable",
    "performance_diagnosis_enabled",
)

# fault-tolerance/job-retry-num, inclusive.
RETRY_LIMITS = {"huaweicloud": (1, 128), "otc": (1, 3)}

# Unconditional and hang restarts stop after this many in a row.
CONSECUTIVE_RESTART_CAP = 3

# Table 4 "Common configuration combinations", as
# (job-retry-num, job-unconditional-retry, hang-retry, pod-retry-num): the platform's own advice.
RECOMMENDED_RESTARTS = {
    "single-node": (2, False, False, 0),
    "multi-node": (3, True, True, 0),
    "llm-long-term": (5, True, True, 3),
}

HANG_DETECT_TIME = "MA_HANG_DETECT_TIME"  # minutes, platform default 30
PRECHECK_SWITCH = "MA_DETECT_TRAIN_INJECT_CODE"  # "0" turns the pre-check off
SETTABLE_PLATFORM_VARIABLES = (HANG_DETECT_TIME, PRECHECK_SWITCH)
DEFAULT_HANG_MINUTES = 30


def hang_minutes(timeout: timedelta) -> int:
    """``MA_HANG_DETECT_TIME`` for a hang timeout: the platform counts whole minutes, so round up."""
    return max(1, math.ceil(timeout.total_seconds() / 60))


# Flavors, as the SDK's SpecResource.flavor_id documents them: public ones name their family
# (modelarts.vm.gpu.t4u8, modelarts.vm.cpu.8u, Ascend's ...snt9b...); a dedicated pool's
# modelarts.pool.visual.{,2,4,8}xlarge are GPU *or* Ascend cards, whichever the pool has, and
# 16xlarge exists only on Ascend Snt9b23 supernode pools.
SUPERNODE_FLAVOR = "modelarts.pool.visual.16xlarge"
_FAMILIES = (
    ("npu", re.compile(r"ascend|snt9|npu|d910|910b", re.IGNORECASE)),
    ("cpu", re.compile(r"(^|[._-])cpu([._-]|$)", re.IGNORECASE)),
    ("gpu", re.compile(r"(^|[._-])gpu([._-]|$)", re.IGNORECASE)),
)


def accelerator_of(flavor: str) -> str | None:
    """``gpu``, ``npu`` or ``cpu`` when the flavor says which; None when it does not (a pool's
    ``modelarts.pool.visual.8xlarge``: the pool decides)."""
    if flavor == SUPERNODE_FLAVOR:
        return "npu"
    return next((name for name, family in _FAMILIES if family.search(flavor)), None)


JOB_NAME_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
MAX_ENV_PAIRS = 100
MAX_ENV_NAME = 8192
MAX_ENV_VALUE = 4096


def annotation_string(value: object) -> str:
    """How a JSON scalar reads as an annotation value: ``3`` -> ``"3"``, ``true`` -> ``"true"``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


# How people write a switch; the platform itself reads only the exact string "true".
TRUE_SPELLINGS = ("true", "yes", "on", "1", "y")
FALSE_SPELLINGS = ("false", "no", "off", "0", "n")


def spelled_true(value: object) -> bool:
    """Whether ``value`` is some spelling of true (``"True"``, ``"yes"``, ``1``)."""
    return str(value).strip().lower() in TRUE_SPELLINGS
