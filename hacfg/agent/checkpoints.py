"""Which checkpoint an attempt resumes from: the newest *complete* one under ``checkpoint.path``;
and whether new ones keep appearing there while the job trains (:class:`SaveWatch`).

Checkpoint layouts are plugins; each reports the checkpoints it finds on disk. One that lies
outside ``checkpoint.path`` once links are resolved (a ``latest`` pointer or a symlinked folder
leading elsewhere) is never chosen: every rank loads only what the job itself saved.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from hacfg import memory, untrusted
from hacfg.checkpoint import MARKER, save_step
from hacfg.plugin import manager as plugin_manager
from hacfg.plugin.recovery import CheckpointLayout, SavedCheckpoint
from hacfg.restart.vocabulary import Event

UNFINISHED_SHOWN = 5  # incomplete folders named when none is complete, newest first


def layouts() -> list[CheckpointLayout]:
    return [layout for _, layout in plugin_manager.get().items("hacfg_checkpoint_layouts", CheckpointLayout)]


def saved(root: Path | None) -> list[SavedCheckpoint]:
    """The checkpoints under ``root``, across every layout: each complete one, and each incomplete
    one a layout has a doubt about (why it cannot be resumed)."""
    return [found for found in _found(root) if found.complete or found.doubt]


def _found(root: Path | None) -> list[SavedCheckpoint]:
    """Every checkpoint each layout sees under ``root``, complete or not; a complete one that lies
    outside ``root`` once links are resolved is left out, and said as the layout's failure."""
    if root is None or not root.is_dir():
        return []
    manager = plugin_manager.get()
    found: list[SavedCheckpoint] = []
    for layout in layouts():
        try:
            candidates = list(layout.find(root))
        except Exception as err:  # a layout plugin's bug must not stop the restart
            manager.fail(layout.name or type(layout).__name__, "find", err)
            continue
        for candidate in candidates:
            if not candidate.complete or within(candidate.path, root):
                found.append(candidate)
            else:
                outside = f"{candidate.path} lies outside checkpoint.path {root}: never resumed from"
                manager.fail(layout.name or type(layout).__name__, "find", outside)
    return found


def unfinished(found: list[SavedCheckpoint]) -> dict[Path, list[str]]:
    """The folders among ``found`` that no layout finds complete, newest first, each with what
    every layout that judged it still waits for ("torch-dcp: no .metadata ...")."""
    done = {c.path for c in found if c.complete}
    waiting: dict[Path, list[str]] = {}
    for c in sorted(found, key=lambda c: c.position, reverse=True):
        if c.path not in done and c.lacks:
            waiting.setdefault(c.path, []).append(f"{c.layout}: {c.lacks}" if c.layout else c.lacks)
    return waiting


def complete(root: Path | None) -> list[SavedCheckpoint]:
    """Every complete checkpoint under ``root``, across every layout."""
    return [found for found in saved(root) if found.complete]


def within(path: Path, root: Path | None) -> bool:
    """Whether ``path`` lies under ``root`` once symlinks are resolved."""
    if root is None:
        return False
    try:
        return path.resolve().is_relative_to(root.resolve())
    except (OSError, RuntimeError):  # a link loop
        return False


def newest_complete(root: Path | None) -> SavedCheckpoint | None:
    """The complete checkpoint furthest on (the highest step, or a layout's own order), across every
    layout; None when there is none."""
    return choose(root)[0]


