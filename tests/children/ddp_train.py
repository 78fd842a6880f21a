"""A real data-parallel training job (torch DDP over gloo, CPU) that resumes from HACFG_RESUME_FROM.

One process per node; its rank comes from RANK (torchrun) or NODE_RANK (one worker per agent).
Deterministic: the data of step s depends only on s and the rank, the optimizer state is saved,
so a run that resumes after faults must end bit-identical to one without them.

Faults, ``--fault KIND:RANK:STEP[:ATTEMPT]`` (attempt 1 by default), fired on that rank just
after that step's update:
  kill           SIGKILL itself
  hang           go silent forever (no output, no heartbeat)
  collective     print a gloo error as a collective would, then exit 1
  raise          raise a Python exception (a user error)
  kill-in-save   wait until rank 0 is inside the next checkpoint save, then SIGKILL itself
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from hacfg.checkpoint import save_step


def say(text: str) -> None:
    print(text, flush=True)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ckpt", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--every", type=int, default=4)
    parser.add_argument("--step-time", type=float, default=0.05)
    parser.add_argument("--fault", action="append", default=[])
    args = parser.parse_args()

    rank = int(os.environ.get("RANK", os.environ.get("NODE_RANK", "0")))
    world = int(os.environ["WORLD_SIZE"])
    attempt = int(os.environ.get("HACFG_ATTEMPT", "1"))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    start = 0
    resume = os.environ.get("HACFG_RESUME_FROM", "")
    if resume:
        state = torch.load(Path(resume) / "state.pt", weights_only=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = state["step"]
    say(f"rank {rank} attempt {attempt} resumed {start} from {resume or '-'}")
    # No bucket rebuild after the first step (it happens only without find_unused_parameters): the
    # gradient buckets, and so the order of the sums over 4+ ranks, are the same whether a run
    # starts at step 1 or resumes at step 9; otherwise a resumed run differs in the last bits.
    ddp = DistributedDataParallel(model, find_unused_parameters=True)
    faults = [parse(spec) for spec in args.fault]
    saving = Path(args.ckpt) / f".saving-{attempt}"

    for step in range(start + 1, args.steps + 1):
        data = torch.Generator().manual_seed(step * 1000 + rank)
        inputs, targets = torch.randn(8, 16, generator=data), torch.randn(8, 4, generator=data)
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(ddp(inputs), targets).backward()
        optimizer.step()
        say(f"rank {rank} step {step}")
        time.sleep(args.step_time)
        for kind, where, when, on_attempt in faults:
            if (where, when, on_attempt) == (rank, step, attempt):
                fire(kind, saving)
        if step % args.every == 0:
            if rank == 0:
                def write(folder: Path, step: int = step) -> None:
                    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}, folder / "state.pt")
                    if any(kind == "kill-in-save" and on_attempt == attempt and when == step for kind, _, when, on_attempt in faults):
                        saving.touch()
                        time.sleep(30)  # a slow save that a fault elsewhere interrupts

                save_step(args.ckpt, step, write)
                say(f"rank {rank} saved step_{step}")
            dist.barrier()

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), out / f"rank{rank}.pt")
    say(f"rank {rank} done")
    dist.destroy_process_group()
    return 0


def parse(spec: str) -> tuple[str, int, int, int]:
    kind, rank, step, *attempt = spec.split(":")
    return kind, int(rank), int(step), int(attempt[0]) if attempt else 1


def fire(kind: str, saving: Path) -> None:
    if kind == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif kind == "hang":
        time.sleep(3600)
    elif kind == "collective":
        print("RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [127.0.0.1]:4242", file=sys.stderr, flush=True)
        sys.exit(1)
    elif kind == "raise":
        raise ValueError("learning rate schedule produced NaN")
    elif kind == "kill-in-save":
        while not saving.exists():
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    sys.exit(main())
