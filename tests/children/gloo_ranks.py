"""The ranks of one node of a gloo group on CPU that all-reduces every step; the faulty node's
ranks misbehave at step 11.

    gloo_ranks.py NODE NODES PORT KIND FAULTY [COMPUTE] [RANKS_PER_NODE]

KIND: ``stuck`` (sleeps before the collective), ``skip`` (skips one collective, then goes on),
``stop`` (SIGSTOPs itself), ``spin`` (a pure-Python busy loop), ``slow`` (computes twice as long
from then on), ``fifo`` (blocks opening a FIFO for reading that no one writes), ``lock`` (deadlocks
with a thread of its own over two locks), ``loader`` (waits for a batch its DataLoader worker
never delivers), ``save`` (blocks writing its part of a torch DCP save every rank makes),
``size`` (all-reduces a tensor of no elements: gloo sends nothing, the call returns at once, and
the rank goes on to the next collective while the others wait in this one). The others wait in
the collective. COMPUTE: seconds of work per step (0.02). RANKS_PER_NODE (1): with more, this
process starts that many ranks (RANK, WORLD_SIZE set) and waits for them; every rank of the
faulty node misbehaves.
"""
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

node, nodes, port, kind, faulty = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5])
compute = float(sys.argv[6]) if len(sys.argv) > 6 else 0.02  # seconds of "work" per step
per_node = int(sys.argv[7]) if len(sys.argv) > 7 else 1
if per_node > 1 and "RANK" not in os.environ:  # the node's launcher: its ranks, as torchrun starts them
    ranks = [
        subprocess.Popen([sys.executable, *sys.argv], env={**os.environ, "RANK": str(node * per_node + local)})
        for local in range(per_node)
    ]
    sys.exit(max(rank.wait() for rank in ranks))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

rank = int(os.environ["RANK"]) if per_node > 1 else node
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
dist.init_process_group("gloo", rank=rank, world_size=nodes * per_node)
tensor = torch.ones(8)
FAULT_STEP = 11  # late enough that the collectives before it repeat twice over


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
    elif kind == "fifo":
        path = os.path.join(tempfile.mkdtemp(prefix="gloo-ranks-"), "fifo")
        os.mkfifo(path)
        with open(path) as fifo:
            fifo.read()
    elif kind == "lock":
        first, second = threading.Lock(), threading.Lock()
        first.acquire()
        threading.Thread(target=lambda: (second.acquire(), first.acquire()), daemon=True).start()
        time.sleep(0.1)
        second.acquire()
    elif kind == "loader":
        from torch.utils.data import DataLoader

        class Never(torch.utils.data.Dataset):
            def __len__(self):
                return 1

            def __getitem__(self, index):
                time.sleep(3600)

        next(iter(DataLoader(Never(), num_workers=1)))
    elif kind == "size":
        dist.all_reduce(torch.ones(0))
    return kind in ("skip", "size")


def save(step: int) -> None:
    """Every rank saves a DCP checkpoint; the faulty node's ranks block in the write of theirs."""
    import torch.distributed.checkpoint as dcp

    class Blocked(dcp.FileSystemWriter):
        def write_data(self, plan, planner):
            print(f"rank {rank} fault {kind}", flush=True)
            time.sleep(3600)

    folder = os.path.join(tempfile.gettempdir(), f"gloo-ranks-{port}", f"step_{step}")
    writer = (Blocked if node == faulty else dcp.FileSystemWriter)(folder)
    dcp.save({"tensor": tensor}, storage_writer=writer)


for step in range(1, 1000):
    if kind == "save" and step == FAULT_STEP:
        save(step)
    if not (node == faulty and step == FAULT_STEP and kind != "save" and fault()):
        dist.all_reduce(tensor)
    if step % 4 == 0:
        dist.barrier()
    print(f"rank {rank} step {step}", flush=True)
    time.sleep(compute)
