"""Save checkpoints that are either complete or absent: the helper behind ``step_N/`` directories.

    from hacfg.checkpoint import save_step, resume_dir

    start = 0
    if (found := resume_dir()) is not None:        # HACFG_RESUME_FROM, set by the agent
        state = load(found)                        # your own loading code
        start = state["step"]
    ...
    save_step("/mnt/sfs/run/ckpt", step, lambda folder: save(state, folder))

``save_step`` lets your code write into a staging folder of its own (each call, each writer),
fsyncs what it wrote, adds the ``.complete`` marker and renames the folder to ``step_N`` in one
atomic step: two writers of one step (each node's local rank 0 saving to shared storage, say)
never mix their files, and ``step_N`` holds one writer's whole save. A crash at any moment leaves
either a finished checkpoint or a hidden staging folder the agent never resumes from, and removes
before the next attempt. Saving a step again keeps the complete copy (as ``step_N.replaced-*``,
which the agent resumes from too) until the new one is in place, so a kill at any moment leaves a
complete step N.
``save_memory`` hands a step's state (a ``state_dict`` of tensors and plain objects) to the
agent's memory tier instead: a copy into shared memory the agent owns, which outlives the
trainer; without room there (or without an agent) it says so once and saves to disk through
``save_step``. ``load_state`` reads what the agent chose, from whichever tier holds it:

    if (found := resume_dir()) is not None:
        state = load_state(found)
    ...
    save_memory(step, state, fallback="/mnt/sfs/run/ckpt",      # every step or so
                to_disk=step % 500 == 0)                        # at the plan's interval: survives node loss

With ``to_disk`` the agent writes the step from its tier to ``checkpoint.path`` in the background
(``step_N/`` as :func:`save_step` publishes it, complete or absent), so the trainer blocks only for
the copy into memory; ``save_state`` writes one before it returns.

The marker records how long the save took (``{"save_s": 1.234}``): the agent reports it, and
``hacfg plan --from-events`` plans with it. The save runs in the ``checkpoint`` phase of
:mod:`hacfg.heartbeat`, so the agent applies that phase's hang timeout while it lasts.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import secrets
import shutil
import string
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from hacfg import heartbeat, memory

MARKER = ".complete"
_TOKEN = 16  # letters: what keeps one writer's folders apart from another's
_STAGING = re.compile(rf"\.step_\d+\.[a-z]{{{_TOKEN}}}\.tmp")
_REPLACED = re.compile(rf"(step_\d+)\.replaced-[a-z]{{{_TOKEN}}}")


def save_step(root: str | Path, step: int, write: Callable[[Path], None]) -> Path:
    """Write a checkpoint for ``step`` through ``write(folder)``; returns the final ``step_N`` path."""
    with heartbeat.phase("checkpoint"):
        return _save_step(Path(root), step, write)


def _save_step(root: Path, step: int, write: Callable[[Path], None]) -> Path:
    started = time.monotonic()
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step_{step}"
    # This writer's alone, on every node sharing the storage; letters only, so that the step stays
    # the last number in ``step_N.replaced-TOKEN``.
    token = "".join(secrets.choice(string.ascii_lowercase) for _ in range(_TOKEN))
    staging = root / f".step_{step}.{token}.tmp"
    staging.mkdir()
    writing = _hold(staging)
    try:
        write(staging)
        for path in staging.iterdir():
            with open(path, "rb") as handle:
                os.fsync(handle.fileno())
        # The marker comes after the data is durable, and says how long that took.
        with open(staging / MARKER, "w") as marker:
            json.dump({"save_s": round(time.monotonic() - started, 3)}, marker)
            marker.flush()
            os.fsync(marker.fileno())
        _publish(staging, final, root / f"step_{step}.replaced-{token}")
    finally:
        shutil.rmtree(staging, ignore_errors=True)  # gone once published; a save that raised leaves nothing
        os.close(writing)
    return final


def _hold(staging: Path) -> int:
    """An exclusive lock on the staging folder for as long as the save runs (the descriptor returned):
    :func:`tidy` leaves a folder alone while someone holds it, as the agent's own background
    writes to disk do while an attempt starts. Best effort: a file system without locks has none."""
    held = os.open(staging, os.O_RDONLY | os.O_DIRECTORY)
    with contextlib.suppress(OSError):
        fcntl.flock(held, fcntl.LOCK_EX)
    return held


def _held(staging: Path) -> bool:
    """Whether a save in flight holds ``staging`` (:func:`_hold`)."""
    try:
        probe = os.open(staging, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return False
    try:
        fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(probe)
    return False


def _publish(staging: Path, final: Path, aside: Path) -> None:
    """Rename ``staging`` to ``final``. A complete copy already there is set ``aside`` (where the
    agent still finds it) until the new one is in place; when another writer's lands first, it stands."""
    if not _renamed(staging, final):
        with contextlib.suppress(FileNotFoundError):  # another writer is replacing it at this moment
            os.rename(final, aside)
        _renamed(staging, final)  # refused only when another writer's copy landed first
    _sync(final.parent)
    shutil.rmtree(aside, ignore_errors=True)


