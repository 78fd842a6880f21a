"""Multi-node recovery, hacfg against torchrun, on the same real job and the same faults.

Two emulated nodes on 127.0.0.1 run ``examples/resumable-training/train_ddp.py`` (torch DDP over
gloo, CPU): under ``hacfg agent`` (grouped through torch's TCPStore), cold (``--no-warm``) and
with warm restarts, and under ``torchrun --max-restarts`` with c10d rendezvous, where each rank
finds the newest checkpoint itself.

Recovery time: from the moment a worker fails (it prints the time before it fires the fault) to
the first training step of the next round on every rank. Divergent: a run in which two ranks
resumed from different steps, or whose final weights differ from a fault-free run.

Alone: the trainer's own stages of a cold start (start, rendezvous, load, first step) taken by
two plain ranks resuming from the same checkpoint with nothing else running and no agent: what
those stages of a cold recovery would take by themselves.

Run: python bench/multinode.py (needs torch). Targets: hacfg's cold recovery at most 0.5x torchrun's,
its warm recovery at most 0.15x torchrun's, with zero divergent runs.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import Verdict, become_subreaper, cpu_seconds, free_port, kill_descendants, verdicts_table

from hacfg.agent.records.recovery import STAGES, Marks, recoveries
from hacfg.agent.records.timeline import read_logs

REPO = Path(__file__).resolve().parent.parent
TRAIN = REPO / "examples" / "resumable-training" / "train_ddp.py"
# hacfg-warm: attempt 1 waits until its warm interpreter is ready (a real job fails after minutes, not
# within the second it takes to import torch), so that the recovery is a warm restart
READY_THEN = REPO / "tests" / "children" / "warm" / "ready_then.py"
PRELOAD = "torch,torch.distributed,torch.nn.parallel,torch._dynamo,hacfg.checkpoint"  # what train_ddp.py imports; torch.optim imports torch._dynamo on first use
LAUNCHERS = ("hacfg", "hacfg-warm", "torchrun")
FAULTS = {"worker killed": "kill:1:6", "collective error": "collective:0:6", "kill during a save": "kill-in-save:1:8"}
RUNS = int(os.environ.get("BENCH_RUNS", "3"))
NODES = 2
TRAINING = ["--steps", "12", "--every", "4", "--step-time", "0.02"]


@dataclass
class Run:
    recovery: float | None  # seconds; None when the job did not recover
    divergent: bool
    stages: dict[str, float] | None = None  # hacfg: the slowest node's seconds per stage of the recovery


def marks(outputs: list[str]) -> dict[tuple[int, int], Marks]:
    """The trainer's timestamped lines, by (node, attempt): one worker per node, so node = rank."""
    found: dict[tuple[int, int], dict[str, float]] = {}
    for node, text in enumerate(outputs):
        attempt = 0
        for line in text.splitlines():
            if match := re.match(r"rank \d+ attempt (\d+) (started|grouped|resumed) .*at ([\d.]+)$", line):
                attempt = int(match[1])
                found.setdefault((node, attempt), {}).setdefault(match[2], float(match[3]))
            elif match := re.match(r"rank \d+ (?:fault \S+|step \d+) at ([\d.]+)$", line):
                kind = "fault" if " fault " in line else "stepped"
                found.setdefault((node, attempt), {}).setdefault(kind, float(match[1]))
    return {key: Marks(**times) for key, times in found.items()}


def stages(ckpt: Path, outputs: list[str]) -> dict[str, float] | None:
    """The first recovery, from hacfg's events and the trainer's lines: its slowest node's stages."""
    found = recoveries(read_logs(sorted(ckpt.glob(".hacfg/node-*/events.jsonl"))), marks(outputs))
    if not found:
        return None
    slowest = max(found[0].stages, key=found[0].total)
    return {**found[0].stages[slowest], "total": found[0].total(slowest)}


def launch(launcher: str, workdir: Path, fault: str | None) -> list[str]:
    """Run one 2-node job to the end; each node's output."""
    ckpt, out = workdir / "ckpt", workdir / "out"
    workdir.mkdir(parents=True)
    train = [str(TRAIN), "--ckpt", str(ckpt), "--out", str(out), *TRAINING, *([f"--fault={fault}"] if fault else [])]
    rdzv, master = free_port(), free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(master), "WORLD_SIZE": str(NODES)}
    env.pop("RANK", None)
    procs, logs = [], []
    for rank in range(NODES):
        if launcher.startswith("hacfg"):
            warm = ("--preload", PRELOAD, "--", sys.executable, str(READY_THEN)) if launcher == "hacfg-warm" else ("--no-warm", "--", sys.executable)
            argv = [sys.executable, "-m", "hacfg", "agent", "--nnodes", str(NODES), "--node-rank", str(rank), "--rdzv-endpoint", f"127.0.0.1:{rdzv}",
                    "--checkpoint-path", str(ckpt), "--no-precheck", "--max-restarts", "3", "--grace", "5", *warm, *train]
        else:
            argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(NODES), "--nproc-per-node", "1", "--rdzv-backend", "c10d",
                    "--rdzv-endpoint", f"127.0.0.1:{rdzv}", "--rdzv-id", "bench", "--rdzv-conf", "join_timeout=60", "--max-restarts", "3", "--monitor-interval", "0.1", *train]
        log = workdir / f"node{rank}.log"
        logs.append(log)
        procs.append(subprocess.Popen(argv, stdout=log.open("wb"), stderr=subprocess.STDOUT, env={**env, "NODE_RANK": str(rank)}, start_new_session=True))
    deadline = time.monotonic() + 90  # a run takes 5-20 s; torchrun leaves some restarts hanging in init_process_group
    for proc in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):  # the job never finished: no recovery to time
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    kill_descendants()  # a stuck launcher, and workers that outlived theirs
    return [log.read_text(errors="replace") for log in logs]


