"""An N-node job on this machine: one real agent per node around real torch DDP (examples/resumable-training)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from kit.paths import REPO
from kit.processes import free_port, kill_agents, start_logged, wait_agents

TRAIN = REPO / "examples" / "resumable-training" / "train_ddp.py"
READY_THEN = REPO / "tests" / "children" / "warm" / "ready_then.py"
STORE_ROUNDS = REPO / "tests" / "children" / "store_rounds.py"
PRELOAD = "torch,torch.distributed,torch.nn.parallel,hacfg.checkpoint"  # what train_ddp.py imports
STEPS, EVERY = 16, 4


@dataclass
class Job:
    """An N-node job: one agent process per node, all on this machine."""

    root: Path
    nnodes: int
    options: tuple[str, ...] = ()
    faults: tuple[str, ...] = ()
    script: tuple[str, ...] = ()  # a script and its arguments instead of train_ddp.py's
    train: tuple[str, ...] = ()  # more arguments for train_ddp.py ("--memory", "--step-time", "0.3")
    torchrun: bool = False
    warm: bool = False  # restarts forked from warm interpreters (a cold attempt waits until the next one is ready)
    precheck: bool = False
    steps: int = STEPS
    node_env: dict[int, dict[str, str]] = field(default_factory=dict)
    wrap: dict[int, list[str]] = field(default_factory=dict)  # a command to run a node's agent under
    state_dirs: dict[int, Path] = field(default_factory=dict)  # default: CHECKPOINT/.hacfg/node-RANK
    agents: dict[int, subprocess.Popen] = field(default_factory=dict)
    logs: dict[int, list[Path]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.rdzv_port, self.master_port = free_port(), free_port()
        self.ckpt, self.out = self.root / "ckpt", self.root / "out"

    def command(self, rank: int) -> list[str]:
        train = list(self.script) or [str(TRAIN), "--ckpt", str(self.ckpt), "--out", str(self.out), "--steps", str(self.steps), "--every", str(EVERY), *self.train]
        train += [f"--fault={spec}" for spec in self.faults]
        warm = ("--preload", PRELOAD) if self.warm else ("--no-warm",)
        if self.warm:
            train = [str(READY_THEN), *train]
        if self.torchrun:
            train = ["-m", "torch.distributed.run", "--nnodes", str(self.nnodes), "--node-rank", str(rank), "--nproc-per-node", "1",
                     "--master-addr", "127.0.0.1", "--master-port", str(self.master_port), "--max-restarts", "0", *train]
        return [sys.executable, "-m", "hacfg", "agent", "--nnodes", str(self.nnodes), "--node-rank", str(rank),
                "--rdzv-endpoint", f"127.0.0.1:{self.rdzv_port}", "--rdzv-timeout", "60", "--checkpoint-path", str(self.ckpt),
                *(() if self.precheck else ("--no-precheck",)), "--max-restarts", "3", "--grace", "5", *warm, *self.options,
                # the first step waits for every node's start: with hang detection on, allow it 120 s
                *(("--initial-hang-timeout", "120s") if "--hang-timeout" in self.options else ()),
                *(("--state-dir", str(self.state_dirs[rank])) if rank in self.state_dirs else ()),
                "--", sys.executable, *train]

    def start(self, rank: int) -> None:
        env = {**os.environ, "PYTHONPATH": str(REPO), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(self.master_port),
               "WORLD_SIZE": str(self.nnodes), "NODE_RANK": str(rank), **self.node_env.get(rank, {})}
        env.pop("RANK", None)
        log = self.root / f"node{rank}-{len(self.logs.get(rank, []))}.log"
        self.logs.setdefault(rank, []).append(log)
        self.agents[rank] = start_logged([*self.wrap.get(rank, []), *self.command(rank)], log, env=env, start_new_session=True)

    def run(self, timeout: float = 240) -> dict[int, int]:
        for rank in range(self.nnodes):
            self.start(rank)
        return self.wait(timeout)

    def wait(self, timeout: float = 240) -> dict[int, int]:
        return wait_agents(self.agents, timeout, self.output)

    def wait_for(self, rank: int, text: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.output(rank):
            if time.monotonic() > deadline:
                self.kill()
                pytest.fail(f"node {rank} never printed {text!r}:\n{self.output(rank)[-4000:]}")
            time.sleep(0.05)

    def kill(self) -> None:
        kill_agents(self.agents)

    def output(self, rank: int) -> str:
        return "".join(log.read_text(errors="replace") for log in self.logs.get(rank, []))

    def events(self, rank: int) -> list[dict]:
        path = self.state_dirs.get(rank, self.ckpt / ".hacfg" / f"node-{rank}") / "events.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()]

    def decisions(self, rank: int) -> list[dict]:
        return [e for e in self.events(rank) if e["event"] == "decision"]

    def resumed(self, rank: int) -> list[int]:
        """The step each attempt of this rank's worker started from."""
        return [int(line.split()[5]) for line in self.output(rank).splitlines() if line.startswith(f"rank {rank} attempt ") and " resumed " in line]

    def attempts(self, rank: int) -> list[int]:
        return [int(line.split()[3]) for line in self.output(rank).splitlines() if line.startswith(f"rank {rank} attempt ") and " resumed " in line]

    def weights(self, rank: int) -> dict:
        import torch

        return torch.load(self.out / f"rank{rank}.pt", weights_only=True)
