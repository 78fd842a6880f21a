"""One rank per node of a gloo group formed by torch's ``env://`` rendezvous, recording how it met.

    store_rounds.py FOLDER

Each attempt writes FOLDER/rank-R-attempt-N.json: the store variables it was given (its port too), whether
``MASTER_ADDR:MASTER_PORT`` listened before this rank did anything, whether the key a client of
attempt 1's store set (FOLDER/stale-set names it) is in its own store, and the sum of every rank's
attempt number. Attempt 1: rank 1 kills itself once FOLDER/stale-set exists, the others wait.
Attempt 2: every rank exits 0 once FOLDER/go exists.
"""

import json
import os
import signal
import socket
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

folder = Path(sys.argv[1])
rank, world, attempt = int(os.environ["NODE_RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ["HACFG_ATTEMPT"])
with socket.socket() as probe:
    listening = probe.connect_ex((os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]))) == 0
dist.init_process_group("gloo", rank=rank, world_size=world)
total = torch.tensor([attempt])
dist.all_reduce(total)
stale = folder / "stale-set"
record = {
    "use_agent_store": os.environ.get("TORCHELASTIC_USE_AGENT_STORE"),
    "restart_count": os.environ.get("TORCHELASTIC_RESTART_COUNT"),
    "master_port": int(os.environ["MASTER_PORT"]),
    "listening_before_start": listening,
    "stale_key_seen": stale.exists() and dist.distributed_c10d._get_default_store().check([stale.read_text()]),
    "attempt_sum": int(total),
}
(folder / f"rank-{rank}-attempt-{attempt}.json").write_text(json.dumps(record))
print(f"rank {rank} attempt {attempt} recorded", flush=True)


def wait_for(path: Path) -> None:
    while not path.exists():
        time.sleep(0.05)


if attempt == 1:
    if rank == 1:
        wait_for(stale)
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(3600)  # stopped by the agent once rank 1's death ends the round
wait_for(folder / "go")
dist.destroy_process_group()
