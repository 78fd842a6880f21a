"""Who hung? The culprit a hang's verdict names, against the rank that was made to hang.

Two emulated nodes (BENCH_NODES) on 127.0.0.1 run ``examples/resumable-training/train_ddp.py`` (torch DDP over
gloo, CPU) under ``hacfg agent``, as docs/multi-node.md starts them, with a 3 s hang timeout. In
each run one rank misbehaves at step 6 of the first attempt (``--fault KIND:RANK:6:1``), on node
0, node 1, ... in turn:

  hang    stuck before its next collective
  skip    leaves out one gradient all-reduce (a desync)
  stop    SIGSTOPped
  spin    a pure-Python busy loop holding the GIL

A run counts as right when node 0's first hang decision names the faulty node as the culprit;
a ``null`` culprit (the evidence could not tell) is counted apart from a wrong one. Before this
analysis the decision named the node that went quiet first: node 0, whoever hung.

Run: python bench/culprit.py [KIND ...] (needs torch; BENCH_RUNS per kind and node, default 2).
Target: the right node in at least 95 % of runs.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TRAIN = REPO / "examples" / "resumable-training" / "train_ddp.py"
KINDS = ("hang", "skip", "stop", "spin")
RUNS = int(os.environ.get("BENCH_RUNS", "2"))
NODES = int(os.environ.get("BENCH_NODES", "2"))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run(kind: str, faulty: int, root: Path) -> dict | None:
    """One job with one fault; node 0's first decision if it is a hang's, else None."""
    rdzv, master = free_port(), free_port()
    ckpt = root / "ckpt"
    agents = []
    for rank in range(NODES):
        env = {**os.environ, "PYTHONPATH": str(REPO), "NODE_RANK": str(rank), "WORLD_SIZE": str(NODES),
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(master)}
        env.pop("RANK", None)
        argv = [sys.executable, "-m", "hacfg", "agent", "--nnodes", str(NODES), "--node-rank", str(rank),
                "--rdzv-endpoint", f"127.0.0.1:{rdzv}", "--checkpoint-path", str(ckpt), "--max-restarts", "3",
                "--no-precheck", "--no-warm", "--hang-timeout", "3s", "--initial-hang-timeout", "120s", "--hang-retry",
                "--grace", "5", "--", sys.executable, str(TRAIN), "--ckpt", str(ckpt), "--out", str(root / "out"),
                "--steps", "12", "--fault", f"{kind}:{faulty}:6:1"]
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
    return decision if decision is not None and decision["cause"] == "hang" else None


def main() -> int:
    kinds = sys.argv[1:] or KINDS
    tally: dict[str, Counter[str]] = {kind: Counter() for kind in kinds}
    for kind in kinds:
        for number in range(RUNS):
            faulty = number % NODES
            folder = Path(tempfile.mkdtemp(prefix=f"culprit-{kind}-"))
            started = time.monotonic()
            decision = run(kind, faulty, folder)
            took = time.monotonic() - started
            if decision is None:
                outcome, said = "no hang", "-"
            elif decision.get("culprit") is None:
                outcome, said = "unknown", decision.get("culprit_note") or "-"
            else:
                right = decision["culprit"]["node"] == faulty
                outcome, said = "right" if right else "wrong", decision["culprit"]["how"]
            tally[kind][outcome] += 1
            kept = ""
            if outcome == "right":
                shutil.rmtree(folder, ignore_errors=True)
            else:
                kept = f" (kept: {folder})"  # the events and the evidence, to see why
            print(f"{kind:5} faulty node {faulty}: {outcome:7} {took:5.1f}s  {said[:110]}{kept}", flush=True)
    print()
    print(f"{'kind':6} {'runs':>4} {'right':>5} {'unknown':>7} {'wrong':>5} {'no hang':>7}")
    total = Counter()
    for kind, counts in tally.items():
        total += counts
        runs = sum(counts.values())
        print(f"{kind:6} {runs:4} {counts['right']:5} {counts['unknown']:7} {counts['wrong']:5} {counts['no hang']:7}")
    runs = sum(total.values())
    share = total["right"] / runs if runs else 0.0
    print(f"right culprit node: {total['right']}/{runs} = {share:.0%} (target >= 95%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
