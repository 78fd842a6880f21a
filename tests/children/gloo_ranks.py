"""One rank of a gloo group on CPU that all-reduces every step; one rank misbehaves at step 11.

    gloo_ranks.py RANK WORLD PORT KIND FAULTY [COMPUTE]

KIND: ``stuck`` (sleeps before the collective), ``skip`` (skips one collective, then goes on),
``stop`` (SIGSTOPs itself), ``spin`` (a pure-Python busy loop), ``slow`` (computes twice as long
from then on). The others wait in the collective. COMPUTE: seconds of work per step (0.02).
"""
import os
import signal
import sys
import time

import torch
import torch.distributed as dist

rank, world, port, kind, faulty = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5])
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
dist.init_process_group("gloo", rank=rank, world_size=world)
tensor = torch.ones(8)
FAULT_STEP = 11  # late enough that the collectives before it repeat twice over
compute = float(sys.argv[6]) if len(sys.argv) > 6 else 0.02  # seconds of "work" per step


def fault() -> bool:
    """Misbehave; True when the step's collective is to be skipped."""
    global compute
    print(f"rank {rank} fault {kind}", flush=True)
    if kind == "slow":
        compute *= 2
    if kind == "stuck":
        time.sleep(3600)
    elif kind == "stop":
        os.kill(os.getpid(), signal.SIGSTOP)
    elif kind == "spin":
        while True:
            pass
    return kind == "skip"


for step in range(1, 1000):
    if not (rank == faulty and step == FAULT_STEP and fault()):
        dist.all_reduce(tensor)
    if step % 4 == 0:
        dist.barrier()
    print(f"rank {rank} step {step}", flush=True)
    time.sleep(compute)
