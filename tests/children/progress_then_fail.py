"""Saves a complete checkpoint newer than the one it resumed from, then fails with a user error."""
import os
import sys
from pathlib import Path

root = Path(sys.argv[1])
resume = os.environ["HACFG_RESUME_FROM"]
step = int(Path(resume).name.split("-")[1]) + 10 if resume else 10
ckpt = root / f"checkpoint-{step}"
ckpt.mkdir(parents=True)
(ckpt / "trainer_state.json").write_text("{}")
print(f"attempt {os.environ['HACFG_ATTEMPT']} resumed {resume or '-'} saved {ckpt.name}", flush=True)
if step >= int(sys.argv[2]):
    sys.exit(0)
raise RuntimeError("NaN loss")
