"""The agent's cost on the trainer's steps: steps per second of two gloo ranks, alone and under agents.

Two ranks on 127.0.0.1 (CPU) meet through ``env://`` and run steps of a fixed length: a busy loop
of the step's compute, then one all-reduce of a single number, then ``heartbeat.beat(step=N)``, and a
line of output every 0.1 s, as a training loop logs. Rank 0 times every step from the first one: the
rate over the first ``WARMUP`` seconds (warm-up: the agent's warm interpreter imports torch beside
them) and over the ``STEADY`` seconds after (steady), then tells rank 1 to stop through the same
all-reduce. Start-up is the seconds from the launch to the first step.

Each pair runs alone (two plain processes), under two ``hacfg agent`` (one per emulated node, as
docs/multi-node.md starts them on one machine) without hang detection, with it (the evidence hook
armed, the straggler sampler running), and without warm restarts (no warm interpreter importing
torch for the next attempt); for 10 ms and 0.5 ms steps. Each rank keeps to a core of its own
(``sched_setaffinity``): left to the scheduler, two ranks share one core or not from one run to the
next, which halves or doubles the rate of short steps by itself. Runs are interleaved, alone then
each agent's, round after round, so a neighbour's load falls on all alike; a ratio is the agent's
median over the median alone, with the range of the rounds' own ratios. Beside the steady rate, the
CPU the agents used in it, and their warm interpreters apart (to the nanosecond, from
``/proc/PID/task/*/schedstat``).

Run: python bench/steady.py (needs torch). BENCH_ROUNDS (default 3), BENCH_WARMUP and BENCH_STEADY
seconds (default 3 and 5). Target: the steady rate under the agent within 2 % of the rate alone.
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
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import Verdict, descendants, free_port, kill_descendants, verdicts_table

ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
WARMUP = float(os.environ.get("BENCH_WARMUP", "3"))
STEADY = float(os.environ.get("BENCH_STEADY", "5"))
STEPS = {"10ms": 0.010, "0.5ms": 0.0005}
LAUNCHES = ("alone", "agent", "agent, hang detection", "agent, no warm")
AGENT_OPTIONS = {"agent": [], "agent, hang detection": ["--hang-timeout", "60s"], "agent, no warm": ["--no-warm"]}
TARGET = 0.98
SCRIPT = """\
import os, sys, time
os.sched_setaffinity(0, {int(os.environ["RANK"]) % os.cpu_count()})  # a core each, whatever the load: see the docstring
import torch
import torch.distributed as dist
from hacfg import heartbeat

step, warmup, steady = (float(arg) for arg in sys.argv[1:4])
rank = int(os.environ["RANK"])
print(f"rank {rank} started", flush=True)
dist.init_process_group("gloo")
stop = torch.zeros(1)
stamps = []
steady_from = 0
every = max(1, round(0.1 / step))
while True:
    until = time.perf_counter() + step
    while time.perf_counter() < until:
        pass
    if rank == 0 and stamps and time.time() - stamps[0] >= warmup and not steady_from:
        steady_from = len(stamps)
        print("rank 0 steady from here", flush=True)
    if rank == 0 and stamps and time.time() - stamps[0] >= warmup + steady:
        stop[0] = 1
    dist.all_reduce(stop)
    stamps.append(time.time())
    heartbeat.beat(step=len(stamps))
    if len(stamps) % every == 0:
        print(f"rank {rank} step {len(stamps)}", flush=True)
    if stop[0]:
        break
if rank == 0:
    first = stamps[0]
    warm = sum(1 for t in stamps if t < first + warmup)
    late = [t for t in stamps if t >= first + warmup]
    print(f"steady-result first {first:.6f} warm {warm / warmup:.3f} steady {(len(late) - 1) / (late[-1] - late[0]):.3f}", flush=True)
    sys.stdin.readline()  # the bench has read the agents' CPU time
