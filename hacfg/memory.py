"""The memory tier: a step's state in shared memory the agent owns, so that it outlives the trainer.

The agent makes one folder per job and node under ``/dev/shm`` (mode 0700, removed when the agent
ends) and tells each worker where it is (``HACFG_MEMORY_DIR``). A rank's save is one file,
``step_N/rank_R.state``, written under a hidden name and renamed into place, so it is complete or
absent; a step is complete once every local rank's file is there (each file says how many there
are). A rank that completes a step removes the older ones, keeping each rank's file as its spare,
which its next save fills without faulting a page in: the tier holds two copies of the state at
most, the newest complete step and, per rank, one being written or spare. In a group of nodes the
agent names a copy interval (``HACFG_MEMORY_COPY_EVERY``): the two newest complete steps at that
interval stay too, as every node's copy points, so that a lost node's copy on its peer (at one of
them) finds the same step on every other node; and so does the complete step before the newest,
since the nodes may be one step apart when a fault comes (one killed inside its save of a step
the others completed).

A state file is the tensors' bytes laid out raw behind a small JSON header, with the plain objects
around them (the dicts, lists, numbers of a ``state_dict``) pickled apart and read back by an
unpickler that builds nothing but containers and scalars. Loading maps the file copy-on-write and
makes each tensor with ``torch.frombuffer`` over the mapping: no copy, and the trainer's writes to
a loaded tensor never reach the checkpoint.
"""

from __future__ import annotations

import collections
import contextlib
import io
import itertools
import json
import mmap
import os
import pickle
import re
import shutil
import struct
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

DIR_ENV = "HACFG_MEMORY_DIR"  # the folder of this node's memory tier, set by the agent for each worker
COPY_EVERY_ENV = "HACFG_MEMORY_COPY_EVERY"  # in a group: the steps at this interval are the ones copied to a peer
COPY_POINTS = 2  # copy points kept: the one a peer holds, and the one that may be on its way to it
ROOT = Path("/dev/shm")
MAGIC = b"HACFGMEM1\n"
_LENGTH = struct.Struct("<Q")
_ALIGN = 64  # each tensor starts on a cache line
_STEP = re.compile(r"step_(\d+)")
RANK_NAME = re.compile(r"rank_(\d+)\.state")  # a rank's file of a step
_STAGING = re.compile(r"\.rank_(\d+)\.\d+\.tmp")  # a rank's save before its rename
HEADER_LIMIT = 64 << 20  # a header beyond this is not one hacfg wrote


class TierFull(OSError):
    """The memory tier has no room for this save."""


