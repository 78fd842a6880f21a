"""Built-in checkpoint layouts, each complete by the rule of the framework that writes it.

Each layout names the source its rule was read from, and says of a checkpoint that is not complete
what its rule still waits for. A folder is judged by every layout whose rule can apply to it, and
is complete when one of them finds it so: torch DCP judges every numbered folder, so ``step_N``
holding DCP's ``.metadata`` is complete without ``save_step``'s marker, and ``checkpoint-N``
without Trainer's state file. Only where a framework's own pointer, tracker or marker decides when a
save is done (DeepSpeed's ``latest``, Megatron's tracker, NeMo's ``-unfinished``) does no other rule
apply to its names: a torch_dist save has DCP's ``.metadata`` before its tracker names it; nor to
MindSpore's ``rank_N`` folders, whose number is a rank.
"""

from __future__ import annotations

import pickletools
import re
import zipfile
from collections.abc import Iterator
from pathlib import Path

from hacfg.plugin import CheckpointLayout, SavedCheckpoint, hookimpl, step_of


def _entries(root: Path, pattern: re.Pattern[str]) -> Iterator[tuple[Path, re.Match[str]]]:
    """The entries of ``root`` whose whole name matches ``pattern``, in name order."""
    for entry in sorted(root.iterdir()):
        if match := pattern.fullmatch(entry.name):
            yield entry, match


class TrainerDirs(CheckpointLayout):
    """Hugging Face Trainer's ``checkpoint-N/``. ``Trainer._save_checkpoint`` (transformers,
    src/transformers/trainer.py) writes the model, optimizer, scheduler and RNG state, then
    ``trainer_state.json``: that file says the folder is complete (so does a ``.complete`` marker,
    as other tools write it)."""

    name = "checkpoint-N"
    pattern = re.compile(r"checkpoint-(\d+)")

    def find(self, root: Path) -> Iterator[SavedCheckpoint]:
        for path, match in _entries(root, self.pattern):
            complete = (path / "trainer_state.json").is_file() or (path / ".complete").exists()
            lacks = "" if complete else "no trainer_state.json, which Trainer writes last"
            yield SavedCheckpoint(int(match[1]), path, complete, self.name, lacks=lacks)


class DeepSpeedLatest(CheckpointLayout):
    """DeepSpeed's ``global_stepN/`` and its ``latest`` file. ``DeepSpeedEngine.save_checkpoint``
    (deepspeed/runtime/engine.py) writes the folder's tag into ``latest`` once every file is
    committed, and ``load_checkpoint`` resumes from the folder ``latest`` names.

    When ``latest`` names a folder that is not there, DeepSpeed would start from nothing; the newest
    ``global_stepN/`` older than the tag that holds model states (``*model_states.pt``) is taken
    instead (``latest`` moved past it, so it was complete then), and the dangling pointer is a doubt.
    """

    name = "deepspeed"
    pattern = re.compile(r"global_step(\d+)")

    def find(self, root: Path) -> Iterator[SavedCheckpoint]:
        pointer = root / "latest"
        if not pointer.is_file():
            for path, match in _entries(root, self.pattern):
                lacks = "no latest file names it, which DeepSpeed writes once every file is saved"
                if path.is_dir():
                    yield SavedCheckpoint(int(match[1]), path, False, self.name, lacks=lacks)
            return
        tag = pointer.read_text().strip()
        step = step_of(tag)
        if tag and step is not None and (root / tag).is_dir():
            yield SavedCheckpoint(step, root / tag, True, self.name)
            return
        doubt = f"{pointer} names {tag!r}, which is not there"
        if step is not None:
            yield SavedCheckpoint(step, root / tag, False, self.name, doubt)
        for path, match in _entries(root, self.pattern):
            older = step is None or int(match[1]) < step
            if older and path.is_dir() and any(path.glob("*model_states.pt")):
                yield SavedCheckpoint(int(match[1]), path, True, self.name, doubt if step is None else "")