def choose(root: Path | None) -> tuple[SavedCheckpoint | None, tuple[str, ...]]:
    """The checkpoint to resume from, and the doubts about that choice, each to be said (a line and
    an event): a layout's, about the checkpoint chosen or a newer one it could not take (a dangling
    pointer, say); another layout's checkpoint of the same step (two programs saving under one
    path); and, when none is complete, the folders there are and what each still lacks."""
    everything = _found(root)
    found = [c for c in everything if c.complete or c.doubt]
    newest = max((c for c in found if c.complete), key=lambda c: c.position, default=None)
    resumed = f"{newest.path} is resumed" if newest else "no checkpoint is resumed"
    doubts = [
        f"{c.doubt}: {resumed}"
        for c in found
        if c.doubt and (newest is None or c == newest or c.position > newest.position)
    ]
    if newest is None and (waiting := unfinished(everything)):
        shown = [f"{path.name} ({'; '.join(why)})" for path, why in list(waiting.items())[:UNFINISHED_SHOWN]]
        more = len(waiting) - len(shown)
        doubts.append(
            f"checkpoint folders under {root} exist but none is complete: {', '.join(shown)}"
            + (f" and {more} more" if more > 0 else "")
            + ": the attempt starts from scratch"
        )
    if newest is not None:
        rivals = sorted(
            {str(c.path) for c in found if c.complete and c.position == newest.position and c.path != newest.path}
        )
        if rivals:
            doubts.append(
                f"step {newest.step} is saved by more than one layout: {resumed} ({newest.layout}), "
                f"not {', '.join(rivals)}"
            )
    return newest, tuple(dict.fromkeys(doubts))


ROOT_ENV = "HACFG_MEMORY_ROOT"  # where the memory tiers' folders go; /dev/shm unless set
OWNER = "agent.pid"  # in a memory tier's folder: the pid of the agent that made it


class MemoryTier:
    """This node's memory tier: a folder of shared memory the agent makes and removes when it
    ends, named for the job and node; the workers save into it (:mod:`hacfg.memory`). Given the
    job's ``disk`` (``checkpoint.path``), the agent writes there the steps the workers ask it to
    (``save_memory(..., to_disk=True)``), in the background; ``written`` hears of each."""

    LOOK = 2.0  # seconds between looks for a step whose ranks have no landing file yet
    DISK_LOOK = 0.25  # seconds between looks for a step to write to disk: it holds a copy of the state till then

    def __init__(
        self,
        job: str | None,
        node: int,
        disk: Path | None = None,
        written: Callable[[int, Written], None] | None = None,
    ):
        self.name = memory.folder_name(job, node)
        self.path: Path | None = None
        self.disk = disk
        self.written = written
        self._done = threading.Event()
        self._helpers: list[threading.Thread] = []

    def open(self) -> None:
        """Make the folder: mode 0700, its name's tail unguessable, so that no other user of the
        node's /dev/shm can have made it, or a link in its place, first. A folder of this job and
        node whose agent is gone (killed before it could remove it) is removed first."""
        root = Path(os.environ.get(ROOT_ENV) or memory.ROOT)
        for left in root.glob(f"{self.name}-*"):
            if not _alive(left / OWNER):
                shutil.rmtree(left, ignore_errors=True)
        self.path = Path(tempfile.mkdtemp(prefix=f"{self.name}-", dir=root))
        (self.path / OWNER).write_text(str(os.getpid()))
        self._helpers = [threading.Thread(target=self._prepare, args=(self.path,), daemon=True, name="hacfg-landing")]
        if self.disk is not None:
            self._helpers.append(
                threading.Thread(target=self._write, args=(self.path, self.disk), daemon=True, name="hacfg-to-disk")
            )
        for helper in self._helpers:
            helper.start()

    def _prepare(self, tier: Path) -> None:
        """Make each rank's landing file once the tier holds a complete step (:func:`memory.prepare_landings`),
        at the lowest priority: a resume then finds its memory there, the first as every later one."""
        yield_to_training()
        while not self._done.wait(self.LOOK):
            memory.prepare_landings(tier, self._done)

    def _write(self, tier: Path, disk: Path) -> None:
        """Write each step the workers ask for to ``disk`` (:func:`write_to_disk`), at the lowest priority.
        Once the agent ends, the step still waiting is written before it goes: the job's last
        checkpoint, as often as not."""
        yield_to_training()
        last = -1
        while True:
            ending = self._done.is_set()
            if (waiting := memory.waiting_for_disk(tier, after=last)) is not None:
                last, folder = waiting
                with contextlib.suppress(OSError):  # the tier then keeps the step: memory, not a stop
                    memory.mark_writing(tier, last)
                if not memory.complete(folder):
                    continue  # a newer step asked before the mark: the trainer let this one go
                outcome = write_to_disk(last, folder, disk)
                with contextlib.suppress(OSError):
                    memory.mark_persisted(tier, last)
                if self.written is not None and not (outcome.error and not memory.complete(folder)):
                    self.written(last, outcome)  # one let go while its copy began is passed over, unsaid
            elif ending:
                return
            else:
                self._done.wait(self.DISK_LOOK)

    def release(self) -> None:
        self._done.set()
        for helper in self._helpers:
            helper.join()
        if self.path is not None:
            shutil.rmtree(self.path, ignore_errors=True)