def folder_name(job: str | None, node: int) -> str:
    """``hacfg-<job>-node<N>``: the start of the name of a node's memory tier."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", job or "job")[:80]
    return f"hacfg-{safe}-node{node}"


def step_folder(tier: Path, step: int) -> Path:
    return tier / f"step_{step}"


def rank_file(folder: Path, rank: int) -> Path:
    return folder / f"rank_{rank}.state"


# -- writing ------------------------------------------------------------------------------------


def save(
    tier: Path, step: int, state: Mapping[str, Any], *, rank: int, ranks: int, copy_every: int | None = None
) -> Path:
    """Write ``state`` as ``rank``'s part of ``step``, one of ``ranks`` on this node; returns the step's folder.
    Raises :class:`TierFull` (leaving nothing) when the tier has no room for it."""
    folder = step_folder(tier, step)
    folder.mkdir(mode=0o700, exist_ok=True)
    save_file(folder, step, state, rank=rank, ranks=ranks, reuse=spare(tier, rank))
    if complete(folder):
        prune(tier, keep=step, copy_every=copy_every)
    return folder


def spare(tier: Path, rank: int) -> Path:
    """Where a rank's file of a pruned step waits to hold its next save: its pages are already
    there, so that save copies at memory speed instead of faulting every page in again."""
    return tier / f".spare_rank_{rank}"


def save_file(
    folder: Path, step: int, state: Mapping[str, Any], *, rank: int, ranks: int = 1, reuse: Path | None = None
) -> Path:
    """Write ``state`` to ``rank_R.state`` in ``folder``: under a hidden name (``reuse``'s file when
    there is one), renamed once whole."""
    import torch

    tensors: list[torch.Tensor] = []
    skeleton = _pickled(state, tensors)
    layout, offset = [], 0
    for tensor in tensors:
        offset = -(-offset // _ALIGN) * _ALIGN
        nbytes = tensor.numel() * tensor.element_size()
        layout.append(
            {
                "dtype": str(tensor.dtype).removeprefix("torch."),
                "shape": list(tensor.shape),
                "offset": offset,
                "nbytes": nbytes,
            }
        )
        offset += nbytes
    header = json.dumps(
        {"step": step, "rank": rank, "ranks": ranks, "tensors": layout, "objects": len(skeleton)}
    ).encode()
    start = -(-(len(MAGIC) + _LENGTH.size + len(header) + len(skeleton)) // _ALIGN) * _ALIGN
    size = start + offset
    final = rank_file(folder, rank)
    staging = folder / f".rank_{rank}.{os.getpid()}.tmp"
    if reuse is not None:
        with contextlib.suppress(FileNotFoundError):
            os.rename(reuse, staging)
    handle = os.open(staging, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        held = os.fstat(handle).st_size
        if (free := shutil.disk_usage(folder).free) + held < size:
            needed = f"the state needs {size / 1e9:.2f} GB"
            raise TierFull(f"{folder.parent} has {(free + held) / 1e9:.2f} GB free, {needed}")
        os.ftruncate(handle, max(size, 1))
        try:
            os.posix_fallocate(handle, 0, max(size, 1))  # room now, not a SIGBUS halfway through the copy
        except OSError as err:
            raise TierFull(f"{folder.parent} has no room for {size / 1e9:.2f} GB: {err.strerror}") from err
        # the page table filled in one go: faulting in each page at first touch costs more than the copy
        with mmap.mmap(handle, max(size, 1), flags=mmap.MAP_SHARED | mmap.MAP_POPULATE) as mapped:
            mapped[: len(MAGIC)] = MAGIC
            at = len(MAGIC)
            mapped[at : at + _LENGTH.size] = _LENGTH.pack(len(header))
            at += _LENGTH.size
            mapped[at : at + len(header)] = header
            at += len(header)
            mapped[at : at + len(skeleton)] = skeleton
            for tensor, place in zip(tensors, layout, strict=True):
                if place["nbytes"]:
                    target = torch.frombuffer(
                        mapped, dtype=torch.uint8, count=place["nbytes"], offset=start + place["offset"]
                    )
                    target.copy_(tensor.detach().reshape(-1).view(torch.uint8))
                    del target  # the mapping cannot close while a tensor views it
    except BaseException:
        os.close(handle)
        staging.unlink(missing_ok=True)
        raise
    os.close(handle)
    os.rename(staging, final)  # the save is whole from here on
    return final


def _pickled(state: Mapping[str, Any], tensors: list[torch.Tensor]) -> bytes:
    """``state`` pickled with each tensor replaced by its index in ``tensors`` (where it is appended)."""
    import torch

    class Pickler(pickle.Pickler):
        def persistent_id(self, obj: Any) -> int | None:
            if isinstance(obj, torch.Tensor):
                tensors.append(obj.detach().cpu().contiguous())
                return len(tensors) - 1
            return None

    buffer = io.BytesIO()
    Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(state)
    return buffer.getvalue()


# -- reading ------------------------------------------------------------------------------------


_ALLOWED = {
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("builtins", "set"): set,
    ("builtins", "frozenset"): frozenset,
    ("builtins", "complex"): complex,
    ("builtins", "slice"): slice,
}


class _Unpickler(pickle.Unpickler):
    """Containers and scalars only: the trainer writes these files, and a class named in one must not run."""

    def __init__(self, data: bytes, tensors: list[torch.Tensor]):
        super().__init__(io.BytesIO(data))
        self.tensors = tensors

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _ALLOWED:
            return _ALLOWED[module, name]
        raise pickle.UnpicklingError(f"{module}.{name} is not a plain object")

    def persistent_load(self, pid: Any) -> Any:
        if not isinstance(pid, int) or not 0 <= pid < len(self.tensors):
            raise pickle.UnpicklingError(f"no tensor {pid!r}")
        return self.tensors[pid]


def header(path: Path) -> dict[str, Any]:
    """The JSON header of a state file; ValueError when it is not one."""
    with open(path, "rb") as handle:
        if handle.read(len(MAGIC)) != MAGIC:
            raise ValueError(f"{path} is not a hacfg state file")
        (length,) = _LENGTH.unpack(handle.read(_LENGTH.size))
        if length > HEADER_LIMIT:
            raise ValueError(f"{path}: a header of {length} bytes")
        found = json.loads(handle.read(length))
    if not isinstance(found, dict):
        raise ValueError(f"{path}: the header is not an object")
    return found


def load(path: Path) -> dict[str, Any]:
    """The state in the file at ``path``, its tensors viewing a private mapping of it."""
    import torch

    with open(path, "rb") as handle:
        mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_COPY)
    at = len(MAGIC)
    if mapped[:at] != MAGIC:
        raise ValueError(f"{path} is not a hacfg state file")
    (length,) = _LENGTH.unpack(mapped[at : at + _LENGTH.size])
    at += _LENGTH.size
    if length > min(HEADER_LIMIT, len(mapped)):
        raise ValueError(f"{path}: a header of {length} bytes")
    found = json.loads(mapped[at : at + length])
    at += length
    skeleton = mapped[at : at + int(found["objects"])]
    start = -(-(at + len(skeleton)) // _ALIGN) * _ALIGN
    tensors = []
    for place in found["tensors"]:
        dtype = getattr(torch, str(place["dtype"]), None)
        if not isinstance(dtype, torch.dtype):
            raise ValueError(f"{path}: {place['dtype']!r} is not a torch dtype")
        offset, nbytes = start + int(place["offset"]), int(place["nbytes"])
        if offset + nbytes > len(mapped):
            raise ValueError(f"{path} is shorter than its header says")
        if nbytes:
            flat = torch.frombuffer(mapped, dtype=dtype, count=nbytes // dtype.itemsize, offset=offset)
        else:
            flat = torch.empty(0, dtype=dtype)
        tensors.append(flat.view(place["shape"]))
    state = _Unpickler(bytes(skeleton), tensors).load()
    if not isinstance(state, dict):
        raise ValueError(f"{path} holds a {type(state).__name__}, not a state dict")
    return state


# -- the tier's folders -------------------------------------------------------------------------


def complete(folder: Path) -> bool:
    """Whether every local rank's file of this step is there."""
    files = [entry for entry in _entries(folder) if RANK_NAME.fullmatch(entry.name)]
    if not files:
        return False
    try:
        ranks = int(header(files[0])["ranks"])
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return len(files) == ranks


