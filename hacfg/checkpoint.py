"""Save checkpoints that are either complete or absent: the helper behind ``step_N/`` directories.

    from hacfg.checkpoint import save_step, resume_dir

    start = 0
    if (found := resume_dir()) is not None:        # HACFG_RESUME_FROM, set by the agent
        state = load(found)                        # your own loading code
        start = state["step"]
    ...
    save_step("/mnt/sfs/run/ckpt", step, lambda folder: save(state, folder))

``save_step`` lets your code write into a temporary folder, fsyncs what it wrote, adds the
``.complete`` marker and renames the folder to ``step_N`` in one atomic step. A crash at any
moment leaves either a finished checkpoint or a ``.tmp`` folder the agent never resumes from.
The marker records how long the save took (``{"save_s": 1.234}``): the agent reports it, and
``hacfg plan --from-events`` plans with it.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

MARKER = ".complete"


def save_step(root: str | Path, step: int, write: Callable[[Path], None]) -> Path:
    """Write a checkpoint for ``step`` through ``write(folder)``; returns the final ``step_N`` path."""
    started = time.monotonic()
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step_{step}"
    staging = root / f".step_{step}.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    write(staging)
    for path in staging.iterdir():
        with open(path, "rb") as handle:
            os.fsync(handle.fileno())
    # The marker comes after the data is durable, and says how long that took.
    with open(staging / MARKER, "w") as marker:
        json.dump({"save_s": round(time.monotonic() - started, 3)}, marker)
        marker.flush()
        os.fsync(marker.fileno())
    if final.exists():
        shutil.rmtree(final)
    os.replace(staging, final)
    directory = os.open(root, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
    return final


def resume_dir() -> Path | None:
    """The checkpoint the agent chose for this attempt, or None on a fresh start."""
    found = os.environ.get("HACFG_RESUME_FROM", "")
    return Path(found) if found else None