def alone(root: Path, checkpoint: Path) -> dict[str, float]:
    """Two plain ranks (no agent) resuming from ``checkpoint``: their slowest rank's seconds per stage
    of a cold start, from the launch to the first step."""
    ckpt = root / "ckpt"
    ckpt.mkdir(parents=True)
    shutil.copytree(checkpoint, ckpt / checkpoint.name)
    train = [sys.executable, str(TRAIN), "--ckpt", str(ckpt), "--out", str(root / "out"), *TRAINING]
    env = {**os.environ, "PYTHONPATH": str(REPO), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "WORLD_SIZE": str(NODES)}
    launched = time.time()
    ranks = [subprocess.Popen(train, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env={**env, "NODE_RANK": str(rank)}) for rank in range(NODES)]
    outputs = [rank.communicate(timeout=120)[0].decode(errors="replace") for rank in ranks]
    slowest: dict[str, float] = {}
    for times in marks(outputs).values():
        line = [launched, times.started, times.grouped, times.resumed, times.stepped]
        for stage, (begin, end) in zip(("start", "rendezvous", "load", "first step"), pairwise(line), strict=True):
            if begin is not None and end is not None:
                slowest[stage] = max(slowest.get(stage, 0.0), end - begin)
    return slowest


def measure(outputs: list[str], final: Path, reference: dict) -> Run:
    import torch

    fault_at = [float(m) for text in outputs for m in re.findall(r"fault \S+ at ([\d.]+)", text)]
    resumed: dict[int, list[int]] = {}
    first_steps = []
    for text in outputs:
        lines = text.splitlines()
        starts = [i for i, line in enumerate(lines) if re.match(r"rank \d+ attempt \d+ resumed \d+ ", line)]
        for index in starts:
            rank, step = re.match(r"rank (\d+) attempt \d+ resumed (\d+) ", lines[index]).groups()  # type: ignore[union-attr]
            resumed.setdefault(int(rank), []).append(int(step))
        if len(starts) > 1:  # the first step of the second round (torchrun numbers attempts per node, so count starts)
            first = next((line for line in lines[starts[1]:] if re.match(r"rank \d+ step \d+ at", line)), None)
            if first:
                first_steps.append(float(first.rsplit(" ", 1)[1]))
    done = all((final / f"rank{rank}.pt").exists() for rank in range(NODES))
    diverged = len({tuple(r) for r in resumed.values()}) > 1
    if done:
        weights = [torch.load(final / f"rank{rank}.pt", weights_only=True) for rank in range(NODES)]
        diverged = diverged or any(not torch.equal(w[name], reference[name]) for w in weights for name in reference)
    recovered = done and fault_at and len(first_steps) == NODES
    return Run(max(first_steps) - min(fault_at) if recovered else None, diverged)


def idle(seconds: float = 20.0) -> list[float]:
    """Percent of one core each node's agent uses while its worker sleeps, hang detection on: the
    group's monitor and keep-alives, and the straggler sampling that asks the armed worker every
    second. Node 0 also serves the group's store."""
    with tempfile.TemporaryDirectory() as tmp:
        rdzv = free_port()
        worker = [sys.executable, "-c", f"import time; print('up', flush=True); time.sleep({seconds + 30})"]
        env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "WORLD_SIZE": str(NODES)}
        agents = [subprocess.Popen([sys.executable, "-m", "hacfg", "agent", "--nnodes", str(NODES), "--node-rank", str(rank),
                                    "--rdzv-endpoint", f"127.0.0.1:{rdzv}", "--checkpoint-path", f"{tmp}/ckpt", "--no-precheck",
                                    "--no-warm", "--hang-timeout", "30m", "--", *worker],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**env, "NODE_RANK": str(rank)})
                  for rank in range(NODES)]
        try:
            time.sleep(10)  # grouped, the workers started and seen
            before, started = [cpu_seconds(agent.pid) for agent in agents], time.monotonic()
            time.sleep(seconds)
            used = [cpu_seconds(agent.pid) - cpu for agent, cpu in zip(agents, before, strict=True)]
            return [100 * cpu / (time.monotonic() - started) for cpu in used]
        finally:
            kill_descendants()


