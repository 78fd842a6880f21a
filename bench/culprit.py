"""Who hung? The culprit a hang's verdict names, against the rank that was made to hang.

Emulated nodes on 127.0.0.1, one ``hacfg agent`` each as docs/multi-node.md starts them, each
supervising one rank of ``tests/children/gloo_ranks.py`` (a gloo group on CPU that all-reduces
every step: the same hook, flight recorder, evidence and group protocol as a DDP job, without
a model to load), with a 3 s hang timeout. In each run one node's rank misbehaves at step 11, on
node 0, node 1, ... in turn:

  stuck   stuck before its next collective
  skip    leaves out one collective (a desync)
  stop    SIGSTOPped
  spin    a pure-Python busy loop holding the GIL
  fifo    blocked opening a FIFO no one writes
  lock    deadlocked with a thread of its own over two locks
  loader  waiting for a batch its DataLoader worker never delivers
  save    blocked writing its part of a DCP save every rank makes
  size    all-reduces a tensor of no elements: it returns at once and waits in the next collective
  two     two ranks of four stuck, both on the faulty node (two ranks per node, on 2 nodes only)

A run counts as right when node 0's first hang decision names the faulty node as the culprit;
a ``null`` culprit (the evidence could not tell) is counted apart from a wrong one. The
decision's ``cause_node`` is checked against the culprit: the same node, or null with it. For each
kind and node count it also reports how long after the first node declared the hang the last
node's summary (every rank's evidence) was written, which always precedes its stop signal, the
running ranks whose stacks or collectives missed it, and the bytes each rank left. Then the steady-state cost of the armed hook: the step time of a
two-rank gloo loop, armed against unarmed, interleaved.

Run: python bench/culprit.py [KIND ...] (needs torch), or ``overhead`` for the step times alone. BENCH_RUNS per kind and node count
(default 13: 247 runs in all), BENCH_NODES (default "2,4"), BENCH_LANES jobs at once (default 2).
Targets: the right node in at least 95 % of runs and no wrong one; ``cause_node`` always the
culprit's; every rank's evidence within 2 s and before the stop; at most 1 MB per rank; step time
unchanged within noise.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from importlib.metadata import version
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from common import free_port  # noqa: E402

from hacfg.agent.culprit import inquiry  # noqa: E402

CHILD = REPO / "tests" / "children" / "gloo_ranks.py"
KINDS = ("stuck", "skip", "stop", "spin", "fifo", "lock", "loader", "save", "size", "two")
PER_NODE = {"two": 2}  # ranks per node, where not one
CHILD_KIND = {"two": "stuck"}  # what the faulty node's ranks do, where the kind's name is not the child's
RUNS = int(os.environ.get("BENCH_RUNS", "13"))
NODES = tuple(int(n) for n in os.environ.get("BENCH_NODES", "2,4").split(","))
LANES = int(os.environ.get("BENCH_LANES", "2"))  # jobs at once: most of a run is waiting
LOCK = threading.Lock()
STEPS = 3000  # of the overhead loop, per rank and run


@dataclass
class Tally:
    outcomes: Counter[str] = field(default_factory=Counter)
    latency: list[float] = field(default_factory=list)  # first hang event -> the last node's summary
    missing: int = 0  # running ranks whose stacks or recorder state did not make it into the summary
    apart: int = 0  # decisions whose cause_node is not the culprit's node (or not null with it)
    first: Counter[str] = field(default_factory=Counter)  # whose detector fired first: the hung node or another
    size: list[int] = field(default_factory=list)  # bytes each rank left


def run(kind: str, nodes: int, faulty: int, root: Path) -> tuple[dict | None, Path]:
    """One job with one fault; node 0's first decision if it is a hang's, and the job's state folder."""
    rdzv, master = free_port(), free_port()
    ckpt = root / "ckpt"
    agents = []
    for rank in range(nodes):
        env = {**os.environ, "PYTHONPATH": str(REPO), "NODE_RANK": str(rank), "WORLD_SIZE": str(nodes)}
        env.pop("RANK", None)
        argv = [sys.executable, "-m", "hacfg", "agent", "--nnodes", str(nodes), "--node-rank", str(rank),
                "--rdzv-endpoint", f"127.0.0.1:{rdzv}", "--checkpoint-path", str(ckpt), "--max-restarts", "3",
                "--no-precheck", "--no-warm", "--hang-timeout", "3s", "--initial-hang-timeout", "120s",
                "--hang-retry", "--grace", "2", "--",
                sys.executable, str(CHILD), str(rank), str(nodes), str(master), CHILD_KIND.get(kind, kind), str(faulty),
                "0.02", str(PER_NODE.get(kind, 1))]
        log = (root / f"node{rank}.log").open("wb")
        agents.append(subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
    events = ckpt / ".hacfg" / "node-0" / "events.jsonl"
    deadline = time.monotonic() + 300
    decision = None
    # the first decision is the one about the fault: the job's end is not this benchmark's business
    while decision is None and time.monotonic() < deadline and any(agent.poll() is None for agent in agents):
        time.sleep(0.5)
        lines = events.read_text().splitlines() if events.exists() else []
        decision = next((json.loads(line) for line in lines if '"decision"' in line), None)
    for agent in agents:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(agent.pid, signal.SIGKILL)
        agent.wait()
    return (decision if decision is not None and decision["cause"] == "hang" else None), ckpt / ".hacfg"


def measure_evidence(state: Path, faulty: int, tally: Tally) -> str:
    """From the nodes' events and evidence files: how long after the first hang event every node's
    summary was written, whether each running rank's stacks and recorder state made it in, the
    bytes each rank left, and whether the node whose detector fired first (what ``cause_node``
    said before it followed the culprit) is the hung one; the same in words. Each node's summary
    precedes its stop signal (the agent stops its workers only once it has sent it and waited for
    the others')."""
    hangs, summaries, sizes = [], [], []
    for node in sorted(state.glob("node-*")):
        for record in map(json.loads, (node / "events.jsonl").read_text().splitlines()):
            if record["event"] == "hang":
                at = datetime.fromisoformat(record["time"].replace("Z", "+00:00")).timestamp()
                hangs.append((at, int(node.name.rpartition("-")[2])))
        folder = node / inquiry.FOLDER / "attempt-1"
        summary = folder / inquiry.SUMMARY
        if not summary.exists():
            tally.missing += 1
            continue
        summaries.append(summary.stat().st_mtime)
        for rank in json.loads(summary.read_text())["ranks"]:
            files = [folder / f"{rank['pid']}{suffix}" for suffix in (".json", ".stacks")]
            sizes.append(sum(path.stat().st_size for path in files if path.exists()))
            answered = rank["state"] == "stopped" or (rank["stack"] and rank["collectives"] is not None)
            tally.missing += not answered
    tally.size += sizes
    if not (hangs and summaries):
        return ""
    tally.first["hung node" if min(hangs)[1] == faulty else "another"] += 1
    tally.latency.append(max(summaries) - min(hangs)[0])
    return f" evidence {tally.latency[-1]:.2f}s, max {max(sizes, default=0) / 1024:.1f} KB/rank"


def trial(kind: str, nodes: int, faulty: int, tally: Tally) -> None:
    folder = Path(tempfile.mkdtemp(prefix=f"culprit-{kind}-{nodes}-"))
    started = time.monotonic()
    decision, state = run(kind, nodes, faulty, folder)
    took = time.monotonic() - started
    if decision is None:
        outcome, said = "no hang", "-"
    elif decision.get("culprit") is None:
        outcome, said = "unknown", decision.get("culprit_note") or "-"
    else:
        right = decision["culprit"]["node"] == faulty
        outcome, said = "right" if right else "wrong", decision["culprit"]["how"]
    agrees = decision is None or decision.get("cause_node") == (decision.get("culprit") or {}).get("node")
    with LOCK:
        tally.outcomes[outcome] += 1
        tally.apart += not agrees
        measured = measure_evidence(state, faulty, tally) if decision is not None else ""
    kept = ""
    if outcome == "right":
        shutil.rmtree(folder, ignore_errors=True)
    else:
        kept = f" (kept: {folder})"  # the events and the evidence, to see why
    print(f"{nodes} nodes {kind:5} faulty node {faulty}: {outcome:7} {took:5.1f}s{measured}  {said[:90]}{kept}",
          flush=True)


OVERHEAD = """
import sys, time, torch, torch.distributed as dist
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{sys.argv[2]}", rank=int(sys.argv[1]), world_size=2)
x = torch.ones(4096)
times = []
for _ in range(int(sys.argv[3])):
    started = time.perf_counter()
    dist.all_reduce(x)
    x.div_(2)
    times.append(time.perf_counter() - started)
times = sorted(times[len(times) // 5:])  # the first fifth warms up
print(times[len(times) // 2])
"""


def step_time(armed: bool, root: Path) -> float:
    """The median step of a two-rank gloo loop, with the hook armed as the agent arms it, or not."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != inquiry.hook.ENV}
    if armed:
        env = inquiry.armed(env, inquiry.folder_for(root, 1))
    procs = [subprocess.Popen([sys.executable, "-c", OVERHEAD, str(rank), str(port), str(STEPS)], env=env,
                              stdout=subprocess.PIPE, text=True) for rank in range(2)]
    return statistics.mean(float(proc.communicate()[0]) for proc in procs)


def overhead() -> tuple[list[float], list[float]]:
    root = Path(tempfile.mkdtemp(prefix="culprit-overhead-"))
    unarmed, armed = [], []
    for _ in range(5):
        unarmed.append(step_time(False, root))
        armed.append(step_time(True, root))
    shutil.rmtree(root, ignore_errors=True)
    return unarmed, armed


def main() -> int:
    if sys.argv[1:] == ["overhead"]:
        return report_overhead()
    kinds = sys.argv[1:] or KINDS
    print(f"torch {version('torch')}; load at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores", flush=True)
    tallies = {(kind, nodes): Tally() for nodes in NODES for kind in kinds if kind not in PER_NODE or nodes == 2}
    jobs = [(kind, nodes, number % nodes, tallies[(kind, nodes)]) for (kind, nodes) in tallies for number in range(RUNS)]
    with ThreadPoolExecutor(LANES) as pool:
        for done in [pool.submit(trial, *job) for job in jobs]:
            done.result()
    print(f"\nload at end: {os.getloadavg()[0]:.1f}")
    print(f"{'kind':6} {'nodes':>5} {'runs':>4} {'right':>5} {'unknown':>7} {'wrong':>5} {'no hang':>7} "
          f"{'evidence p50/max s':>18} {'missing':>7} {'KB/rank max':>11} {'cause_node apart':>16} "
          f"{'first detector hung':>19}")
    total: Counter[str] = Counter()
    for (kind, nodes), tally in tallies.items():
        counts = tally.outcomes
        total += counts
        latency = f"{statistics.median(tally.latency):.2f}/{max(tally.latency):.2f}" if tally.latency else "-"
        size = f"{max(tally.size) / 1024:.1f}" if tally.size else "-"
        print(f"{kind:6} {nodes:5} {sum(counts.values()):4} {counts['right']:5} {counts['unknown']:7} {counts['wrong']:5} "
              f"{counts['no hang']:7} {latency:>18} {tally.missing:7} {size:>11} {tally.apart:16} "
              f"{tally.first['hung node']:>10}/{sum(tally.first.values())}")
    runs = sum(total.values())
    apart = sum(tally.apart for tally in tallies.values())
    first = sum((tally.first for tally in tallies.values()), Counter())
    print(f"right culprit node: {total['right']}/{runs} = {total['right'] / max(runs, 1):.0%} (target >= 95%), "
          f"wrong: {total['wrong']} (target 0); cause_node apart from the culprit: {apart} (target 0)")
    print(f"the first detector to fire (cause_node before it followed the culprit) was the hung node's in "
          f"{first['hung node']}/{sum(first.values())} runs")
    return report_overhead()


def report_overhead() -> int:
    unarmed, armed = overhead()
    print(f"step time, median of 5 runs of {STEPS} steps: unarmed {statistics.median(unarmed) * 1e6:.0f} us "
          f"(runs {', '.join(f'{t * 1e6:.0f}' for t in unarmed)}), armed {statistics.median(armed) * 1e6:.0f} us "
          f"(runs {', '.join(f'{t * 1e6:.0f}' for t in armed)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
