"""Finding the newest *complete* checkpoint under ``checkpoint.path``; layouts are plugins."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from hacfg import plugin_manager


@dataclass(frozen=True, order=True)
class Checkpoint:
    step: int
    path: Path
    complete: bool = True
    layout: str = ""


class CheckpointLayout:
    """A way training code lays out checkpoints. Subclasses set ``name`` and implement ``find``."""

    name: str = ""

    def find(self, root: Path) -> Iterable[Checkpoint]:
        """Every checkpoint under ``root``, complete or not (``complete=False`` is never resumed)."""
        raise NotImplementedError


_DIGITS = re.compile(r"(\d+)")


def step_of(name: str) -> int | None:
    """The last number in a directory name: ``checkpoint-1200`` -> 1200, ``iter_0000300`` -> 300."""
    numbers = _DIGITS.findall(name)
    return int(numbers[-1]) if numbers else None


def layouts() -> list[CheckpointLayout]:
    return [layout for _, layout in plugin_manager.get().items("hacfg_checkpoint_layouts", CheckpointLayout)]


def newest_complete(root: Path | None) -> Checkpoint | None:
    """The complete checkpoint with the highest step, across every layout; None when there is none."""
    if root is None or not root.is_dir():
        return None
    manager = plugin_manager.get()
    best: Checkpoint | None = None
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