dist.destroy_process_group()
"""
RESULT = re.compile(r"steady-result first ([\d.]+) warm ([\d.]+) steady ([\d.]+)$")


@dataclass
class Rates:
    start: float  # seconds from the launch to the first step
    early: float  # steps per second over the first WARMUP seconds
    steady: float  # ... over the STEADY seconds after
    agents: float  # percent of one core the agents used while steady
    warm: float  # ... their warm interpreters (importing for the next attempt)


def pair(tmp: Path, launch: str, step: float, number: int) -> Rates:
    """One run of two ranks, started ``launch``'s way; rank 0's rates, and the agents' CPU."""
    script = tmp / "steps.py"
    folder = tmp / f"run-{number}"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    rdzv = free_port()
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "WORLD_SIZE": "2"}
    train = [sys.executable, str(script), str(step), str(WARMUP), str(STEADY)]
    procs = []
    launched = time.time()
    for rank in range(2):
        argv = train
        if launch != "alone":
            argv = [sys.executable, "-m", "hacfg", "agent", "--nnodes", "2", "--node-rank", str(rank),
                    "--rdzv-endpoint", f"127.0.0.1:{rdzv}", "--state-dir", str(folder / f"node-{rank}"),
                    "--no-precheck", *AGENT_OPTIONS[launch], "--", *train]
        # alone, each rank in a session of its own too, as the agent (and torchrun) starts it: where the
        # kernel shares the CPU between sessions (autogroups), that alone moves the rate under load
        procs.append(subprocess.Popen(argv, env={**env, "RANK": str(rank), "NODE_RANK": str(rank)}, text=True,
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      start_new_session=launch == "alone"))
    agents = [proc.pid for proc in procs] if launch != "alone" else []
    said, before, since = [], (0.0, 0.0), 0.0
    assert procs[0].stdout is not None and procs[0].stdin is not None
    for line in procs[0].stdout:
        said.append(line)
        if line.startswith("rank 0 steady from"):
            before, since = _agents_cpu(agents), time.monotonic()
        elif found := RESULT.match(line):
            after, took = _agents_cpu(agents), time.monotonic() - since
            procs[0].stdin.write("\n")
            procs[0].stdin.flush()
            for proc in procs:
                proc.communicate(timeout=60)
            used = [100 * (late - early) / took for early, late in zip(before, after, strict=True)]
            return Rates(float(found[1]) - launched, float(found[2]), float(found[3]), *used)
    sys.exit(f"{launch}: no result; rank 0 said:\n{''.join(said)[-2000:]}")


def _agents_cpu(agents: list[int]) -> tuple[float, float]:
    """CPU seconds used so far by the agents, and by their warm interpreters (the ranks are neither)."""
    own, warm = 0.0, 0.0
    for pid in {*agents, *descendants(agents)}:
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if b"_hacfg_warm" in b" ".join(argv):
                warm += _runtime(pid)
            elif not (len(argv) > 1 and argv[1].endswith(b"steps.py")):
                own += _runtime(pid)
        except OSError:
            continue
    return own, warm


def _runtime(pid: int) -> float:
    """Seconds on a CPU of every thread of ``pid``, to the nanosecond (``cpu_seconds`` counts in ticks of
    10 ms: coarser than what an agent uses in a few seconds)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            total += int((task / "schedstat").read_text().split()[0])
    return total / 1e9


def measure(tmp: Path) -> dict[tuple[str, str], list[Rates]]:
    """Every launch's rates per step length, the launches interleaved round after round."""
    (tmp / "steps.py").write_text(SCRIPT)
    runs: dict[tuple[str, str], list[Rates]] = {(name, launch): [] for name in STEPS for launch in LAUNCHES}
    number = 0
    for _ in range(ROUNDS):
        for name, step in STEPS.items():
            for launch in LAUNCHES:
                number += 1
                try:
                    runs[(name, launch)].append(pair(tmp, launch, step, number))
                finally:
                    kill_descendants()
    return runs


def ratio(agent: list[Rates], alone: list[Rates], field: str) -> tuple[float, float, float]:
    """The agent's median rate over the median alone, and the range of the rounds' own ratios."""
    ours, theirs = ([getattr(rates, field) for rates in runs] for runs in (agent, alone))
    each = [a / b for a, b in zip(ours, theirs, strict=True)]
    return statistics.median(ours) / statistics.median(theirs), min(each), max(each)


def verdicts() -> Iterator[Verdict]:
    """Per step length and agent: the warm-up rate (with the start-up's extra seconds), then the steady one."""
    try:
        import torch  # noqa: F401
    except ImportError:
        yield Verdict("steady steps under agent", "-", "torch is not installed", None, ">= 0.98x alone", None)
        return
    with tempfile.TemporaryDirectory(prefix="hacfg-steady-") as tmp_name:
        runs = measure(Path(tmp_name))
    for name in STEPS:
        alone = runs[(name, "alone")]
        for launch in LAUNCHES[1:]:
            agent = runs[(name, launch)]
            label = f"{name} steps, {launch.replace('agent, ', '')}"
            start = statistics.median(r.start for r in agent) - statistics.median(r.start for r in alone)
            early, low, high = ratio(agent, alone, "early")
            yield Verdict(f"{label}: warm-up", f"{statistics.median(r.early for r in agent):.0f}/s, start {start:+.1f}s",
                          f"alone {statistics.median(r.early for r in alone):.0f}/s ({low:.2f}-{high:.2f})",
                          early, "reported", True)
            steady, low, high = ratio(agent, alone, "steady")
            cpu = f"agents {statistics.median(r.agents for r in agent):.1f}%, warm {statistics.median(r.warm for r in agent):.0f}%"
            yield Verdict(f"{label}: steady", f"{statistics.median(r.steady for r in agent):.0f}/s, {cpu}",
                          f"alone {statistics.median(r.steady for r in alone):.0f}/s ({low:.2f}-{high:.2f})",
                          steady, ">= 0.98x alone", steady >= TARGET)


def main() -> None:
    print(verdicts_table(list(verdicts())))


if __name__ == "__main__":
    main()
