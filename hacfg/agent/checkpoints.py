"""Which checkpoint an attempt resumes from: the newest *complete* one under ``checkpoint.path``.

Checkpoint layouts are plugins; each reports the checkpoints it finds on disk.
"""

from __future__ import annotations

import json
from pathlib import Path

from hacfg.checkpoint import MARKER
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


def save_seconds(path: Path, files: int = 10_000) -> float | None:
    """How long a checkpoint took to save: what ``hacfg.checkpoint.save_step`` wrote in its marker,
    else the spread of its files' modification times (from the first file finished to the last,
    so a lower bound; among the first ``files`` only), else None."""
    try:
        recorded = json.loads((path / MARKER).read_text() or "{}")
        if isinstance(recorded, dict) and isinstance(recorded.get("save_s"), int | float):
            return float(recorded["save_s"])
    except (OSError, ValueError):
        pass
    if not path.is_dir():
        return None
    times: list[float] = []
    for entry in path.rglob("*"):
        if len(times) >= files:
            break
        try:
            if entry.is_file() and entry.name != MARKER:
                times.append(entry.stat().st_mtime)
        except OSError:
            continue
    return max(times) - min(times) if len(times) >= 2 else None