def _renamed(source: Path, target: Path) -> bool:
    """Rename ``source`` to ``target`` unless ``target`` is a folder with files (the rename refuses those)."""
    try:
        os.rename(source, target)
    except OSError as err:
        if err.errno in (errno.ENOTEMPTY, errno.EEXIST):
            return False
        raise
    return True


def _sync(directory: Path) -> None:
    handle = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)


def tidy(root: str | Path | None) -> list[Path]:
    """Remove what saves killed midway left under ``root``: their staging folders, and replaced
    copies whose ``step_N`` is complete again. The agent calls it before each attempt, once every
    worker has stopped; a save still in flight (the agent's own, writing a memory step to disk)
    holds its folder and is left alone. Returns what it removed."""
    if root is None or not Path(root).is_dir():
        return []
    removed = []
    for entry in sorted(Path(root).iterdir()):
        replaced = _REPLACED.fullmatch(entry.name)
        staged = _STAGING.fullmatch(entry.name) and not _held(entry)
        if staged or (replaced and (entry.parent / replaced[1] / MARKER).is_file()):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed


def resume_dir() -> Path | None:
    """The checkpoint the agent chose for this attempt, or None on a fresh start."""
    found = os.environ.get("HACFG_RESUME_FROM", "")
    return Path(found) if found else None


def save_memory(step: int, state: Mapping[str, Any], fallback: str | Path, *, to_disk: bool = False) -> Path:
    """Hand this rank's ``state`` for ``step`` to the agent's memory tier; returns the step's folder there.
    One call per rank, no collective: the step is complete once every rank of the node has saved.
    With no tier (no agent) or no room in it, one line says so and :func:`save_state` saves it
    under ``fallback`` on disk instead.

    ``to_disk``: the step goes to ``fallback`` on disk too, as :func:`save_state` would write it.
    When ``fallback`` is the agent's ``checkpoint.path`` the agent writes it there in the background,
    from the tier, and the call blocks only for the copy into memory; otherwise it is written
    before the call returns."""
    tier = os.environ.get(memory.DIR_ENV, "")
    with heartbeat.phase("checkpoint"):
        if tier:
            behind = to_disk and _agent_writes(fallback)
            try:
                ranks = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
                copy_every = memory.copy_interval()
                folder = memory.save(
                    Path(tier), step, state, rank=_rank(), ranks=ranks, copy_every=copy_every, disk=behind
                )
            except memory.TierFull as err:
                _say_once(f"[hacfg] memory checkpoints do not fit: {err}; saving to {fallback} instead")
            else:
                if to_disk and not behind:
                    _say_once(f"[hacfg] {fallback} is not the agent's checkpoint.path: written there before going on")
                    save_state(fallback, step, state)
                return folder
        else:
            _say_once(f"[hacfg] no memory tier (no hacfg agent, or one agent per card); saving to {fallback}")
    return save_state(fallback, step, state)


def _agent_writes(root: str | Path) -> bool:
    """Whether the agent writes the memory tier's steps to ``root`` (its ``checkpoint.path``)."""
    disk = os.environ.get(memory.DISK_ENV, "")
    return bool(disk) and os.path.realpath(disk) == os.path.realpath(root)


def save_state(root: str | Path, step: int, state: Mapping[str, Any]) -> Path:
    """:func:`save_step` of this rank's ``state`` in the memory tier's format, so that
    :func:`load_state` reads it back from either tier. One writer per ``step_N``, as for ``save_step``."""

    def write(folder: Path) -> None:
        memory.save_file(folder, step, state, rank=_rank())

    return save_step(root, step, write)


def load_state(found: str | Path, *, mapped: bool = False) -> dict[str, Any]:
    """This rank's state from the checkpoint folder ``found`` (``resume_dir()``), on disk or in memory:
    copied into memory of its own (under an agent, memory its tier keeps for the next resume), or
    ``mapped`` without a copy, for state the trainer reads and does not write (:func:`hacfg.memory.load`)."""
    tier, rank = os.environ.get(memory.DIR_ENV, ""), _rank()
    return memory.load(memory.rank_file(Path(found), rank), mapped=mapped, tier=Path(tier) if tier else None, rank=rank)


def _rank() -> int:
    return int(os.environ.get("RANK", "0"))


_said: set[str] = set()


def _say_once(line: str) -> None:
    if line not in _said:
        _said.add(line)
        print(line, file=sys.stderr, flush=True)
