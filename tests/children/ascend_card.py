"""One card's process under a per-card launch, with the standard library and hacfg's heartbeat only (as a
MindSpore script's would be, less the framework):

    ascend_card.py FOLDER CHECKPOINTS STEPS [FAIL]

Each attempt records FOLDER/rank-R-attempt-N.json (the card's launch variables and the agent's
HACFG_* ones) and its PID in FOLDER/pid-R-N, then steps every 0.1 s from the step it resumes at
(HACFG_RESUME_FROM, a checkpoint-N folder) to STEPS, beating each step, and exits 0. Rank 0 saves
a complete checkpoint-N (trainer_state.json) under CHECKPOINTS every second step. FAIL=user makes
rank 0's first attempt raise a Python exception at step 3; FAIL=hang makes rank 1's first attempt
stop at step 3, silent.
"""

import json
import os
import sys
import time
from pathlib import Path

from hacfg import heartbeat

folder, checkpoints, steps = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
fail = sys.argv[4] if len(sys.argv) > 4 else ""
rank, attempt = int(os.environ["RANK_ID"]), int(os.environ["HACFG_ATTEMPT"])
resume = os.environ["HACFG_RESUME_FROM"]
step = int(Path(resume).name.removeprefix("checkpoint-")) if resume else 0
names = ("RANK_ID", "RANK_SIZE", "ASCEND_DEVICE_ID", "RANK_TABLE_FILE", "HACFG_ATTEMPT", "HACFG_RESTART_COUNT", "HACFG_RESUME_FROM")
(folder / f"rank-{rank}-attempt-{attempt}.json").write_text(json.dumps({name: os.environ.get(name) for name in names} | {"step": step}))
(folder / f"pid-{rank}-{attempt}").write_text(str(os.getpid()))
print(f"rank {rank} attempt {attempt} resumes at step {step}", flush=True)
while step < steps:
    time.sleep(0.1)
    step += 1
    if fail == "user" and rank == 0 and attempt == 1 and step == 3:
        raise ValueError("a bug in the training script")
    if fail == "hang" and rank == 1 and attempt == 1 and step == 3:
        time.sleep(3600)
    heartbeat.beat(step=step)
    if rank == 0 and step % 2 == 0:
        saved = checkpoints / f"checkpoint-{step}"
        saved.mkdir(parents=True)
        (saved / "trainer_state.json").write_text(json.dumps({"global_step": step}))
print(f"rank {rank} attempt {attempt} done", flush=True)
