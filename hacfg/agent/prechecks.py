"""Environment pre-checks before the command starts; each is a plugin and logs one `item=` line.

Paths and thresholds come from ``HACFG_PRECHECK_*`` environment variables, so tests and odd
clusters can move them without code (``PrecheckSettings`` lists them).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Literal

from hacfg import plugin_manager
from hacfg.agent.policy import Policy

GiB = 1 << 30
Status = Literal["passed", "failed", "skipped"]


def _size(text: str) -> int:
    """``32GB``/``32G``/``32GiB`` -> bytes (binary units), or a plain number of bytes."""
    text = text.strip().upper().removesuffix("IB").removesuffix("B")
    scale = {"K": 1 << 10, "M": 1 << 20, "G": GiB, "T": 1 << 40}.get(text[-1:], 1)
    return int(float(text.rstrip("KMGT")) * scale)


@dataclass(frozen=True)
class PrecheckSettings:
    """Each field can be set with ``HACFG_PRECHECK_<FIELD>``, e.g. ``HACFG_PRECHECK_SHM_MIN=1G``."""

    hosts_dir: Path = Path("/etc/volcano")
    root_path: Path = Path("/")
    root_min: int = 32 * GiB
    shm_path: Path = Path("/dev/shm")
    shm_min: int = 1 * GiB
    cache_path: Path = Path("/cache")
    cache_min: int = 32 * GiB
    memlock_min_kb: int = 16000
    nofile_min: int = 1000000
    stack_min_kb: int = 8000
    nproc_min: int = 1000000
    gpu_devices: str = "/dev/nvidia[0-9]*"
    dns_timeout: float = 10.0

    @classmethod
    def from_environment(cls, environ: dict[str, str] | None = None) -> PrecheckSettings:
        environ = os.environ if environ is None else environ
        values = {}
        for item in fields(cls):
            raw = environ.get(f"HACFG_PRECHECK_{item.name.upper()}")
            if raw is None:
                continue
            convert: Callable[[str], object] = {"Path": Path, "int": _size, "float": float, "str": str}[str(item.type)]
            values[item.name] = convert(raw)
        return cls(**values)


@dataclass(frozen=True)
class PrecheckResult:
    name: str  # the log keyword, as the platform prints it: "disk-size shm"
    status: Status
    value: str = ""
    need: str = ""
    detail: str = ""

    def line(self) -> str:
        parts = [f"[hacfg] item={self.name}", f"status={self.status}"]
        parts += [f"{key}={value}" for key, value in (("value", self.value), ("need", self.need), ("detail", self.detail)) if value]
        return " ".join(parts)


@dataclass(frozen=True)
class PrecheckContext:
    policy: Policy
    settings: PrecheckSettings
    environ: dict[str, str] = field(default_factory=dict)


class Precheck:
    """One pre-check. Subclasses set ``name`` and implement ``run`` (one result per item checked)."""

    name: str = ""

    def run(self, ctx: PrecheckContext) -> list[PrecheckResult]:
        raise NotImplementedError


def prechecks() -> list[Precheck]:
    return [check for _, check in plugin_manager.get().items("hacfg_prechecks", Precheck)]


def run_prechecks(ctx: PrecheckContext) -> list[PrecheckResult]:
    """Every pre-check's results; one that raises fails with its error as the detail."""
    results = []
    for check in prechecks():
        try:
            results.extend(check.run(ctx))
        except Exception as err:
            results.append(PrecheckResult(check.name or type(check).__name__, "failed", detail=f"{type(err).__name__}: {err}"))
    return results


def human(size: float) -> str:
    for unit, scale in (("TiB", 1 << 40), ("GiB", GiB), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.1f}{unit}"
    return f"{int(size)}B"
