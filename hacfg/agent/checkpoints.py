"""Which checkpoint an attempt resumes from: the newest *complete* one under ``checkpoint.path``.

Checkpoint layouts are plugins; each reports the checkpoints it finds on disk.
"""

from __future__ import annotations

from pathlib import Path

from hacfg import plugin_manager
from hacfg.agent.extensions import CheckpointLayout, SavedCheckpoint


def layouts() -> list[CheckpointLayout]:
    return [layout for _, layout in plugin_manager.get().items("hacfg_checkpoint_layouts", CheckpointLayout)]


def newest_complete(root: Path | None) -> SavedCheckpoint | None:
    """The complete checkpoint with the highest step, across every layout; None when there is none."""
    if root is None or not root.is_dir():
        return None
    manager = plugin_manager.get()
    best: SavedCheckpoint | None = None
    for layout in layouts():
        try:
            candidates = list(layout.find(root))
        except Exception as err:  # a layout plugin's bug must not stop the restart
            manager.fail(layout.name or type(layout).__name__, "find", err)
            continue
        for candidate in candidates:
            if candidate.complete and (best is None or candidate.step > best.step):
                best = candidate
    return best