BACKGROUND_NICE = 19  # the agent's background threads: the lowest priority, so that on a busy node training goes first


def yield_to_training() -> None:
    """Give the calling thread the lowest CPU priority (on Linux a thread's nice value is its own):
    the agent's background work (a landing file's pages, a step written to disk, a peer copy's
    seconds of hashing per GB) takes only what training leaves. A fetch, which a recovery waits
    for, never runs so."""
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), BACKGROUND_NICE)


@dataclasses.dataclass(frozen=True)
class Written:
    """A step of the memory tier written to disk, or why not."""

    path: Path | None  # the step_N folder published under checkpoint.path
    seconds: float
    nbytes: int
    error: str | None = None


def write_to_disk(step: int, folder: Path, disk: Path) -> Written:
    """Write the memory tier's ``step`` (its ``folder``) to ``disk`` as ``save_state`` writes it: the
    files of the ranks that asked, in a ``step_N`` that :func:`hacfg.checkpoint.save_step`
    publishes complete or not at all. Each file is copied whole from one that no save touched
    meanwhile; one the trainer renamed, rewrote or swapped for something other than a file
    (a link, a pipe) fails the step, which is then not published."""
    began, copied = time.monotonic(), 0
    if (disk / f"step_{step}" / MARKER).is_file():  # an agent before this one wrote it
        return Written(disk / f"step_{step}", 0.0, 0)

    def write(staging: Path) -> None:
        nonlocal copied
        for entry in sorted(folder.iterdir()):
            if memory.RANK_NAME.fullmatch(entry.name) and memory.asks_disk(entry):
                copied += _copy_unchanged(entry, staging / entry.name)

    try:
        path = save_step(disk, step, write)
    except (OSError, ValueError) as err:
        reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
        return Written(None, time.monotonic() - began, copied, untrusted.printable(reason))
    return Written(path, time.monotonic() - began, copied)


def _copy_unchanged(source: Path, target: Path) -> int:
    """Copy the regular file ``source`` to ``target``; ValueError when it changed during the copy."""
    handle = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        before = os.fstat(handle)
        if not stat.S_ISREG(before.st_mode):
            raise ValueError(f"{source} is not a file")
        with open(target, "xb") as out:
            done = 0
            while done < before.st_size:
                sent = os.sendfile(out.fileno(), handle, done, before.st_size - done)
                if not sent:
                    break
                done += sent
        after = os.fstat(handle)
        if done != before.st_size or after.st_ctime_ns != before.st_ctime_ns or not _still(source, before):
            raise ValueError(f"{source} changed while it was written to disk")
        return done
    finally:
        os.close(handle)


def _still(path: Path, status: os.stat_result) -> bool:
    try:
        return os.path.samestat(os.stat(path, follow_symlinks=False), status)
    except OSError:
        return False


