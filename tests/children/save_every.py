"""Trains for SECONDS, saving a complete checkpoint-N/ into FOLDER every 0.3 s: the folder is the
scenario's checkpoint.path, or somewhere else (a script that saves elsewhere)."""
import sys
import time
from pathlib import Path

folder, seconds = Path(sys.argv[1]), float(sys.argv[2])
start = time.monotonic()
step = 0
while time.monotonic() - start < seconds:
    step += 1
    print(f"step {step}", flush=True)
    ckpt = folder / f"checkpoint-{step}"
    ckpt.mkdir(parents=True)
    (ckpt / "trainer_state.json").write_text("{}")
    time.sleep(0.3)
