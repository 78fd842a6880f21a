"""Stragglers: is a rank that computes twice as long named, how soon, and never a healthy one?

Each trial starts two real gloo ranks of ``tests/children/gloo_ranks.py`` on 127.0.0.1 (CPU, torch's
own flight recorder), each armed with the agent's evidence hook in a folder of its own as if on its
own node, and runs the agent's own sampler over them: :class:`hacfg.agent.culprit.straggler.Watch`
taking :func:`hacfg.agent.culprit.inquiry.arrivals` once a second (only the group store's signing
is left out). Perturbed trials make rank 1 compute twice as long from step 11; unperturbed ones
perturb no one and run as many steps as a perturbed trial may take to be named.

Figures: the detection rate (named within ``LIMIT`` steps of the fault), steps from the fault to
the verdict, false flags over the unperturbed trials, and the overhead of sampling: the steps per
second of an unperturbed pair with the sampler running against without, measured alternately.

Run: python bench/straggler.py (needs torch; BENCH_RUNS trials of each kind, default 20;
BENCH_COMPUTE seconds of work per step, default 0.1). Target: at least 95 % named within 20 steps,
0 false flags, under 1 % overhead.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from importlib.metadata import version
from pathlib import Path

from common import free_port

from hacfg.agent.culprit import inquiry, straggler

REPO = Path(__file__).resolve().parent.parent
CHILD = REPO / "tests" / "children" / "gloo_ranks.py"
RUNS = int(os.environ.get("BENCH_RUNS", "20"))
COMPUTE = float(os.environ.get("BENCH_COMPUTE", "0.1"))
FAULT_STEP = 11  # gloo_ranks.py's faulty rank misbehaves after this step
LIMIT = 20  # steps from the fault within which the straggler is to be named
OVERHEAD_SECONDS = 10.0  # per half of an overhead measurement


class Pair:
    """Two ranks, each in a session and an evidence folder of its own; their newest step, from stdout."""

    def __init__(self, root: Path, faulty: int):
        port = str(free_port())
        self.procs: list[tuple[subprocess.Popen[bytes], Path]] = []
        self.step = [0, 0]
        for number in range(2):
            folder = inquiry.folder_for(root / f"node-{number}", 1)
            argv = [sys.executable, str(CHILD), str(number), "2", port, "slow", str(faulty), str(COMPUTE)]
            proc = subprocess.Popen(
                argv, env=inquiry.armed({**os.environ}, folder), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
            self.procs.append((proc, folder))
            threading.Thread(target=self._read, args=(number, proc), daemon=True).start()

    def _read(self, number: int, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            words = line.split()
            if len(words) == 4 and words[2] == b"step":
                self.step[number] = int(words[3])

    def sample(self) -> dict[int, list[list[int]]]:
        return {rank: entries for proc, folder in self.procs for rank, entries in inquiry.arrivals(folder).items()}

    def wait_for_step(self, step: int, timeout: float = 300) -> None:
        until = time.monotonic() + timeout
        while min(self.step) < step:
            if time.monotonic() > until:
                raise TimeoutError(f"the ranks did not reach step {step}")
            time.sleep(0.05)

    def close(self) -> None:
        for proc, _ in self.procs:
            proc.kill()
            proc.wait()


def trial(faulty: int) -> tuple[int | None, list[int]]:
    """Steps from the fault to the verdict (None: not named in time), and the ranks named wrongly."""
    with tempfile.TemporaryDirectory(prefix="hacfg-straggler-") as root:
        pair = Pair(Path(root), faulty)
        named: list[tuple[int, int]] = []  # (rank, the slow rank's step when named)
        try:
            pair.wait_for_step(1)
            watch = straggler.Watch(
                0, pair.sample, lambda node, arrivals: [(node, arrivals)],
                lambda pace: named.append((pace.rank, pair.step[1])),
            )
            with watch, contextlib.suppress(TimeoutError):
                pair.wait_for_step(FAULT_STEP + LIMIT + 5, timeout=120)
        finally:
            pair.close()
    right = [step - FAULT_STEP for rank, step in named if rank == faulty]
    return (right[0] if right and right[0] <= LIMIT else None), [rank for rank, _ in named if rank != faulty]


def overhead() -> float:
    """Steps per second without the sampler over with it, less one: alternating halves, three each."""
    with tempfile.TemporaryDirectory(prefix="hacfg-straggler-") as root:
        pair = Pair(Path(root), faulty=9)
        rates: dict[bool, list[float]] = {False: [], True: []}
        try:
            pair.wait_for_step(3)
            for sampling in (False, True) * 3:
                watch = straggler.Watch(0, pair.sample, lambda node, arrivals: [(node, arrivals)], lambda pace: None)
                before, started = pair.step[0], time.monotonic()
                with watch if sampling else contextlib.nullcontext():
                    time.sleep(OVERHEAD_SECONDS)
                    rates[sampling].append((pair.step[0] - before) / (time.monotonic() - started))
        finally:
            pair.close()
    return statistics.mean(rates[False]) / statistics.mean(rates[True]) - 1


def main() -> int:
    print(f"torch {version('torch')}; {RUNS} trials each, {COMPUTE:g} s of compute per step, "
          f"rank 1 twice as long from step {FAULT_STEP}")
    detected: list[int | None] = []
    false_flags = 0
    for number in range(RUNS):
        steps, wrong = trial(faulty=1)
        detected.append(steps)
        _, healthy = trial(faulty=9)
        false_flags += len(wrong) + len(healthy)
        print(f"  trial {number + 1}: named after {steps} steps; false flags so far {false_flags}", flush=True)
    named = [steps for steps in detected if steps is not None]
    print(f"detection: {len(named)}/{RUNS} ({len(named) / RUNS:.0%}) within {LIMIT} steps of the fault")
    if named:
        print(f"steps to detect: median {statistics.median(named):g}, max {max(named)}")
    print(f"false flags: {false_flags} over {RUNS} unperturbed runs (and the healthy rank of {RUNS} perturbed)")
    print(f"overhead of sampling: {overhead():+.2%} steps per second")
    return 0


if __name__ == "__main__":
    sys.exit(main())
