"""Trains a small linear model for STEPS steps, handing each step's state to the memory tier
(``save_memory``, disk under FALLBACK without one) with BALLAST megabytes of extra state, and
resuming through ``load_state`` from whichever tier the agent chose; every DISK_EVERY-th step (if
given) goes to FALLBACK on disk too (``to_disk``). Says ``pid P start S tier T`` first; writes the
final weights to OUT."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch

from hacfg.checkpoint import load_state, resume_dir, save_memory

steps, out, ballast_mb, fallback = int(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4])
disk_every = int(sys.argv[5]) if len(sys.argv) > 5 else 0
torch.use_deterministic_algorithms(True)
model = torch.nn.Linear(16, 1, bias=False, dtype=torch.float64)
torch.nn.init.zeros_(model.weight)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
ballast = torch.zeros(ballast_mb * (1 << 20) // 4, dtype=torch.float32)
start = 0
if (found := resume_dir()) is not None:
    state = load_state(found)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    ballast = state["ballast"]
    start = state["step"]
print(f"pid {os.getpid()} start {start} tier {os.environ.get('HACFG_RESUME_TIER')}", flush=True)
for step in range(start, steps):
    generator = torch.Generator().manual_seed(step)
    x = torch.randn(32, 16, generator=generator, dtype=torch.float64)
    loss = torch.mean((model(x).squeeze(1) - x.sum(1)) ** 2)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    ballast[step::4096] += 1  # state that changes every step, beyond the model's
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "ballast": ballast, "step": step + 1}
    save_memory(step + 1, state, fallback, to_disk=bool(disk_every) and (step + 1) % disk_every == 0)
    print(f"step {step + 1} saved", flush=True)
torch.save({"model": model.state_dict(), "ballast": ballast}, out)