class MegatronTracker(CheckpointLayout):
    """Megatron-LM's ``iter_NNNNNNN/`` (legacy ``mp_rank_XX/model_optim_rng.pt`` or torch_dist) and
    ``latest_checkpointed_iteration.txt``. ``save_checkpoint`` (megatron/training/checkpointing.py)
    rewrites the tracker only once the iteration is saved everywhere, and ``load_checkpoint`` resumes
    from the iteration it names (``read_metadata``: a number, or ``release`` for ``release/``).

    The tracker decides: an ``iter_`` folder it does not name is never resumed, however finished it
    looks (a torch_dist save has DCP's ``.metadata`` before the tracker moves).
    """

    name = "megatron"
    pattern = re.compile(r"iter_(\d+)|release")

    def find(self, root: Path) -> Iterator[SavedCheckpoint]:
        tracker = root / "latest_checkpointed_iteration.txt"
        if not tracker.is_file():
            for path, match in _entries(root, self.pattern):
                lacks = f"no {tracker.name} names it, which Megatron writes once the iteration is saved"
                if path.is_dir():
                    yield SavedCheckpoint(int(match[1] or 0), path, False, self.name, lacks=lacks)
            return
        text = tracker.read_text().strip()
        if text.isdigit() or text == "release":
            step, target = (int(text), root / f"iter_{int(text):07d}") if text.isdigit() else (0, root / "release")
            missing = "" if target.is_dir() else f"{tracker} names {text!r}, whose folder {target.name} is not there"
            yield SavedCheckpoint(step, target, not missing, self.name, missing)


class StepDirs(CheckpointLayout):
    """``hacfg.checkpoint.save_step``'s ``step_N/``, complete with its ``.complete`` marker; a
    ``step_N.replaced-*`` copy is the complete one a re-save of step N had not yet replaced."""

    name = "step_N"
    pattern = re.compile(r"step_(\d+)(?:\.replaced-[a-z]+)?")

    def find(self, root: Path) -> Iterator[SavedCheckpoint]:
        for path, match in _entries(root, self.pattern):
            complete = (path / ".complete").exists()
            lacks = "" if complete else "no .complete marker, which save_step writes last"
            yield SavedCheckpoint(int(match[1]), path, complete, self.name, lacks=lacks)


class ModelCheckpoint(CheckpointLayout):
    """Lightning's ``ModelCheckpoint`` and NeMo's, which extends it.

    Lightning (src/lightning/pytorch/callbacks/model_checkpoint.py) names each save from
    ``name=value`` fields, ``{epoch}-{step}`` by default (``epoch=2-step=3000.ckpt``, ``-v1`` on a
    clash), keeps ``last.ckpt`` (a copy, or a link with ``save_last="link"``), and writes each file
    whole (``_atomic_save``, src/lightning/fabric/utilities/cloud_io.py). NeMo
    (nemo/lightning/pytorch/callbacks/model_checkpoint.py) saves a distributed checkpoint as a
    folder, DCP's ``.metadata`` at its top (NeMo 1) or in ``weights/`` (NeMo 2, nemo/lightning/
    ckpt_utils.py), and marks a save in progress with a ``<name>-unfinished`` file beside it,
    removed once every rank is done. The step is the ``step=`` field; without one (``last.ckpt``,
    NeMo 2's default name under Megatron, nemo/lightning/nemo_logger.py), the ``global_step`` the
    checkpoint holds: in the file, or in the ``common.pt`` megatron.core.dist_checkpointing writes.
    """

    name = "model-checkpoint"
    pattern = re.compile(r"(?:.*=.*|last(?:-v\d+)?)(?:\.ckpt)?")
    unfinished = "-unfinished"

    def find(self, root: Path) -> Iterator[SavedCheckpoint]:
        for path, _ in _entries(root, self.pattern):
            stem = path.name.removesuffix(".ckpt")
            whole = path.name.endswith(".ckpt") and path.is_file()
            if stem.endswith(self.unfinished) or not (whole or path.is_dir()):
                continue
            step = step_of(stem)
            if step is None:  # last.ckpt, or NeMo 2's default name for Megatron ('{epoch}-{consumed_samples}')
                held = (path,) if whole else (path / "common.pt", path / "weights" / "common.pt")
                step = next((found for found in map(_global_step, held) if found is not None), None)
            if step is None:
                continue
            written = whole or self._written(path)
            marker = stem.removesuffix("-EMA") + self.unfinished
            finishing = (root / marker).exists()
            lacks = ""
            if not written:
                lacks = "no .metadata in it or in its weights/, and no latest naming a tag in it"
            elif finishing:
                lacks = f"{marker} lies beside it: a save in progress"
            yield SavedCheckpoint(step, path, written and not finishing, self.name, lacks=lacks)

    @staticmethod
    def _written(folder: Path) -> bool:
        """A checkpoint saved as a folder is written once DCP's ``.metadata`` is in it (Lightning's FSDP
        strategy, NeMo 1) or in its ``weights/`` (NeMo 2), or once DeepSpeed's ``latest`` in it names its
        tag (Lightning's DeepSpeed strategy, src/lightning/pytorch/strategies/deepspeed.py, tag ``checkpoint``)."""
        if (folder / ".metadata").is_file() or (folder / "weights" / ".metadata").is_file():
            return True
        latest = folder / "latest"
        tag = latest.read_text().strip() if latest.is_file() else ""
        return bool(tag) and (folder / tag).is_dir()


