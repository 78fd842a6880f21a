"""Timing helpers shared by the benchmark scripts: medians of real process runs, side by side."""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

_PR_SET_CHILD_SUBREAPER = 36


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


HEADER = f"{'benchmark':<28} {'hacfg':>20} {'peer':>34} {'ratio':>8}  {'target':<18} status"


def verdicts_table(verdicts: list[Verdict]) -> str:
    return "\n".join([HEADER, *(v.row() for v in verdicts)])


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


def become_subreaper() -> None:
    """Orphans of the benchmarked commands reparent to this process, not to init, so the cleanup
    still finds a worker whose launcher has already gone."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _processes() -> dict[int, tuple[bytes, int]]:
    """Every process's state letter and parent, from /proc."""
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_bytes()
            except OSError:
                continue
            state, parent = stat[stat.rfind(b")") + 2 :].split()[:2]
            found[int(entry)] = (state, int(parent))
    return found


def descendants(roots: Collection[int]) -> set[int]:
    """Every process below ``roots``, by the parent links in /proc: sessions and process groups do
    not matter (torchrun starts each worker in a session of its own)."""
    children: dict[int, list[int]] = {}
    for pid, (_, parent) in _processes().items():
        children.setdefault(parent, []).append(pid)
    found: set[int] = set()
    todo = list(roots)
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def kill_tree(roots: Collection[int]) -> None:
    """SIGKILL ``roots`` and every process below them, then reap those that are this process's.

    The tree is frozen first (SIGSTOP, until no new process appears), so nothing forks between the
    look and the kill; with :func:`become_subreaper`, what a dead parent leaves behind is ours to reap.
    """
    frozen: set[int] = set()
    while new := (set(roots) | descendants(roots) | descendants(frozen)) - frozen - {os.getpid()}:
        for pid in new:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
        frozen |= new
    for pid in frozen:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    pending, deadline = set(frozen), time.monotonic() + 10
    while pending and time.monotonic() < deadline:
        table = _processes()
        for pid in list(pending):
            try:
                done = os.waitpid(pid, os.WNOHANG)[0] == pid
            except ChildProcessError:  # not ours: gone, or a zombie whose parent outside the tree reaps it
                done = pid not in table or (table[pid][0] == b"Z" and table[pid][1] not in pending)
            if done:
                pending.discard(pid)
        if pending:
            time.sleep(0.01)


def kill_descendants() -> None:
    """Leave nothing behind: every process this one started, and theirs, however they detached."""
    kill_tree(descendants([os.getpid()]))


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds process ``pid`` has used so far (its threads included)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now, for an emulated node's store."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Scratch:
    """A bench's temporary folder and its folder in /dev/shm: ``remove()`` deletes both and says how
    much of / was used before and after (a bench must leave nothing behind)."""

    tmp: Path
    shm: Path
    disk_before: int

    @classmethod
    def make(cls, name: str) -> Scratch:
        before = shutil.disk_usage("/").used
        tmp = Path(tempfile.mkdtemp(prefix=f"hacfg-bench-{name}-"))
        return cls(tmp, Path(tempfile.mkdtemp(dir="/dev/shm", prefix=f"hacfg-bench-{name}-")), before)

    def remove(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)
        shutil.rmtree(self.shm, ignore_errors=True)
        print(f"\ndisk /: {self.disk_before / 1e9:.1f} GB used before, {shutil.disk_usage('/').used / 1e9:.1f} GB after")