def steps(tier: Path | None) -> list[tuple[int, Path]]:
    """The step folders of the tier, oldest first."""
    if tier is None:
        return []
    found = [(int(match[1]), entry) for entry in _entries(tier) if (match := _STEP.fullmatch(entry.name))]
    return sorted(found)


def newest_complete(tier: Path | None, every: int | None = None) -> tuple[int, Path] | None:
    """The newest complete step (of those at the interval ``every``, when given) and its folder."""
    return next(iter(_complete(tier, every)), None)


def held(tier: Path | None) -> list[int]:
    """Every complete step of the tier, newest first."""
    return [step for step, _ in _complete(tier, None)]


def _complete(tier: Path | None, every: int | None) -> Iterator[tuple[int, Path]]:
    for step, folder in reversed(steps(tier)):
        if (not every or step % every == 0) and complete(folder):
            yield step, folder


def prune(tier: Path, keep: int, copy_every: int | None = None) -> None:
    """Remove every step folder older than ``keep``, its ranks' files kept as each rank's spare. In
    a group (``copy_every`` given) the newest :data:`COPY_POINTS` complete steps at that interval
    stay, and so does the newest complete step before ``keep``: a node killed inside its save of
    step N+1 holds N, and the others, which completed N+1 already, must still hold N too."""
    kept: set[int] = set()
    if copy_every:
        kept = {step for step, _ in itertools.islice(_complete(tier, copy_every), COPY_POINTS)}
        kept.update(itertools.islice((step for step, _ in _complete(tier, None) if step < keep), 1))
    for step, folder in steps(tier):
        if step < keep and step not in kept:
            _remove(tier, folder)


def copy_interval() -> int | None:
    """The copy interval the agent named for this node's saves (:data:`COPY_EVERY_ENV`), if any."""
    value = os.environ.get(COPY_EVERY_ENV, "")
    return int(value) if value.isdigit() and int(value) > 0 else None


def tidy(tier: Path | None, copy_every: int | None = None) -> list[Path]:
    """Remove what saves killed midway left: incomplete step folders and half-written files, whose
    memory becomes their ranks' spares, never resumed. Safe only while no save can be in flight
    (the agent calls it before each attempt); returns what it removed."""
    if tier is None:
        return []
    removed = []
    for _, folder in steps(tier):
        if not complete(folder):
            _remove(tier, folder)
            removed.append(folder)
            continue
        for entry in _entries(folder):
            if not RANK_NAME.fullmatch(entry.name):
                if not _spare(tier, entry):
                    entry.unlink(missing_ok=True)
                removed.append(entry)
    if (newest := newest_complete(tier)) is not None:
        prune(tier, keep=newest[0], copy_every=copy_every)
    return removed


def _remove(tier: Path, folder: Path) -> None:
    for entry in _entries(folder):
        _spare(tier, entry)
    shutil.rmtree(folder, ignore_errors=True)


def _spare(tier: Path, entry: Path) -> bool:
    """Keep a rank's file, whole or half-written, as that rank's spare; False when it is neither."""
    match = RANK_NAME.fullmatch(entry.name) or _STAGING.fullmatch(entry.name)
    if match is None:
        return False
    with contextlib.suppress(OSError):
        os.rename(entry, spare(tier, int(match[1])))
    return True


def _entries(folder: Path) -> list[Path]:
    try:
        return list(folder.iterdir())
    except OSError:
        return []