def compare() -> list[Verdict]:
    """The verdicts; each fault's line goes to stderr as soon as its runs are done."""
    import torch

    verdicts: list[Verdict] = []
    print(f"{'fault':<22} {'hacfg (s)':>24} {'hacfg warm (s)':>24} {'torchrun c10d (s)':>24}  divergent runs", file=sys.stderr, flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        launch("hacfg", root / "reference", None)
        reference = torch.load(root / "reference" / "out" / "rank0.pt", weights_only=True)
        saved = min((root / "reference" / "ckpt").glob("step_*"), key=lambda path: int(path.name[5:]))  # what the faults resume from
        by_itself = [alone(root / f"alone-{i}", saved) for i in range(RUNS)]
        totals: dict[str, list[Run]] = {launcher: [] for launcher in LAUNCHERS}
        for name, fault in FAULTS.items():
            runs: dict[str, list[Run]] = {launcher: [] for launcher in LAUNCHERS}
            for i in range(RUNS):
                for launcher in LAUNCHERS:  # interleaved, so all see the same machine
                    workdir = root / f"{launcher}-{len(totals[launcher])}-{i}"
                    outputs = launch(launcher, workdir, fault)
                    run = measure(outputs, workdir / "out", reference)
                    if launcher.startswith("hacfg"):
                        run.stages = stages(workdir / "ckpt", outputs)
                    runs[launcher].append(run)
            for launcher, found in runs.items():
                totals[launcher] += found
            cells = [_cell(runs[launcher]) for launcher in LAUNCHERS]
            divergent_runs = " vs ".join(str(sum(r.divergent for r in runs[launcher])) for launcher in LAUNCHERS)
            print(f"{name:<22} {cells[0]:>24} {cells[1]:>24} {cells[2]:>24}  {divergent_runs}", file=sys.stderr, flush=True)
    ours, theirs = _median(totals["hacfg"]), _median(totals["torchrun"])
    divergent = sum(r.divergent for r in totals["hacfg"])
    ratio = ours / theirs if ours is not None and theirs else None
    verdicts.append(Verdict("multi-node recovery", f"{ours:.2f}s" if ours else "failed", f"torchrun c10d {theirs:.2f}s" if theirs else "torchrun failed",
                            ratio, "<= 0.5x torchrun", ratio is not None and ratio <= 0.5))
    warm = _median(totals["hacfg-warm"])
    warm_ratio = warm / theirs if warm is not None and theirs else None
    verdicts.append(Verdict("multi-node recovery, warm", f"{warm:.2f}s" if warm else "failed", f"torchrun c10d {theirs:.2f}s" if theirs else "torchrun failed",
                            warm_ratio, "<= 0.15x torchrun", warm_ratio is not None and warm_ratio <= 0.15))
    divergent += sum(r.divergent for r in totals["hacfg-warm"])
    verdicts.append(Verdict("multi-node divergent runs", f"{divergent} of {len(totals['hacfg']) + len(totals['hacfg-warm'])}",
                            f"torchrun {sum(r.divergent for r in totals['torchrun'])} of {len(totals['torchrun'])}", None, "0", divergent == 0))
    for launcher in ("hacfg", "hacfg-warm"):
        _stage_table(launcher, [r.stages for r in totals[launcher] if r.stages])
    _stage_table("alone (plain ranks, a cold start)", by_itself)
    stops = [r.stages["stop"] for r in totals["hacfg"] if r.stages and "stop" in r.stages]
    if stops:
        worst = max(stops)
        verdicts.append(Verdict("multi-node stop, all ranks", f"{statistics.median(stops) * 1000:.0f}ms (max {worst * 1000:.0f})",
                                "first agent knowing to the last worker stopped", None, "< 2 s", worst < 2.0))
    node0, *others = idle()
    verdicts.append(Verdict("multi-node idle CPU, node 0", f"{node0:.2f}% of a core", f"node 1 {others[0]:.2f}%", None, "< 1%", node0 < 1))
    return verdicts


def _stage_table(launcher: str, found: list[dict[str, float]]) -> None:
    """Where a recovery's time went: each stage's median over the runs, on the slowest node."""
    if not found:
        return
    columns = [stage for stage in (*STAGES, "total") if any(stage in stages for stages in found)]
    medians = [statistics.median(stages[c] for stages in found if c in stages) for c in columns]
    print(f"{launcher} recovery by stage, median of {len(found)} (s): "
          + "  ".join(f"{c} {m:.3f}" for c, m in zip(columns, medians, strict=True)), file=sys.stderr, flush=True)


def _median(runs: list[Run]) -> float | None:
    times = [r.recovery for r in runs if r.recovery is not None]
    return statistics.median(times) if times else None


def _cell(runs: list[Run]) -> str:
    times = [r.recovery for r in runs if r.recovery is not None]
    failed = len(runs) - len(times)
    text = f"{statistics.median(times):.2f} ({min(times):.2f}-{max(times):.2f})" if times else "-"
    return text + (f" {failed} failed" if failed else "")


def verdicts() -> list[Verdict]:
    try:
        import torch  # noqa: F401
    except ImportError:
        return [Verdict("multi-node recovery", "-", "torch is not installed", None, "<= 0.5x torchrun", None)]
    return compare()


if __name__ == "__main__":
    become_subreaper()
    print(verdicts_table(verdicts()))
