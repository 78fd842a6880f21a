"""Timing helpers shared by the benchmark scripts: medians of real process runs, side by side."""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass


@dataclass
class Timing:
    label: str
    runs: list[float]

    @property
    def median(self) -> float:
        return statistics.median(self.runs)


def compile_bytecode() -> None:
    """Write hacfg's .pyc files, as pip does when it installs a package. An editable install run
    with PYTHONDONTWRITEBYTECODE set would otherwise compile every module on every cold start
    (about 20 ms), while the peers run from bytecode pip wrote."""
    import compileall
    import importlib.util

    for package in ("hacfg", "hacfg.plugins"):
        spec = importlib.util.find_spec(package)
        for folder in spec.submodule_search_locations if spec else ():
            compileall.compile_dir(folder, quiet=1)


def time_command(label: str, argv: list[str], *, repeat: int = 15, warmup: int = 2, ok_codes=(0, 1)) -> Timing:
    """Wall time of a whole process, as a user waits for it."""
    runs = []
    for i in range(warmup + repeat):
        start = time.perf_counter()
        proc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        elapsed = time.perf_counter() - start
        if proc.returncode not in ok_codes:
            sys.exit(f"{label}: exit {proc.returncode}: {proc.stderr.decode()[:500]}")
        if i >= warmup:
            runs.append(elapsed)
    return Timing(label, runs)


def time_interleaved(commands: dict[str, tuple[list[str], dict[str, str]]], *, repeat: int = 31, warmup: int = 2) -> list[Timing]:
    """Wall time of each command (label -> argv, environment), run in turn, round after round: a
    difference of a few percent stays visible on a machine whose load changes while it is timed."""
    runs: dict[str, list[float]] = {label: [] for label in commands}
    for i in range(warmup + repeat):
        for label, (argv, env) in commands.items():
            start = time.perf_counter()
            proc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
            elapsed = time.perf_counter() - start
            if proc.returncode not in (0, 1):
                sys.exit(f"{label}: exit {proc.returncode}: {proc.stderr.decode()[:500]}")
            if i >= warmup:
                runs[label].append(elapsed)
    return [Timing(label, times) for label, times in runs.items()]


def require(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        sys.exit(f"{tool} is not installed: pip install -e '.[bench]'")
    return path


@dataclass
class Verdict:
    """One benchmark's outcome: what was measured, against what, and whether it met its target."""

    name: str
    measured: str
    peer: str
    ratio: float | None
    target: str
    ok: bool | None  # None: could not be measured here (say why in ``peer``)

    def row(self) -> str:
        ratio = "-" if self.ratio is None else f"{self.ratio:.2f}x" if self.ratio >= 0.1 else f"{self.ratio:.4f}x"
        status = {True: "ok", False: "MISSED", None: "n/a"}[self.ok]
        return f"{self.name:<28} {self.measured:>20} {self.peer:>34} {ratio:>8}  {self.target:<18} {status}"


def verdicts_table(verdicts: list[Verdict]) -> str:
    header = f"{'benchmark':<28} {'hacfg':>20} {'peer':>34} {'ratio':>8}  {'target':<18} status"
    return "\n".join([header, *(v.row() for v in verdicts)])


def ms(timing: Timing) -> str:
    """Median, with min and max, in milliseconds."""
    return f"{timing.median * 1000:.0f}ms ({min(timing.runs) * 1000:.0f}-{max(timing.runs) * 1000:.0f})"


def table(rows: list[Timing], baseline: Timing) -> str:
    lines = [f"{'command':<34} {'median':>9} {'min':>9} {'max':>9} {'ratio':>7}"]
    for row in rows:
        lines.append(
            f"{row.label:<34} {row.median * 1000:>7.1f}ms {min(row.runs) * 1000:>7.1f}ms "
            f"{max(row.runs) * 1000:>7.1f}ms {row.median / baseline.median:>6.2f}x"
        )
    return "\n".join(lines)
