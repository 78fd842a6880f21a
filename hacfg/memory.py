"""The memory tier: a step's state in shared memory the agent owns, so that it outlives the trainer.

The agent makes one folder per job and node under ``/dev/shm`` (mode 0700, removed when the agent
ends) and tells each worker where it is (``HACFG_MEMORY_DIR``). A rank's save is one file,
``step_N/rank_R.state``, written under a hidden name and renamed into place, so it is complete or
absent; a step is complete once every local rank's file is there (each file says how many there
are). A rank that completes a step removes the older ones, keeping each rank's file as its spare,
which its next save fills without faulting a page in: the tier holds two copies of the state at
most, the newest complete step and, per rank, one being written or spare, besides each rank's
landing file, which a resume loads into (:func:`landing`), and a step the agent is still
writing to disk (:func:`waiting_for_disk`). In a group of nodes the agent names a copy interval
(``HACFG_MEMORY_COPY_EVERY``): the two newest complete steps at that interval stay too, as every
node's copy points, so that a lost node's copy on its peer (at one of them) finds the same step
on every other node; and so does the complete step before the newest,
since the nodes may be one step apart when a fault comes (one killed inside its save of a step
the others completed). A copy point and the step before the newest are freed by the same save, so
a rank keeps up to two spares (:data:`SPARES`): the tier's files go round instead of one of them
being freed and faulted in again at each copy point.

A state file is the tensors' bytes laid out raw behind a small JSON header, with the plain objects
around them (the dicts, lists, numbers of a ``state_dict``) pickled apart and read back by an
unpickler that builds nothing but containers and scalars. Loading copies each tensor out of a
mapping of the file into memory of its own (see :func:`load` for why), under an agent into the
rank's :func:`landing` file, whose pages outlive the trainer for the next resume; or maps it
copy-on-write (``torch.frombuffer``) for a state that is read and not written. Either way the
trainer's writes never reach the checkpoint, and no later save reuses a file a mapped tensor
still views.
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import errno
import fcntl
import io
import itertools
import json
import math
import mmap
import os
import pickle
import re
import shutil
import stat
import struct
import threading
import weakref
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

DIR_ENV = "HACFG_MEMORY_DIR"  # the folder of this node's memory tier, set by the agent for each worker
COPY_EVERY_ENV = "HACFG_MEMORY_COPY_EVERY"  # in a group: the steps at this interval are the ones copied to a peer
COPY_POINTS = 2  # copy points kept: the one a peer holds, and the one that may be on its way to it
PINS = ".pins"  # the agent's list of this node's steps that a copy it keeps for another node needs
DISK_ENV = "HACFG_MEMORY_DISK"  # the disk checkpoint folder the agent writes steps of the tier to, if any
PERSISTED = ".persisted"  # the newest step the agent wrote to disk (:func:`waiting_for_disk`)
WRITING = ".writing"  # the step the agent is writing to disk now
ROOT = Path("/dev/shm")
MAGIC = b"HACFGMEM1\n"
_LENGTH = struct.Struct("<Q")
_ALIGN = 64  # each tensor starts on a cache line
_STEP = re.compile(r"step_(\d+)")
RANK_NAME = re.compile(r"rank_(\d+)\.state")  # a rank's file of a step
_STAGING = re.compile(r"\.rank_(\d+)\.\d+\.tmp")  # a rank's save before its rename
HEADER_LIMIT = 64 << 20  # a header beyond this is not one hacfg wrote
# madvise: the page table of a loaded file filled in one call, its pages still shared (no copy): a
# trap per page costs a microsecond or more, and ten in a virtual machine
_POPULATE_READ = getattr(mmap, "MADV_POPULATE_READ", 22)


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
    tier: Path,
    step: int,
    state: Mapping[str, Any],
    *,
    rank: int,
    ranks: int,
    copy_every: int | None = None,
    disk: bool = False,
) -> Path:
    """Write ``state`` as ``rank``'s part of ``step``, one of ``ranks`` on this node; returns the step's folder.
    ``disk``: the agent is to write the step to disk too (:func:`waiting_for_disk`). Raises :class:`TierFull`
    (leaving nothing) when the tier has no room for it."""
    folder = step_folder(tier, step)
    folder.mkdir(mode=0o700, exist_ok=True)
    reuse = _free_spare(tier, rank) or spares(tier, rank)[0]  # the latter kept for the next save once written
    save_file(folder, step, state, rank=rank, ranks=ranks, reuse=reuse, disk=disk)
    if complete(folder):
        prune(tier, keep=step, copy_every=copy_every)
    return folder


SPARES = 2  # a rank's spare files at most (see above)


def spares(tier: Path, rank: int) -> list[Path]:
    """Where a rank's files of pruned steps wait to hold its next saves: their pages are already
    there, so that a save copies at memory speed instead of faulting every page in again. One is
    enough alone; in a group the files rotate through the copy points, and a second spare keeps the
    one freed at each copy point from being faulted in again at the next save."""
    return [tier / f".spare_rank_{rank}{f'.{slot}' if slot else ''}" for slot in range(SPARES)]


def _free_spare(tier: Path, rank: int) -> Path | None:
    """A spare of ``rank`` there to be filled: one no tensor this process loaded mapped still views."""
    return next((slot for slot in spares(tier, rank) if slot.exists() and not _viewed(slot)), None)


def spare_of(tier: Path, name: str) -> Path:
    """The first spare of the rank whose state file is called ``name``."""
    if (match := RANK_NAME.fullmatch(name)) is None:
        raise ValueError(f"{name} is no rank's state file")
    return spares(tier, int(match[1]))[0]


def save_file(
    folder: Path,
    step: int,
    state: Mapping[str, Any],
    *,
    rank: int,
    ranks: int = 1,
    reuse: Path | None = None,
    disk: bool = False,
) -> Path:
    """Write ``state`` to ``rank_R.state`` in ``folder``: under a hidden name (``reuse``'s file when
    there is one), renamed once whole; its header says ``disk`` when the agent is to write it to disk."""
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
    fields = {"step": step, "rank": rank, "ranks": ranks, "tensors": layout, "objects": len(skeleton)}
    header = json.dumps({**fields, "disk": True} if disk else fields).encode()
    start = -(-(len(MAGIC) + _LENGTH.size + len(header) + len(skeleton)) // _ALIGN) * _ALIGN
    size = start + offset
    final = rank_file(folder, rank)
    staging = folder / f".rank_{rank}.{os.getpid()}.tmp"
    if reuse is not None and _viewed(reuse):
        reuse.unlink()  # tensors this process loaded still read its pages: a save into it would change them
        reuse = None
    if reuse is not None:
        with contextlib.suppress(FileNotFoundError):
            os.rename(reuse, staging)
    handle = os.open(staging, os.O_RDWR | os.O_CREAT, 0o600)
    mapped = None
    try:
        if reuse is not None:
            mapped = _KEPT.take(handle, size)
        if mapped is None:
            mapped = _claim(handle, size, folder.parent)
        _fill(mapped, b"".join((MAGIC, _LENGTH.pack(len(header)), header, skeleton)), start, tensors, layout)
    except BaseException:
        if mapped is not None:
            mapped.close()
        os.close(handle)
        staging.unlink(missing_ok=True)
        raise
    if reuse is not None and _exchanged(staging, final):
        # The step saved again (a restarted rank redoing it): its earlier file is a spare, not freed.
        _spare(folder.parent, staging)
    else:
        os.rename(staging, final)  # the save is whole from here on
    if reuse is None:
        mapped.close()
        os.close(handle)
    else:
        _KEPT.keep(reuse, handle, mapped)
    return final


_RENAMEAT2 = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)  # glibc 2.28 on
_RENAME_EXCHANGE = 2  # renameat2's flag (linux/fs.h)
_AT_FDCWD = -100


def _exchanged(source: Path, target: Path) -> bool:
    """Swap the files at ``source`` and ``target`` in one step (``renameat2``'s ``RENAME_EXCHANGE``);
    False, with nothing moved, when ``target`` is not there or the system cannot swap."""
    if _RENAMEAT2 is None:
        return False
    return bool(_RENAMEAT2(_AT_FDCWD, os.fsencode(source), _AT_FDCWD, os.fsencode(target), _RENAME_EXCHANGE) == 0)


def _claim(handle: int, size: int, tier: Path) -> mmap.mmap:
    """The file of ``tier`` open as ``handle`` made ``size`` bytes long, its memory claimed and mapped."""
    held = os.fstat(handle).st_size
    if (free := shutil.disk_usage(tier).free) + held < size:
        needed = f"the state needs {size / 1e9:.2f} GB"
        raise TierFull(f"{tier} has {(free + held) / 1e9:.2f} GB free, {needed}")
    os.ftruncate(handle, size)
    if os.fstat(handle).st_blocks * 512 >= size:
        # a spare's pages, all there: the page table filled in one go costs less than a fault per page
        return mmap.mmap(handle, size, flags=mmap.MAP_SHARED | mmap.MAP_POPULATE)
    try:
        os.posix_fallocate(handle, 0, size)  # room now, not a SIGBUS halfway through the copy
    except OSError as err:
        raise TierFull(f"{tier} has no room for {size / 1e9:.2f} GB: {err.strerror}") from err
    # new pages are zeroed at their first touch: the copy's threads fault them in faster than one populate
    return mmap.mmap(handle, size, flags=mmap.MAP_SHARED)


def _fill(
    mapped: mmap.mmap, head: bytes, start: int, tensors: list[torch.Tensor], layout: list[dict[str, Any]]
) -> None:
    """Write ``head`` at the start of ``mapped`` and each tensor's bytes at ``start`` + its offset."""
    import torch

    mapped[: len(head)] = head
    whole = torch.frombuffer(mapped, dtype=torch.uint8)
    try:
        into = whole.data_ptr() + start
        flat = [tensor.detach().reshape(-1).view(torch.uint8) for tensor in tensors]  # alive while copied
        pieces = [
            (into + place["offset"], source.data_ptr(), place["nbytes"])
            for source, place in zip(flat, layout, strict=True)
            if place["nbytes"]
        ]
        _copy(pieces, torch.get_num_threads())
    finally:
        del whole  # the mapping cannot close while a tensor views it


_SHARE = 16 << 20  # bytes below which one more thread costs more than it copies


def _copy(pieces: list[tuple[int, int, int]], threads: int) -> None:
    """memmove each ``(to, from, nbytes)``, the bytes shared evenly between up to ``threads``
    threads. glibc's memcpy streams a large copy past the cache, which torch's ``copy_`` does not:
    on two threads it copies 1 GB in about two thirds of ``copy_``'s time."""
    total = sum(nbytes for *_, nbytes in pieces)
    share = -(-total // max(1, min(threads, total // _SHARE)))
    lots: list[list[tuple[int, int, int]]] = [[]]
    room = share
    for to, source, nbytes in pieces:
        while nbytes:
            if not room:
                lots.append([])
                room = share
            step = min(nbytes, room)
            lots[-1].append((to, source, step))
            to, source, nbytes, room = to + step, source + step, nbytes - step, room - step
    helpers = [threading.Thread(target=_memmoves, args=(lot,)) for lot in lots[1:]]
    for helper in helpers:
        helper.start()
    try:
        _memmoves(lots[0])
    finally:
        for helper in helpers:  # the mapping must outlive every write into it
            helper.join()


def _memmoves(lot: list[tuple[int, int, int]]) -> None:
    for to, source, nbytes in lot:
        ctypes.memmove(to, source, nbytes)  # the GIL is released for the copy


class _Kept:
    """The state files this process saved into, left open and mapped for its next saves. A rank's
    next save fills its spare, the file it filled the time before, so the two it filled last are
    kept: mapping 1 GB populated and unmapping it again cost about half the copy of 1 GB, and a
    save into a kept file is the copy alone. A kept file removed meanwhile is released at the next
    save (its memory goes back to the tier before the room is counted), and a forked child (a data
    loader's worker) releases what it inherited."""

    PER_SPARE = 2

    def __init__(self) -> None:
        self.files: dict[Path, list[tuple[int, mmap.mmap]]] = {}
        os.register_at_fork(after_in_child=self.release_all)

    def take(self, handle: int, size: int) -> mmap.mmap | None:
        """The kept mapping of the file open as ``handle``, no longer kept, if it maps ``size`` bytes;
        the mappings of files removed since are released."""
        opened, found = os.fstat(handle), None
        for spare in list(self.files):
            still = []
            for held, mapping in self.files.pop(spare):
                status = os.fstat(held)
                if os.path.samestat(status, opened) and len(mapping) == size == opened.st_size:
                    os.close(held)
                    found = mapping
                elif status.st_nlink and not os.path.samestat(status, opened):
                    still.append((held, mapping))
                else:
                    _release(held, mapping)  # removed, or no longer the state's size
            if still:
                self.files[spare] = still
        return found

    def keep(self, spare: Path, handle: int, mapping: mmap.mmap) -> None:
        kept = self.files.setdefault(spare, [])
        kept.append((handle, mapping))
        while len(kept) > self.PER_SPARE:
            _release(*kept.pop(0))

    def release_all(self) -> None:
        for kept in self.files.values():
            for held, mapping in kept:
                with contextlib.suppress(BufferError):  # a save in flight in the parent's other thread
                    _release(held, mapping)
        self.files.clear()


def _release(handle: int, mapping: mmap.mmap) -> None:
    os.close(handle)
    mapping.close()


_KEPT = _Kept()

# The files this process loaded, by inode, while a tensor still views them: a private mapping sees the
# file's pages until the trainer writes its own, so no save may reuse one of these as its spare.
_LOADED: weakref.WeakValueDictionary[tuple[int, int], mmap.mmap] = weakref.WeakValueDictionary()


def _viewed(path: Path) -> bool:
    """Whether tensors this process loaded from the file at ``path`` are still alive."""
    try:
        status = os.stat(path)
    except FileNotFoundError:
        return False
    return (status.st_dev, status.st_ino) in _LOADED


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
    """The JSON header of a state file; ValueError when it is not one. A trainer can write the tier:
    a link or a pipe in a state file's place is refused, never followed or waited on."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise ValueError(f"{path} is not a file") from None
        raise
    if not stat.S_ISREG(os.fstat(descriptor).st_mode):
        os.close(descriptor)
        raise ValueError(f"{path} is not a file")
    with open(descriptor, "rb") as handle:
        if handle.read(len(MAGIC)) != MAGIC:
            raise ValueError(f"{path} is not a hacfg state file")
        (length,) = _LENGTH.unpack(handle.read(_LENGTH.size))
        if length > HEADER_LIMIT:
            raise ValueError(f"{path}: a header of {length} bytes")
        found = json.loads(handle.read(length))
    if not isinstance(found, dict):
        raise ValueError(f"{path}: the header is not an object")
    return found


def load(path: Path, *, mapped: bool = False, tier: Path | None = None, rank: int = 0) -> dict[str, Any]:
    """The state in the file at ``path``, each tensor copied into memory of its own; or, ``mapped``,
    viewing a private mapping of the file (no copy, each page copied as the trainer first writes it).

    A trainer writes its whole state every step (the optimizer updates every weight and moment), so
    a mapped state costs a trap and a copy per 4 KB page on the first step, about 10 us each in a
    virtual machine: 2.6 s for 1 GB. A copy costs its fresh memory's faults instead, 0.3 to 1.5 s
    per GB here, and 0.05 s for the copy itself; so given the node's ``tier``, the copy goes into
    ``rank``'s :func:`landing` file, whose pages outlive the trainer for the next resume. A copied
    state also leaves the file free to hold a later save. Map a state that is read and not written."""
    with open(path, "rb") as handle:
        mapping = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_COPY)
        status = os.fstat(handle.fileno())
    with contextlib.suppress(OSError):  # before Linux 5.14 each page is mapped at its first read
        mapping.madvise(_POPULATE_READ)
    try:
        layout, skeleton, start = _layout(path, mapping)
        if mapped:
            tensors = _views(mapping, layout, start)
            _LOADED[status.st_dev, status.st_ino] = mapping
        else:
            tensors = _copied(mapping, layout, start, _land(tier, rank, layout) if tier is not None else None)
            mapping.close()
    except BaseException:
        with contextlib.suppress(BufferError):  # a view the traceback holds: the mapping goes with it
            mapping.close()
        raise
    state = _Unpickler(skeleton, tensors).load()
    if not isinstance(state, dict):
        raise ValueError(f"{path} holds a {type(state).__name__}, not a state dict")
    return state


Layout = list[tuple["torch.dtype", list[int], int, int]]  # each tensor's dtype, shape, offset in the data, bytes


def _views(mapping: mmap.mmap, layout: Layout, start: int) -> list[torch.Tensor]:
    """Each tensor of ``layout`` viewing ``mapping``, its data from ``start`` on."""
    import torch

    whole = torch.frombuffer(mapping, dtype=torch.uint8) if len(mapping) else torch.empty(0, dtype=torch.uint8)
    return [whole[start + at : start + at + nbytes].view(dtype).view(shape) for dtype, shape, at, nbytes in layout]


def _copied(mapping: mmap.mmap, layout: Layout, start: int, landed: mmap.mmap | None) -> list[torch.Tensor]:
    """Each tensor of ``layout`` copied out of ``mapping`` into memory of its own (on the save's threads):
    views of the ``landed`` mapping when there is one, fresh tensors otherwise."""
    import torch

    views = _views(mapping, layout, start)
    if landed is not None:
        tensors = _views(landed, layout, 0)
    else:
        tensors = [torch.empty(shape, dtype=dtype) for dtype, shape, _, _ in layout]
    pieces = [(into.data_ptr(), view.data_ptr(), view.nbytes) for into, view in zip(tensors, views, strict=True)]
    _copy([piece for piece in pieces if piece[2]], torch.get_num_threads())
    return tensors


def landing(tier: Path, rank: int) -> Path:
    """Where ``rank``'s loaded state lives on this node: a file of the tier, so that when the trainer
    dies its memory is kept, not returned to the kernel, and the next resume copies into pages that
    are there instead of faulting fresh ones in. The agent makes it ahead (:func:`prepare_landings`);
    without one, a resume takes one of the rank's spares."""
    return tier / f".landing_rank_{rank}"


def prepare_landings(tier: Path, stop: threading.Event | None = None) -> list[Path]:
    """Make the landing file of each rank of the newest complete step that has none, its pages
    written so that they are there: the first resume then copies into them as every later one does,
    instead of taking a spare that the tier faults in again at its next save. Only while the tier
    keeps room for one more save besides; returns what it made. Writing is the slow part (a page
    fault and a zeroing per page): call it on a thread that yields to training; it gives up once
    ``stop`` is set."""
    newest = newest_complete(tier)
    made: list[Path] = []
    zeros = memoryview(b"")  # what a landing file is first written with, 16 MB at a time
    for path in _entries(newest[1]) if newest is not None else []:
        if (match := RANK_NAME.fullmatch(path.name)) is None or os.path.lexists(target := landing(tier, int(match[1]))):
            continue  # a link the trainer made in its place too: it is never written, nor written again and again
        with contextlib.suppress(OSError):
            size = path.stat().st_size
            if shutil.disk_usage(tier).free < 2 * size:
                continue
            staging = tier / f".landing.{os.getpid()}.tmp"
            zeros = zeros or memoryview(bytes(16 << 20))
            try:
                handle = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
                try:
                    for at in range(0, size, len(zeros)):
                        if stop is not None and stop.is_set():
                            return made
                        os.pwrite(handle, zeros[: size - at], at)
                finally:
                    os.close(handle)
                os.link(staging, target)  # never over one a trainer took meanwhile
                made.append(target)
            finally:
                staging.unlink(missing_ok=True)
    return made


def _land(tier: Path, rank: int, layout: Layout) -> mmap.mmap | None:
    """A shared mapping of ``rank``'s landing file, long enough for ``layout``'s tensors and held (an
    exclusive ``flock``, released with the mapping) for as long as a tensor views it; None when a
    live process holds it (a forked child of the last trainer, or an earlier load in this one), it
    is not a plain file of its own (the trainer can write the tier), the tier has no room, or
    there is nothing to copy."""
    size = max((at + nbytes for _, _, at, nbytes in layout), default=0)
    if not size:
        return None
    into = landing(tier, rank)
    if not into.exists() and (spare := _free_spare(tier, rank)) is not None:
        with contextlib.suppress(OSError):
            os.rename(spare, into)
    try:
        handle = os.open(into, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError:
        return None
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        info = os.fstat(handle)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
            raise OSError(f"{into} is not a plain file of its own")  # a link to a checkpoint, say
        landed = _claim(handle, size, tier)
    except OSError:
        os.close(handle)
        return None
    weakref.finalize(landed, os.close, handle)  # the lock goes with the last tensor viewing the state
    return landed


def _layout(path: Path, mapping: mmap.mmap) -> tuple[Layout, bytes, int]:
    """A state file's tensors (dtype, shape, offset from the data's start, bytes), its pickled objects,
    and where its data starts; ValueError when the file is not one hacfg wrote whole."""
    import torch

    at = len(MAGIC)
    if mapping[:at] != MAGIC:
        raise ValueError(f"{path} is not a hacfg state file")
    (length,) = _LENGTH.unpack(mapping[at : at + _LENGTH.size])
    at += _LENGTH.size
    if length > min(HEADER_LIMIT, len(mapping)):
        raise ValueError(f"{path}: a header of {length} bytes")
    found = json.loads(mapping[at : at + length])
    at += length
    skeleton = mapping[at : at + int(found["objects"])]
    start = -(-(at + len(skeleton)) // _ALIGN) * _ALIGN
    layout = []
    for place in found["tensors"]:
        dtype = getattr(torch, str(place["dtype"]), None)
        if not isinstance(dtype, torch.dtype):
            raise ValueError(f"{path}: {place['dtype']!r} is not a torch dtype")
        offset, nbytes, shape = int(place["offset"]), int(place["nbytes"]), [int(n) for n in place["shape"]]
        if start + offset + nbytes > len(mapping) or nbytes != math.prod(shape) * dtype.itemsize:
            raise ValueError(f"{path} is shorter than its header says")
        layout.append((dtype, shape, offset, nbytes))
    return layout, skeleton, start


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
    """Remove every step folder older than ``keep``, its ranks' files kept as each rank's spare, but
    those pinned. In a group (``copy_every`` given) the newest :data:`COPY_POINTS` complete steps at
    that interval stay, and so does the newest complete step before ``keep``: a node killed inside
    its save of step N+1 holds N, and the others, which completed N+1 already, must still hold N too."""
    kept = pinned(tier)
    kept.update(for_disk(tier))
    if copy_every:
        kept.update(step for step, _ in itertools.islice(_complete(tier, copy_every), COPY_POINTS))
        kept.update(itertools.islice((step for step, _ in _complete(tier, None) if step < keep), 1))
    for step, folder in steps(tier):
        if step < keep and step not in kept:
            retire(tier, folder)


def pinned(tier: Path) -> set[int]:
    """The steps the agent pinned (:func:`pin`)."""
    try:
        found = json.loads((tier / PINS).read_text())
    except (OSError, ValueError):
        return set()
    return {step for step in found if type(step) is int} if isinstance(found, list) else set()


def pin(tier: Path, pins: set[int]) -> None:
    """Keep these steps of the tier from pruning, in place of those pinned before: the steps of the
    copies the agent keeps for other nodes, which a lost node's copy is resumed with."""
    _record(tier / PINS, sorted(pins))


def waiting_for_disk(tier: Path | None, after: int | None = None) -> tuple[int, Path] | None:
    """The step the agent is to write to disk and has not yet: the newest complete one whose files
    say so (an older one waiting is passed over), if newer than ``after``, by default the last step
    the agent wrote (:data:`PERSISTED`). It stays in the tier until then."""
    for step, folder in _complete(tier, None):
        if any(asks_disk(entry) for entry in _entries(folder) if RANK_NAME.fullmatch(entry.name)):
            return (step, folder) if step > (persisted(tier) if after is None else after) else None
    return None


def asks_disk(path: Path) -> bool:
    """Whether the rank's state file at ``path`` asks the agent to write it to disk."""
    try:
        return header(path).get("disk") is True
    except (OSError, ValueError):
        return False


def for_disk(tier: Path) -> set[int]:
    """The steps the tier keeps for the disk: the one the agent is writing and the newest waiting."""
    done = persisted(tier)
    waiting = waiting_for_disk(tier, after=done)
    return {step for step in (_read_step(tier / WRITING), waiting[0] if waiting else -1) if step > done}


def persisted(tier: Path | None) -> int:
    """The newest step the agent wrote to disk from this tier; -1 before the first."""
    return _read_step(tier / PERSISTED) if tier is not None else -1


def _read_step(path: Path) -> int:
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        return -1
    return found if type(found) is int else -1


def mark_writing(tier: Path, step: int) -> None:
    """Record that the agent is writing ``step`` to disk: the tier keeps it until it is written."""
    _record(tier / WRITING, step)


def mark_persisted(tier: Path, step: int) -> None:
    """Record that ``step`` is on disk (or will never be): the tier need keep it no longer."""
    _record(tier / PERSISTED, step)


def _record(path: Path, value: Any) -> None:
    """Write ``value`` as JSON to ``path`` of the tier, whole or not at all. The trainer can write the
    tier: a link it left at the staging name is replaced, never written through."""
    staging = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    staging.unlink(missing_ok=True)
    handle = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with open(handle, "w") as out:
        out.write(json.dumps(value))
    os.replace(staging, path)


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
            retire(tier, folder)
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


def retire(tier: Path, folder: Path) -> None:
    """Remove a step's folder, its ranks' files kept as their spares."""
    for entry in _entries(folder):
        _spare(tier, entry)
    shutil.rmtree(folder, ignore_errors=True)


def _spare(tier: Path, entry: Path) -> bool:
    """Keep a rank's file, whole or half-written, as one of that rank's spares (in place of the first
    when there are enough); False when it is neither."""
    match = RANK_NAME.fullmatch(entry.name) or _STAGING.fullmatch(entry.name)
    if match is None:
        return False
    slots = spares(tier, int(match[1]))
    with contextlib.suppress(OSError):
        os.rename(entry, next((slot for slot in slots if not slot.exists()), slots[0]))
    return True


def _entries(folder: Path) -> list[Path]:
    try:
        return list(folder.iterdir())
    except OSError:
        return []
