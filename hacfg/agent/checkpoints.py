"""Which checkpoint an attempt resumes from: the newest *complete* one under ``checkpoint.path``.

Checkpoint layouts are plugins; each reports the checkpoints it finds on disk.
"""

from __future__ import annotations

from pathlib import Path

from hacfg.plugin import manager as plugin_manager
from hacfg.plugin.agent import CheckpointLayout, SavedCheckpoint


def layouts() -> list[CheckpointLayout]:
    return [layout for _, layout in plugin_manager.get().items("hacfg_checkpoint_layouts", CheckpointLayout)]


def complete(root: Path | None) -> list[SavedCheckpoint]:
    """Every complete checkpoint under ``root``, across every layout."""
    if root is None or not root.is_dir():
        return []
    manager = plugin_manager.get()
    found: list[SavedCheckpoint] = []
    for layout in layouts():
        try:
            found += [candidate for candidate in layout.find(root) if candidate.complete]
        except Exception as err:  # a layout plugin's bug must not stop the restart
            manager.fail(layout.name or type(layout).__name__, "find", err)
    return found


def newest_complete(root: Path | None) -> SavedCheckpoint | None:
    """The complete checkpoint with the highest step, across every layout; None when there is none."""
    return max(complete(root), key=lambda c: c.step, default=None)
