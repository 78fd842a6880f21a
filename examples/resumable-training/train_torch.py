"""The same resumable job in PyTorch: a linear model, SGD with momentum, checkpoints in two tiers.

Model and optimizer state go to the agent's memory every step (``hacfg.checkpoint.save_memory``:
a copy into shared memory that outlives this process) and to disk every ``--every`` steps
(``to_disk``: a ``step_N/`` folder that outlives the node, which the agent writes in the background
when ``--checkpoints`` is its ``checkpoint.path``); ``load_state`` reads back whichever the agent
chose to resume from. Each step's batch comes from a generator seeded with (seed, step),
so resumed runs end with the same weights as uninterrupted ones.
"""

# ruff: noqa: E402 (torch is imported after gc.disable(), below)
from __future__ import annotations

import argparse
import gc
import os
from pathlib import Path

gc.disable()  # start-up makes next to no garbage: collections while torch is imported waste a fifth of it

import torch

from hacfg.checkpoint import load_state, resume_dir, save_memory
from hacfg.heartbeat import beat

FEATURES, SAMPLES, BATCH = 32, 4096, 64


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--every", type=int, default=20)
    parser.add_argument("--checkpoints", type=Path, default=Path("ckpt"))
    parser.add_argument("--out", type=Path, default=Path("final.pt"))
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()

    torch.use_deterministic_algorithms(True)
    data = torch.Generator().manual_seed(args.seed)
    x = torch.randn(SAMPLES, FEATURES, generator=data, dtype=torch.float64)
    y = x @ torch.randn(FEATURES, generator=data, dtype=torch.float64)
    model = torch.nn.Linear(FEATURES, 1, bias=False, dtype=torch.float64)
    torch.nn.init.zeros_(model.weight)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    start = 0
    found = resume_dir()
    if found is not None:
        state = load_state(found)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = state["step"]
    print(f"pid {os.getpid()} attempt {os.environ.get('HACFG_ATTEMPT', '-')} starts at step {start}", flush=True)
    # Start-up's objects (torch) live as long as the process: out of the collector's way, so that a
    # failed attempt exits without a last second-long collection over them. Then collect as usual.
    gc.freeze()
    gc.enable()

    for step in range(start, args.steps):
        generator = torch.Generator().manual_seed(args.seed * 1_000_003 + step)
        batch = torch.randint(0, SAMPLES, (BATCH,), generator=generator)
        loss = torch.mean((model(x[batch]).squeeze(1) - y[batch]) ** 2)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        beat(step=step + 1)
        state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step + 1}
        to_disk = (step + 1) % args.every == 0
        save_memory(step + 1, state, fallback=args.checkpoints, to_disk=to_disk)
        if to_disk:
            print(f"step {step + 1} loss {loss.item():.6f} saved", flush=True)

    torch.save(model.state_dict(), args.out)
    print(f"done: weights in {args.out}", flush=True)


if __name__ == "__main__":
    main()