def _global_step(path: Path) -> int | None:
    """The ``global_step`` a Lightning checkpoint file holds, read from its pickle without running it.

    ``torch.save`` writes a zip whose ``data.pkl`` pickles Lightning's ``dump_checkpoint`` dict,
    ``{"epoch": ..., "global_step": ..., ...}`` (a distributed save keeps its unsharded part in
    ``common.pt``): the first ``global_step`` key is the top-level one.
    """
    try:
        with zipfile.ZipFile(path) as archive:
            pickled = next((name for name in archive.namelist() if name.endswith("/data.pkl")), None)
            if pickled is None:
                return None
            with archive.open(pickled) as stream:
                key = None
                for opcode, arg, _ in pickletools.genops(stream):
                    if "PUT" in opcode.name or opcode.name == "MEMOIZE":
                        continue
                    if key == "global_step":
                        return arg if isinstance(arg, int) and not isinstance(arg, bool) else None
                    key = arg if isinstance(arg, str) else None
    except (OSError, zipfile.BadZipFile, ValueError, EOFError):
        return None
    return None


class MindSporeFiles(CheckpointLayout):
    """MindSpore's ``ModelCheckpoint`` files, ``<prefix>-<epoch>_<step in epoch>.ckpt`` (or
    ``.safetensors`` with ``CheckpointConfig(format="safetensors")``), and the ``_breakpoint`` file
    ``exception_save`` writes when training raises (mindspore/train/callback/_checkpoint.py,
    ``_save_ckpt``; mindspore/train/model.py). The step counts within its epoch, so checkpoints are
    ordered by epoch, then step; a script that resumes passes ``initial_epoch`` for its epochs to
    count on. A prefix already used in the folder gets a number (``_chg_ckpt_file_name_if_same_exist``:
    ``net_1-2_32.ckpt`` is the next run of ``net``), which breaks a tie at the same epoch and step.

    ``_exec_save`` (mindspore/train/serialization.py) writes ``<name>.tmp`` and renames it to the
    ``.ckpt`` or ``.safetensors`` name once written, so a file under that name is whole and a
    ``.tmp`` never is. (Versions before the rename, and the MindIO backend, write in place: their
    files cannot be told whole from cut short.)

    "In distributed training, specify a different directory for each training process": by
    convention ``rank_<id>/``, as MindSpore's own ``get_ckpt_path_with_strategy`` reads it. A save is
    complete when every rank folder holds it whole, and it is resumed as rank 0's file (the lowest
    rank's): each process loads its own by putting its rank in place of ``rank_0``.
    """

    name = "mindspore"
    saved = re.compile(
        r"(?P<prefix>.+?)(?:_(?P<run>\d+))?-(?P<epoch>\d+)_(?P<step>\d+)(?P<breakpoint>_breakpoint)?"
        r"\.(?P<format>ckpt|safetensors|tmp)"
    )
    rank_folder = re.compile(r"rank_(\d+)")

    def find(self, root: Path) -> Iterator[SavedCheckpoint]:
        ranks = sorted((int(match[1]), path) for path, match in _entries(root, self.rank_folder) if path.is_dir())
        for holders in ([path for _, path in ranks], [root]):
            if holders:
                yield from self._saves(holders)

    def _saves(self, holders: list[Path]) -> Iterator[SavedCheckpoint]:
        """The saves of one set of folders that save together (every rank's, or ``root``'s own files)."""
        whole: dict[tuple[str, int, int, int, str], dict[Path, Path]] = {}  # a save -> its file in each folder
        begun: dict[tuple[str, int, int, int, str], dict[Path, Path]] = {}  # likewise, its .tmp
        for folder in holders:
            for path, match in _entries(folder, self.saved):
                if path.is_file():
                    key = (match["prefix"], int(match["run"] or 0), int(match["epoch"]), int(match["step"]),
                           match["breakpoint"] or "")
                    (begun if match["format"] == "tmp" else whole).setdefault(key, {})[folder] = path
        for key in sorted(whole.keys() | begun.keys()):
            _, run, epoch, step, _ = key
            done, started = whole.get(key, {}), begun.get(key, {})
            missing = [folder for folder in holders if folder not in done]
            first = holders[0]
            path = done.get(first) or started.get(first) or next(iter({**done, **started}.values()))
            lacks = "; ".join(
                f"{folder.name} has only {started[folder].name}, a save not finished" if folder in started
                else f"{folder.name} has none of it"
                for folder in missing
            )
            yield SavedCheckpoint(step, path, not missing, self.name, lacks=lacks, order=(epoch, step, run))


