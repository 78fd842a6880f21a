"""ModelArts facts in one place: annotation keys, limits and settable variables.

Sources are in docs/platform.md; the numbers come from the ModelArts API reference and HA
configuration pages (Huawei Cloud) and the Open Telekom Cloud mirror, which allows fewer restarts.
"""

from __future__ import annotations

import math
import re
from datetime import timedelta
from typing import NamedTuple

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

# The pre-check's /dev/shm: "disk-size shm" passes above 1 GB (read as 1 GiB, as the agent's pre-check does).
PRECHECK_SHM_MIN = 1 << 30

HANG_DETECT_TIME = "MA_HANG_DETECT_TIME"  # minutes, platform default 30
PRECHECK_SWITCH = "MA_DETECT_TRAIN_INJECT_CODE"  # "0" turns the pre-check off
SETTABLE_PLATFORM_VARIABLES = (HANG_DETECT_TIME, PRECHECK_SWITCH)
DEFAULT_HANG_MINUTES = 30


def hang_minutes(timeout: timedelta) -> int:
    """``MA_HANG_DETECT_TIME`` for a hang timeout: the platform counts whole minutes, so round up."""
    return max(1, math.ceil(timeout.total_seconds() / 60))


# Flavors. A flavor id names the node: its accelerator family, often its card count and chip. The schemes
# seen in ModelArts' SDK, API pages and public code (tests/scenario/test_flavors.py cites each id it reads):
#   modelarts.pool.visual.{,2,4,8,16}xlarge     dedicated pool (SDK SpecResource.flavor_id): N cards, GPU or
#                                               Ascend, whichever the pool has; 16xlarge only on Ascend
#                                               Snt9b23 supernode pools
#   modelarts.pool.visual.npu.8snt9b3.d         dedicated Ascend pool: the count right before the chip
#   modelarts.bm.npu.arm.8snt9b2.d              Lite bare metal, the same: 8 x Snt9b2 (910B3)
#   modelarts.bm.arm.24u.192g.npu.1d910b        vCPUs and memory, then the count and chip: 1 x 910B
#   modelarts.bm.gpu.8v100                      bare-metal GPU: 8 x V100
#   modelarts.kat1.{,2,4,8}xlarge[.public]      Ascend 910 ("Ascend: 8*Ascend 910" for 8xlarge)
#   modelarts.p3.{large,8xlarge}.public         V100 ("GPU:1*NVIDIA-V100(32GB)" for p3.large)
#   modelarts.bm.snt9.xlarge.{2,8}              a notebook's: the count after xlarge
#   modelarts.vm.gpu.{v100,p100,t4u8,tnt004}    public GPU flavors: no count in the id
#   modelarts.vm.cpu.{2u,8u}                    CPU: no cards
SUPERNODE_FLAVOR = "modelarts.pool.visual.16xlarge"
_FAMILIES = (
    ("npu", re.compile(r"ascend|snt\d|npu|d910|910b|d310|kat1", re.IGNORECASE)),
    ("cpu", re.compile(r"(^|[._-])cpu([._-]|$)", re.IGNORECASE)),
    ("gpu", re.compile(r"(^|[._-])(gpu|p3)([._-]|$)", re.IGNORECASE)),
)
_COUNT_AND_CHIP = re.compile(r"(\d+)([a-z]+\d[a-z0-9]*)")  # 8snt9b3, 1d910b, 8v100; not 24u, 192g
_SIZE = re.compile(r"(\d*)xlarge|large")  # Nxlarge: N cards, xlarge and large: one
# Ascend series as the device plugin names its resources (huawei.com/Ascend910 ...), by the chip in an id:
# Snt9* and kat1 are 910s. No training flavor id naming a 310 or 310P was found; one that spells it as
# d910b is spelled (1d310p) is read so, and kubernetes.device_resource states it for any other.
_ASCEND_SERIES = (("310P", re.compile(r"310p", re.IGNORECASE)), ("310", re.compile(r"310", re.IGNORECASE)))


class Flavor(NamedTuple):
    """What a flavor id says about one node; None where it does not say."""

    accelerator: str | None  # gpu, npu or cpu; None for a pool's modelarts.pool.visual.8xlarge: the pool decides
    cards: int | None  # accelerator cards per node
    chip: str | None  # the card as the id names it: snt9b3, d910b, v100
    ascend_series: str | None  # 910 (910, 910B, A3), 310P or 310: the Ascend device plugin's resource suffix


def read_flavor(flavor: str) -> Flavor:
    """The accelerator family, card count and chip a flavor id names (see the schemes above)."""
    parts = flavor.lower().split(".")
    accelerator = accelerator_of(flavor)
    cards: int | None = None
    chip: str | None = None
    for at, part in enumerate(parts):
        if named := _COUNT_AND_CHIP.fullmatch(part):
            cards, chip = int(named.group(1)), named.group(2)
        elif (size := _SIZE.fullmatch(part)) and cards is None:
            after = parts[at + 1] if at + 1 < len(parts) else ""
            cards = int(after) if after.isdigit() else int(size.group(1) or 1)
    if accelerator != "npu":
        return Flavor(accelerator, None if accelerator == "cpu" else cards, chip, None)
    series = next((series for series, pattern in _ASCEND_SERIES if pattern.search(flavor)), "910")
    return Flavor(accelerator, cards, chip, series)


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
