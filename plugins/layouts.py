"""Built-in checkpoint layouts: HF Trainer, DeepSpeed/Megatron pointer files, step dirs, torch DCP."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from hacfg.plugin import CheckpointLayout, SavedCheckpoint, hookimpl, step_of


def _subdirs(root: Path, prefix: str = "") -> Iterator[tuple[Path, int]]:
    for entry in sorted(root.iterdir()):
        if entry.is_dir() and entry.name.startswith(prefix):
            step = step_of(entry.name[len(prefix) :] if prefix else entry.name)
            if step is not None:
                yield entry, step


class TrainerDirs(CheckpointLayout):
    """``checkpoint-N/``, complete when it holds ``trainer_state.json`` or a ``.complete`` marker."""

    name = "checkpoint-N"

    def find(self, root: Path) -> Iterator[SavedCheckpoint]:
        for path, step in _subdirs(root, "checkpoint-"):
            complete = (path / "trainer_state.json").is_file() or (path / ".complete").exists()
            yield SavedCheckpoint(step, path, complete, self.name)


class PointerFile(CheckpointLayout):
    """A ``latest`` (DeepSpeed) or ``latest_checkpointed_iteration.txt`` (Megatron) file naming a step dir."""

    name = "pointer"

    def find(self, root: Path) -> Iterator[SavedCheckpoint]:
        deepspeed, megatron = root / "latest", root / "latest_checkpointed_iteration.txt"
        if deepspeed.is_file():
            tag = deepspeed.read_text().strip()
            step = step_of(tag)
            if tag and step is not None:
                target = root / tag
                yield SavedCheckpoint(step, target, target.is_dir(), self.name)
        if megatron.is_file():
            text = megatron.read_text().strip()
            if text.isdigit():
                target = root / f"iter_{int(text):07d}"
                yield SavedCheckpoint(int(text), target, target.is_dir(), self.name)


class StepDirs(CheckpointLayout):
    """``step_N/``, complete when it holds a ``.complete`` marker."""

    name = "step_N"

    def find(self, root: Path) -> Iterator[SavedCheckpoint]:
        for path, step in _subdirs(root, "step_"):
            yield SavedCheckpoint(step, path, (path / ".complete").exists(), self.name)


class TorchDcp(CheckpointLayout):
    """torch.distributed.checkpoint directories, complete when ``.metadata`` exists (written last)."""

    name = "torch-dcp"

    def find(self, root: Path) -> Iterator[SavedCheckpoint]:
        for path, step in _subdirs(root):
            if any(p.suffix == ".distcp" for p in path.iterdir()) or (path / ".metadata").exists():
                yield SavedCheckpoint(step, path, (path / ".metadata").is_file(), self.name)


@hookimpl
def hacfg_checkpoint_layouts() -> list[CheckpointLayout]:
    return [TrainerDirs(), PointerFile(), StepDirs(), TorchDcp()]
