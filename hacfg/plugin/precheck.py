"""What a pre-check plugin implements and receives (``hacfg_prechecks``).

Plain types only, and cheap to define: a plugin that adds a pre-check and a rule is imported by
every lint, which pays for each class it names. So the records are named tuples (a frozen
dataclass generates its methods with ``exec``, about 0.5 ms each, a few percent of a cold lint).
The agent's machinery that runs pre-checks sits above this package; the policy a pre-check reads
comes from :mod:`hacfg.restart`, below it. Plugin authors import these through :mod:`hacfg.plugin`.
"""

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Literal, NamedTuple

from hacfg.scenario import modelarts as ma

if TYPE_CHECKING:
    from hacfg.restart.policy import Policy

GiB = 1 << 30
Status = Literal["passed", "failed", "skipped"]


def human_size(size: float) -> str:
    """Bytes as people read them: ``1.5GiB``."""
    for unit, scale in (("TiB", 1 << 40), ("GiB", GiB), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.1f}{unit}"
    return f"{int(size)}B"


def _size(text: str) -> int:
    """``32GB``/``32G``/``32GiB`` -> bytes (binary units), or a plain number of bytes."""
    text = text.strip().upper().removesuffix("IB").removesuffix("B")
    scale = {"K": 1 << 10, "M": 1 << 20, "G": GiB, "T": 1 << 40}.get(text[-1:], 1)
    return int(float(text.rstrip("KMGT")) * scale)


class PrecheckSettings(NamedTuple):
    """Each field can be set with ``HACFG_PRECHECK_<FIELD>``, e.g. ``HACFG_PRECHECK_SHM_MIN=1G``."""

    hosts_dir: Path = Path("/etc/volcano")
    root_path: Path = Path("/")
    root_min: int = 32 * GiB
    shm_path: Path = Path("/dev/shm")
    shm_min: int = ma.PRECHECK_SHM_MIN
    cache_path: Path = Path("/cache")
    cache_min: int = 32 * GiB
    memlock_min_kb: int = 16000
    nofile_min: int = 1000000
    stack_min_kb: int = 8000
    nproc_min: int = 1000000
    gpu_devices: str = "/dev/nvidia[0-9]*"
    dns_timeout: float = 10.0
    # Ascend NPUs (accelerator: npu): the cards, the driver's management device, the tool that reads their health.
    npu_devices: str = "/dev/davinci[0-9]*"
    npu_manager: Path = Path("/dev/davinci_manager")
    npu_smi: str = "npu-smi"
    npu_smi_timeout: float = 30.0

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> "PrecheckSettings":
        environ = os.environ if environ is None else environ
        read: dict[type, Callable[[str], object]] = {Path: Path, int: _size, float: float, str: str}
        values = {
            name: read[kind](environ[variable])
            for name, kind in cls.__annotations__.items()
            if (variable := f"HACFG_PRECHECK_{name.upper()}") in environ
        }
        return cls(**values)  # type: ignore[arg-type]


class PrecheckResult(NamedTuple):
    """One item a pre-check checked, logged as one ``item=`` line."""

    name: str  # the log keyword, as the platform prints it: "disk-size shm"
    status: Status
    value: str = ""
    need: str = ""
    detail: str = ""

    def line(self) -> str:
        parts = [f"[hacfg] item={self.name}", f"status={self.status}"]
        extra = (("value", self.value), ("need", self.need), ("detail", self.detail))
        parts += [f"{key}={value}" for key, value in extra if value]
        return " ".join(parts)


class PrecheckContext(NamedTuple):
    """What a pre-check may read: the job's policy, the thresholds, the environment."""

    policy: "Policy"  # quoted, and no ``from __future__ import annotations``: a string field costs a compile
    settings: PrecheckSettings
    environ: Mapping[str, str] = MappingProxyType({})


class Precheck:
    """One pre-check. Subclasses set ``name`` and implement ``run`` (one result per item checked)."""

    name: str = ""

    def run(self, ctx: PrecheckContext) -> list[PrecheckResult]:
        raise NotImplementedError
