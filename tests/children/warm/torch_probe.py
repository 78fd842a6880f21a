"""Records torch's state and what a DataLoader with workers yields, in every attempt.

Usage: torch_probe.py RECORDS. Each attempt writes RECORDS/attempt-N.json; attempt 1 first waits
until its warm interpreter is ready (so attempt 2 starts warm), and kills itself after recording.
Each takes an optimizer step, which imports ``torch._dynamo`` unless it was imported already.
"""

import json
import os
import signal
import sys
import time
from pathlib import Path

import numpy
import torch
from torch.utils.data import DataLoader, Dataset


class Squares(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        return torch.tensor([i * i, torch.randint(0, 1 << 30, ()).item()])


def loaded(context, workers):
    loader = DataLoader(Squares(), batch_size=4, num_workers=workers, multiprocessing_context=context)
    batches = list(loader)
    return [b[:, 0].tolist() for b in batches], [b[:, 1].tolist() for b in batches]


if __name__ == "__main__":
    records = Path(sys.argv[1])
    attempt = int(os.environ["HACFG_ATTEMPT"])
    dynamo_at_start = "torch._dynamo" in sys.modules
    if attempt == 1:
        log = Path(os.environ["HACFG_HEARTBEAT_FILE"]).with_name("warm.log")
        while " ready:" not in (log.read_text() if log.exists() else ""):
            time.sleep(0.05)
    fork, fork_draws = loaded("fork", 2)
    spawn, spawn_draws = loaded("spawn", 1)  # a spawned worker imports torch anew: one shows it works
    weight = torch.nn.Parameter(torch.ones(2))
    optimizer = torch.optim.SGD([weight], lr=0.5)
    weight.sum().backward()
    optimizer.step()
    record = {
        "cuda_initialized_at_start": torch.cuda.is_initialized(),
        "dynamo_at_start": dynamo_at_start,
        "stepped": weight.tolist(),
        "cuda_available": torch.cuda.is_available(),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "threads": torch.get_num_threads(),
        "matmul": float((torch.ones(128, 128) @ torch.ones(128, 128)).sum()),
        "fork": fork, "spawn": spawn,
        "draws": {"torch": torch.rand(3).tolist(), "seed": torch.initial_seed(), "numpy": numpy.random.rand(3).tolist(),
                  "workers": fork_draws + spawn_draws},
    }
    (records / f"attempt-{attempt}.json").write_text(json.dumps(record))
    print(f"attempt {attempt} recorded", flush=True)
    if attempt == 1:
        os.kill(os.getpid(), signal.SIGKILL)