class TorchDcp(CheckpointLayout):
    """torch.distributed.checkpoint folders: torchtitan's ``step-N/``, or any numbered folder whose
    name no framework's own pointer governs (``step_N`` and ``checkpoint-N`` included: a DCP save
    so named is complete as DCP defines it). ``FileSystemWriter.finish``
    (torch/distributed/checkpoint/filesystem.py) renames ``.metadata`` into place after every
    rank's data; torchtitan's ``_find_load_step`` (torchtitan/components/checkpointer/dcp.py)
    counts a folder with it, or with ``model.safetensors.index.json`` for a Hugging Face format
    save, as complete."""

    name = "torch-dcp"
    # names whose framework decides when a save is done, by a pointer, a tracker or a marker; and
    # MindSpore's rank folders, whose number is a rank, not a step
    claimed = (DeepSpeedLatest.pattern, MegatronTracker.pattern, ModelCheckpoint.pattern, MindSporeFiles.rank_folder)
    # names whose framework writes a Hugging Face index before the rest of its checkpoint (Trainer
    # saves the model, then the optimizer, then trainer_state.json): only .metadata counts there
    indexed_early = (TrainerDirs.pattern,)

    def find(self, root: Path) -> Iterator[SavedCheckpoint]:
        for path in sorted(root.iterdir()):
            step = step_of(path.name)
            hidden = path.name.startswith(".")  # a save still being staged, as ``save_step`` stages one
            if step is None or hidden or not path.is_dir() or any(p.fullmatch(path.name) for p in self.claimed):
                continue
            index = not any(p.fullmatch(path.name) for p in self.indexed_early)
            complete = (path / ".metadata").is_file() or (index and (path / "model.safetensors.index.json").is_file())
            if complete or any(p.suffix in (".distcp", ".safetensors") for p in path.iterdir()):
                lacks = "" if complete else "no .metadata, which DCP writes once every rank's data is saved"
                yield SavedCheckpoint(step, path, complete, self.name, lacks=lacks)


@hookimpl
def hacfg_checkpoint_layouts() -> list[CheckpointLayout]:
    return [
        TrainerDirs(), DeepSpeedLatest(), MegatronTracker(), StepDirs(), ModelCheckpoint(), TorchDcp(), MindSporeFiles()
    ]
