"""Data-parallel training (torch DDP over gloo, on CPU) that resumes from the checkpoint the agent chose.

One process per node; its rank comes from RANK (torchrun) or NODE_RANK (one worker per agent).
Deterministic: the data of step s depends only on s and the rank, the optimizer state is saved,
so a run that resumes after faults ends bit-identical to one without them. Under ``hacfg agent``
it resumes from ``HACFG_RESUME_FROM``, the same checkpoint on every rank; elsewhere (plain
torchrun) each rank looks for the newest complete ``step_N`` itself, as most scripts do.
Lines carry wall-clock times so a benchmark can tell how long a recovery took. With ``--memory``
each step's state also goes to the agent's memory tier (``save_memory``), which the agent resumes
from when every node holds the step, or a lost node's copy on its peer does.

Faults to demonstrate recovery, ``--fault KIND:RANK:STEP[:ATTEMPT]``, fired on that rank just
after that step's update, once per job (a marker beside the checkpoints remembers it), or in
that attempt only when ATTEMPT is given:
  kill           SIGKILL itself
  hang           go silent forever (no output, no heartbeat), before the next step's collective
  stop           SIGSTOP itself
  spin           a pure-Python busy loop, forever
  skip           leave out the next step's gradient all-reduce (a desync: the ranks pair the wrong calls)
  collective     print a gloo error as a collective would, then exit 1
  raise          raise a Python exception (a user error)
  kill-in-save   wait until rank 0 is inside the next checkpoint save, then SIGKILL itself
  slow           compute twice as long from then on (a fail-slow rank: the others wait for it)
"""

# ruff: noqa: E402 (torch is imported after gc.disable(), below)
from __future__ import annotations

import argparse
import contextlib
import gc
import os
import signal
import sys
import time
from pathlib import Path

