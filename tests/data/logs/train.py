"""A small training loop that fails the way real ones do, for the diagnose fixtures.

``python train.py ok``: trains and exits 0.
``python train.py raise``: a bug in the user's code (an uncaught exception).
``python train.py kill``: the process is SIGKILLed, as by the out-of-memory killer.
An optional second argument is the number of steps (default 3).
With ``torch`` (under torchrun) it trains a tiny model over gloo, and ``kill-peer`` kills rank 1
while rank 0 waits for it in a collective.
"""

import os
import signal
import sys


def plain(mode: str, steps: int) -> None:
    for step in range(1, steps + 1):
        print(f"step {step} loss {1.0 / step:.4f}", flush=True)
    if mode == "ok":
        return
    if mode == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    batch = {"input_ids": [1, 2, 3]}
    print(batch["labels"])


def distributed(mode: str, steps: int) -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    for step in range(1, steps + 1):
        loss = model(torch.ones(2, 4)).sum()
        loss.backward()
        for parameter in model.parameters():
            dist.all_reduce(parameter.grad)
        if rank == 0:
            print(f"step {step} loss {loss.item():.4f}", flush=True)
    if mode == "raise":
        raise ValueError("loss is nan at step 3: lower the learning rate")
    if mode == "kill" or (mode == "kill-peer" and rank == 1):
        os.kill(os.getpid(), signal.SIGKILL)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    (distributed if "RANK" in os.environ else plain)(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 3)
