"""What the agent's plugins implement and receive: pre-checks, failure classifiers, checkpoint layouts.

Plain data and base classes only; the agent's machinery that runs them lives beside this
module (``prechecks``, ``classify``, ``checkpoints``). Plugin authors import these through
:mod:`hacfg.plugin`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from hacfg.agent.policy import Policy
    from hacfg.agent.vocabulary import Cause

GiB = 1 << 30
Status = Literal["passed", "failed", "skipped"]


def _size(text: str) -> int:
    """``32GB``/``32G``/``32GiB`` -> bytes (binary units), or a plain number of bytes."""
    text = text.strip().upper().removesuffix("IB").removesuffix("B")
    scale = {"K": 1 << 10, "M": 1 << 20, "G": GiB, "T": 1 << 40}.get(text[-1:], 1)
    return int(float(text.rstrip("KMGT")) * scale)


def human_size(size: float) -> str:
    """Bytes as people read them: ``1.5GiB``."""
    for unit, scale in (("TiB", 1 << 40), ("GiB", GiB), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.1f}{unit}"
    return f"{int(size)}B"


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
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> PrecheckSettings:
        environ = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for item in fields(cls):
            raw = environ.get(f"HACFG_PRECHECK_{item.name.upper()}")
            if raw is None:
                continue
            converters: dict[str, Callable[[str], object]] = {"Path": Path, "int": _size, "float": float, "str": str}
            values[item.name] = converters[str(item.type)](raw)
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
        extra = (("value", self.value), ("need", self.need), ("detail", self.detail))
        parts += [f"{key}={value}" for key, value in extra if value]
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


@dataclass(frozen=True)
class Failure:
    """What a classifier sees about a failed attempt."""

    exit_code: int | None  # None when killed by a signal
    signal: int | None
    tail: tuple[str, ...]  # the last lines of stdout, then of stderr
    hung: bool = False

    @property
    def code(self) -> int:
        """The shell's view: the exit code, or 128 + the signal."""
        return self.exit_code if self.exit_code is not None else 128 + (self.signal or 0)

    def describe(self) -> str:
        if self.signal is not None:
            from signal import Signals  # here: a lint with a pre-check plugin never describes a failure

            return f"killed by {Signals(self.signal).name}"
        return f"exit {self.exit_code}"


@dataclass(frozen=True)
class Classification:
    cause: Cause
    reason: str
    classifier: str = ""
    peer: bool = False  # the failure follows from another rank's (connection closed by a peer, say)


@dataclass(frozen=True)
class Restart:
    """What a recovery hook learns before the job restarts (``hacfg_before_restart``)."""

    action: str  # proc_restart (here, by the agent) | pod_reschedule | job_reschedule (by the platform)
    attempt: int  # the attempt that just ended
    cause: str  # environment | user | hang
    reason: str
    node: int  # this node's rank (0 alone)
    checkpoint: str | None  # the newest complete checkpoint: the next attempt resumes from it


@dataclass(frozen=True, order=True)
class SavedCheckpoint:
    """One checkpoint a layout found on disk (not the scenario's ``checkpoint:`` settings)."""

    step: int
    path: Path
    complete: bool = True
    layout: str = ""


class CheckpointLayout:
    """A way training code lays out checkpoints. Subclasses set ``name`` and implement ``find``."""

    name: str = ""

    def find(self, root: Path) -> Iterable[SavedCheckpoint]:
        """Every checkpoint under ``root``, complete or not (``complete=False`` is never resumed)."""
        raise NotImplementedError


_DIGITS = re.compile(r"(\d+)")


def step_of(name: str) -> int | None:
    """The last number in a directory name: ``checkpoint-1200`` -> 1200, ``iter_0000300`` -> 300."""
    numbers = _DIGITS.findall(name)
    return int(numbers[-1]) if numbers else None