# Start-up (torch, and the torch._dynamo its optimizer imports) makes objects that live as long as the
# process and next to no garbage: collections while they are made waste a fifth of the start's CPU.
# Off until gc.freeze() below sets them aside, then on for the training.
gc.disable()

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from hacfg import heartbeat
from hacfg.checkpoint import load_state, save_memory, save_step


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
    parser.add_argument("--memory", action="store_true", help="save every step to the agent's memory tier too")
    parser.add_argument("--ballast", type=int, default=0, help="MB of extra state in each memory save, as a model's")
    args = parser.parse_args()

    rank = int(os.environ.get("RANK", os.environ.get("NODE_RANK", "0")))
    world = int(os.environ["WORLD_SIZE"])
    attempt = int(os.environ.get("HACFG_ATTEMPT") or int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")) + 1)
    # Start-up waits for the slowest rank (imports, the checkpoint's load, DDP's first broadcast):
    # its own phase, so --phase-timeout init=... covers it instead of the training's hang timeout.
    # The phase is declared before the first line, which the agent takes as the first sign of life.
    with heartbeat.phase("init"):
        say(f"rank {rank} attempt {attempt} started at {time.time():.3f}")
        dist.init_process_group("gloo", rank=rank, world_size=world)
        say(f"rank {rank} attempt {attempt} grouped at {time.time():.3f}")
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        start = 0
        ballast = torch.zeros(args.ballast << 18)  # float32: MB * 2**20 / 4
        resume = os.environ["HACFG_RESUME_FROM"] if "HACFG_RESUME_FROM" in os.environ else newest_step(Path(args.ckpt))
        if resume:
            in_memory = os.environ.get("HACFG_RESUME_TIER") in ("memory", "peer")
            state = load_state(resume) if in_memory else torch.load(Path(resume) / "state.pt", weights_only=True)
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            start = state["step"]
            if args.ballast:
                ballast.copy_(state["ballast"])
                if not torch.all(ballast == start):
                    raise RuntimeError(f"the checkpoint of step {start} holds another step's state")
        say(f"rank {rank} attempt {attempt} resumed {start} from {resume or '-'} at {time.time():.3f}")
        # No bucket rebuild after the first step (it happens only without find_unused_parameters): the
        # gradient buckets, and so the order of the sums over 4+ ranks, are the same whether a run
        # starts at step 1 or resumes at step 9; otherwise a resumed run differs in the last bits.
        ddp = DistributedDataParallel(model, find_unused_parameters=True)
    # What start-up made lives as long as the process: out of the collector's way, its collections
    # skip it. A rank that fails then exits in a fraction of a second instead of the second a last
    # collection over torch takes, and the restart of every rank waits for that exit.
    gc.freeze()
    gc.enable()
    faults = [parse(spec) for spec in args.fault]
    skip = slow = False
    saving = Path(args.ckpt) / ".saving"  # rank 0 is inside the save a kill-in-save fault waits for

    for step in range(start + 1, args.steps + 1):
        began = time.monotonic()
        data = torch.Generator().manual_seed(step * 1000 + rank)
        inputs, targets = torch.randn(8, 16, generator=data), torch.randn(8, 4, generator=data)
        optimizer.zero_grad()
        with ddp.no_sync() if skip else contextlib.nullcontext():
            torch.nn.functional.mse_loss(ddp(inputs), targets).backward()
        skip = False
        optimizer.step()
        heartbeat.beat(step=step)
        if args.memory:
            ballast.fill_(step)
            state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step, "ballast": ballast}
            save_memory(step, state, args.ckpt)
        say(f"rank {rank} step {step} at {time.time():.3f}")
        time.sleep(args.step_time)
        if slow:  # the step's work once more: the last to arrive, this rank hardly waits in the all-reduce
            time.sleep(time.monotonic() - began)
        for spec, (kind, where, when, on_attempt) in zip(args.fault, faults, strict=True):
            fired = Path(args.ckpt) / f".fault-{spec.replace(':', '-')}"
            if (where, when) == (rank, step) and on_attempt in (None, attempt) and not fired.exists():
                fired.parent.mkdir(parents=True, exist_ok=True)
                fired.touch()
                say(f"rank {rank} fault {kind} at {time.time():.3f}")
                skip = skip or kind == "skip"
                slow = slow or kind == "slow"
                fire(kind, saving)
        if step % args.every == 0:
            if rank == 0:
                def write(folder: Path, step: int = step) -> None:
                    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}
                    torch.save(state, folder / "state.pt")
                    kill_now = any(kind == "kill-in-save" and when == step for kind, _, when, _ in faults)
                    if kill_now and not saving.exists():
                        saving.touch()
                        time.sleep(30)  # a slow save that a fault elsewhere interrupts

                save_step(args.ckpt, step, write)
                say(f"rank {rank} saved step_{step}")
            dist.barrier()

    # The last barrier and the interpreter's exit wait for the slowest rank, as start-up does.
    heartbeat.beat(phase="shutdown")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), out / f"rank{rank}.pt")
    say(f"rank {rank} done")
    dist.destroy_process_group()
    return 0


def newest_step(root: Path) -> str:
    """The newest complete ``step_N`` under ``root``, or "" for a fresh start."""
    done = [path for path in root.glob("step_*") if (path / ".complete").exists()]
    return str(max(done, key=lambda path: int(path.name.removeprefix("step_")))) if done else ""


def parse(spec: str) -> tuple[str, int, int, int | None]:
    kind, rank, step, *attempt = spec.split(":")
    return kind, int(rank), int(step), int(attempt[0]) if attempt else None


def fire(kind: str, saving: Path) -> None:
    if kind == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif kind == "hang":
        time.sleep(3600)
    elif kind == "stop":
        os.kill(os.getpid(), signal.SIGSTOP)
    elif kind == "spin":
        while True:
            pass
    elif kind == "collective":
        gloo = "[../third_party/gloo/gloo/transport/tcp/pair.cc:534]"
        print(f"RuntimeError: {gloo} Connection closed by peer [127.0.0.1]:4242", file=sys.stderr, flush=True)
        sys.exit(1)
    elif kind == "raise":
        raise ValueError("learning rate schedule produced NaN")
    elif kind == "kill-in-save":
        while not saving.exists():
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    sys.exit(main())
