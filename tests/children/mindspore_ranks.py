"""Two ranks saving as MindSpore's ModelCheckpoint does, then a user error.

Each rank loads its own file from HACFG_RESUME_FROM (rank 0's) by putting its rank in place of the
``rank_0`` folder, as docs/ascend.md shows, and saves the next checkpoint
``net-<epoch>_<step in epoch>.ckpt`` in its own ``rank_<id>/``: written as ``.tmp``, then renamed
(``_exec_save``). Three steps per epoch, so the step in epoch starts again at 1.
"""
import os
import re
import sys
from pathlib import Path

root, steps_per_epoch, last = Path(sys.argv[1]), 3, int(sys.argv[2])
resume = os.environ["HACFG_RESUME_FROM"]
done = 0
for rank in (0, 1):
    if resume:
        rank_0, name = os.path.split(resume)
        mine = os.path.join(os.path.dirname(rank_0), f"rank_{rank}", name)
        epoch, step = map(int, re.fullmatch(r"net-(\d+)_(\d+)\.ckpt", Path(mine).name).groups())
        assert Path(mine).read_text() == f"rank {rank} epoch {epoch} step {step}", mine
        done = (epoch - 1) * steps_per_epoch + step
    epoch, step = done // steps_per_epoch + 1, done % steps_per_epoch + 1
    folder = root / f"rank_{rank}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"net-{epoch}_{step}.tmp").write_text(f"rank {rank} epoch {epoch} step {step}")
    os.rename(folder / f"net-{epoch}_{step}.tmp", folder / f"net-{epoch}_{step}.ckpt")
print(f"attempt {os.environ['HACFG_ATTEMPT']} resumed {resume or '-'} saved net-{epoch}_{step}", flush=True)
if done + 1 >= last:
    sys.exit(0)
raise RuntimeError("NaN loss")