def _alive(owner: Path) -> bool:
    """Whether the agent whose pid ``owner`` holds still runs; a folder with no owner yet is
    another agent's that is making it."""
    try:
        if not owner.parent.is_dir() or owner.parent.is_symlink():
            return False
        os.kill(int(owner.read_text()), 0)
    except FileNotFoundError:
        return owner.parent.is_dir()
    except (ProcessLookupError, ValueError):
        return False
    except PermissionError:  # another user's process
        return True
    return True


@dataclasses.dataclass(frozen=True)
class Resume:
    """Where an attempt resumes: the checkpoint's folder and place (its step, or its layout's own
    order), and the tier that holds it."""

    path: str | None
    position: tuple[int, ...] | None
    tier: str  # "disk", "memory", "peer" (this node's memory step, fetched back from its copy) or "none"
    missing: str | None = None  # why this node cannot have the checkpoint chosen for the job


def newest_tier(position: tuple[int, ...] | None, path: str | None, tier: Path | None) -> Resume:
    """The newer of the disk checkpoint chosen (at ``position``, at ``path``) and the memory tier's newest
    complete step; memory on a tie, as it loads faster. Call it with no save in flight: it removes
    what saves killed midway left in the memory tier first."""
    memory.tidy(tier)
    held = memory.newest_complete(tier)
    if held is not None and (position is None or (held[0],) >= position):
        return Resume(str(held[1]), (held[0],), "memory")
    return Resume(path, position, "disk" if path else "none")


MARKER_BYTES = 4096  # save_step writes a few dozen


def save_seconds(path: Path, files: int = 10_000) -> float | None:
    """How long a checkpoint took to save: what ``hacfg.checkpoint.save_step`` wrote in its marker,
    else the spread of its files' modification times (from the first file finished to the last,
    so a lower bound; among the first ``files`` only), else None."""
    try:
        recorded = untrusted.read(path / MARKER, limit=MARKER_BYTES)  # the training writes it: any size, any nesting
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


class SaveWatch:
    """Says once when no newer complete checkpoint has appeared under ``root`` for twice the
    checkpoint interval of training: a script saving elsewhere would otherwise restart from its
    first step without a word.

    Training time runs from each attempt's first sign of life to its exit and adds up across
    attempts; a newer complete checkpoint sets it back to zero. It listens to the events log
    (:meth:`record`) and looks under ``root`` from a thread of its own while an attempt trains.
    """

    def __init__(self, root: Path, interval: float, warn: Callable[[float, SavedCheckpoint | None], None]):
        self.root = root
        self.limit = 2 * interval
        self.warn = warn  # told the training seconds without a new checkpoint, and the newest there is
        self.every = min(max(interval / 4, 0.2), 30.0)  # seconds between looks
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._newest = _identity(newest_complete(root))
        self._quiet = 0.0  # training seconds without a newer checkpoint, before the attempt running now
        self._since: float | None = None  # when the running attempt began to train (monotonic)
        self._warned = False

    def record(self, event: Mapping[str, Any]) -> None:
        """An events-log listener: training starts at ``first_activity`` and stops at ``attempt_exit``."""
        kind = event.get("event")
        if kind == Event.FIRST_ACTIVITY:
            with self._lock:
                self._since = time.monotonic()
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="hacfg-save-watch", daemon=True)
                self._thread.start()
        elif kind == Event.ATTEMPT_EXIT:
            self.look()  # a save just before the end counts
            with self._lock:
                if self._since is not None:
                    self._quiet += time.monotonic() - self._since
                    self._since = None

    def look(self) -> None:
        found = newest_complete(self.root)
        with self._lock:
            now = time.monotonic()
            if _identity(found) != self._newest:
                self._newest, self._quiet, self._warned = _identity(found), 0.0, False
                self._since = now if self._since is not None else None
                return
            training = self._quiet + (now - self._since if self._since is not None else 0.0)
            if self._warned or training < self.limit:
                return
            self._warned = True
        self.warn(training, found)

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.look()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)


def _identity(found: SavedCheckpoint | None) -> tuple[int, str] | None:
    return (found.step, str(found.path)) if found is not None else None
