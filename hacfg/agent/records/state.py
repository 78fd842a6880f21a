"""The agent's memory: its state (the job's counters and its place in the rounds) in a state file,
written atomically, one agent per directory; and how the events log is read back.

The state folder usually lies on shared storage and the agent usually runs as root, so its files
are never followed through a link (``O_NOFOLLOW``) and a folder owned by another user is refused:
nobody can make the agent write its PID or its records into a file of their choosing. A full disk
loses records whole, never half of one, and supervision goes on.

The trainer can write the folder too. So the state file is sealed with the job's key
(:mod:`hacfg.agent.records.sealed`) and validated before it is taken over: counters that hold
together, learned samples a timeout can be drawn from. Anything else is read as no state at all,
said in one line and a ``state_recovered`` event: never a larger budget than a fresh start, never
a longer timeout, never an internal error.
"""

from __future__ import annotations

import dataclasses
import errno
import fcntl
import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, BinaryIO

from hacfg import untrusted
from hacfg.agent.records import sealed
from hacfg.fsutil import atomic_write
from hacfg.restart.learning import samples_from_json
from hacfg.restart.policy import Budgets
from hacfg.scenario import modelarts as ma
from hacfg.scenario.source import InputError, Span

STATE_FILE = "state.json"
LOCK_FILE = "agent.lock"
PRIVATE = 0o600
STATE_BYTES = 256 << 10  # the largest state the agent writes: 32 phases of 200 samples learned
EVENT_BYTES = 1 << 20  # of one event record: the agent's largest, a hang's, holds a few kilobytes
MOST = 1 << 31  # attempts, restarts or rounds a state may count


@dataclass
class NodeState:
    """What one node's agent persists: the job's counters and where it is in the rounds."""

    budgets: Budgets = field(default_factory=Budgets)
    round: int = 0  # the last round this node started (0: none yet)
    running: bool = False  # its workers were running in ``round`` when the state was written
    # seconds each heartbeat phase took, per phase (hacfg.restart.learning): only what ended
    learned: dict[str, list[float]] = field(default_factory=dict)
    # when the job's first agent started (Unix time): what its time budget counts from, kept here
    # because the events log, the other record of it, is the trainer's to write
    began: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            **dataclasses.asdict(self.budgets), "round": self.round, "running": self.running, "learned": self.learned,
            "began": self.began,
        }

    @classmethod
    def from_json(cls, data: object) -> NodeState:
        """The state as :meth:`to_json` writes it; ``ValueError`` says what else ``data`` holds."""
        if not isinstance(data, dict):
            raise ValueError("not an object")
        counts: dict[str, int] = {}
        for name in (*(f.name for f in dataclasses.fields(Budgets)), "round"):
            count = data.get(name)
            if not (isinstance(count, int) and not isinstance(count, bool) and 0 <= count <= MOST):
                raise ValueError(f"{name}: {_shown(count)} is not a count")
            counts[name] = count
        budgets = Budgets(**{name: count for name, count in counts.items() if name != "round"})
        if not budgets.counted <= budgets.restarts <= budgets.attempt:
            raise ValueError(f"counted {budgets.counted}, restarts {budgets.restarts}, attempt {budgets.attempt}: "
                             "not counted <= restarts <= attempt")
        cap = ma.CONSECUTIVE_RESTART_CAP
        if not (budgets.user_streak <= min(budgets.counted, cap) and budgets.hang_streak <= min(budgets.restarts, cap)):
            raise ValueError(f"restarts in a row ({budgets.user_streak}, {budgets.hang_streak}) beyond the restarts")
        if not isinstance(data.get("running"), bool):
            raise ValueError(f"running: {_shown(data.get('running'))} is not true or false")
        began = data.get("began")
        if began is not None and not (
            isinstance(began, int | float) and not isinstance(began, bool) and 0 < began <= time.time()
        ):
            raise ValueError(f"began: {_shown(began)} is not a time past")
        return cls(budgets, counts["round"], data["running"], samples_from_json(data.get("learned")), began)


class StateStore:
    """The node's state in ``state.json``; ``agent.lock`` keeps a second agent off the same directory.

    A state belongs to one job (:mod:`hacfg.agent.records.identity`): it is taken over by the next agent of
    that job (after a pod or job reschedule, or the agent's own restart) until a final verdict,
    success or give-up, closes it. A closed state, or one of another job, is not taken over."""

    def __init__(self, directory: Path, job: str | None = None):
        self.directory = directory
        self.path = directory / STATE_FILE
        self.job = job  # the job's name on the platform, None when it has none
        self.key = b""  # the job's file key (records.sealed), known once the job's secret is
        self._lock_fd: int | None = None
        self.recovered: str | None = None  # what was wrong with the state file, if anything
        self.left: Left | None = None  # a state found but not taken over: closed, or another job's

    def acquire(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o755)
        owner = self.directory.stat().st_uid
        if owner != os.geteuid():
            whose = f"another user (uid {owner}, not {os.geteuid()})"
            raise InputError(
                f"the state folder belongs to {whose}: pass --state-dir a folder of your own", file=str(self.directory)
            )
        refuse_links(self.path)
        fd = open_unlinked(self.directory / LOCK_FILE, os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
            holder = holder if holder.isdigit() else "?"  # a PID, or what anyone who can write the folder put there
            os.close(fd)
            raise InputError(
                f"another hacfg agent (pid {holder}) is running on this state directory", file=str(self.directory)
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._lock_fd = fd

    def release(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def load(self) -> NodeState:
        """The saved state, including whether an attempt was running when the last agent stopped.
        Whose it is and whether it was closed are read first; its document is parsed only once its
        seal holds under this job's key."""
        try:
            found = sealed.read_file(self.path, "state", STATE_BYTES)
        except FileNotFoundError:
            return NodeState()
        except (OSError, sealed.Unsealed) as err:
            return self._unreadable(err)
        left = Left(found.words.get("job"), found.words.get("ended"))
        if left.ended or left.job != self.job:
            self.left = left
            return NodeState()
        try:
            return NodeState.from_json(untrusted.loads(found.open(self.key), limit=STATE_BYTES))
        except ValueError as err:  # Unsealed and Unreadable among them
            return self._unreadable(err)

    def _unreadable(self, err: OSError | ValueError) -> NodeState:
        reason = err.strerror if isinstance(err, OSError) and err.strerror else err
        self.recovered = f"state file unreadable ({untrusted.printable(reason)}); starting from zero"
        return NodeState()

    def describe_left(self) -> str:
        """One line on the state found and not taken over."""
        assert self.left is not None
        if self.left.job != self.job:
            whose = f"job {untrusted.printable(self.left.job)}" if self.left.job else "a job without a name"
            return f"the state in {self.directory} is of {whose}, not of this one; starting from zero"
        ended = untrusted.printable(self.left.ended)
        return f"the job that left the state in {self.directory} ended ({ended}); starting from zero"

    def save(self, state: NodeState, *, ended: str | None = None) -> None:
        """Write the state, sealed (a rename, which never follows a link; OSError on a full disk);
        ``ended``, the final verdict, closes it."""
        atomic_write(self.path, sealed.seal(self.key, "state", json.dumps(state.to_json()), job=self.job, ended=ended),
                     mode=PRIVATE)


@dataclass(frozen=True)
class Left:
    """A state found and not taken over: another job's, or closed by its job's final verdict."""

    job: str | None
    ended: str | None


def _shown(value: object) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def open_unlinked(path: Path, flags: int) -> int:
    """Open one of the agent's own files, refusing a symbolic link in its place with one clear line."""
    try:
        return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, PRIVATE)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise InputError(
                "is a symbolic link: the agent never writes through one in its state folder; remove it", file=str(path)
            ) from None
        raise


def refuse_links(*paths: Path) -> None:
    """Refuse, before anything is written, a symbolic link where one of the agent's files goes."""
    for path in paths:
        if path.is_symlink():
            raise InputError(
                "is a symbolic link: the agent never writes through one in its state folder; remove it", file=str(path)
            )


def stamp(when: datetime) -> str:
    """An event's time: UTC to the millisecond, so logs of several nodes sort as text."""
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def read_events(path: Path, damaged: Callable[[int], None] = lambda number: None) -> list[dict[str, Any]]:
    """Events from a log, read a line at a time. A line that is not a JSON object (a record torn by
    a crash), or longer than :data:`EVENT_BYTES` (read past, never held), is skipped and reported to
    ``damaged`` by its number; the next line is read as usual. A record without a valid time is not
    the agent's and is an error at its line."""
    events = []
    with open(path, "rb") as stream:
        for number, line in enumerate(_lines(stream, EVENT_BYTES), start=1):
            try:
                record = None if line is None else untrusted.loads(line.decode(errors="replace"), limit=EVENT_BYTES)
            except untrusted.Unreadable:
                record = None
            if not isinstance(record, dict):
                if line is None or line.strip():
                    damaged(number)
                continue
            wrong = _not_as_written(record)
            if wrong:
                raise InputError(f"not an agent event: {wrong}", Span(str(path), number, 1, number, 1))
            events.append(record)
    return events


def _lines(stream: BinaryIO, limit: int) -> Iterator[bytes | None]:
    """Each line of ``stream`` without its end; None for a line longer than ``limit`` bytes, which is
    read past a megabyte at a time: memory stays bounded however long a line is."""
    while line := stream.readline(limit + 1):
        if line.endswith(b"\n") or len(line) <= limit:
            yield line.removesuffix(b"\n").removesuffix(b"\r")
            continue
        while line and not line.endswith(b"\n"):
            line = stream.readline(1 << 20)
        yield None


def _zoned_time(value: object) -> bool | None:
    """Whether ``value`` is an ISO 8601 time with its zone (the agent writes UTC); None: no time at all."""
    try:
        return datetime.fromisoformat(str(value)).tzinfo is not None
    except ValueError:
        return None


def _checkpoints(value: object) -> bool:
    fields = {"step": int, "path": str, "time": str, "save_s": int | float}
    return isinstance(value, list) and all(
        isinstance(c, dict)
        and {"step", "path", "time"} <= c.keys()
        and _zoned_time(c["time"])
        and all(isinstance(c[k], kind) for k, kind in fields.items() if k in c)
        for c in value
    )


def _culprit(value: object) -> bool:
    """The shape ``Culprit.to_json`` writes: a node, its ranks, how it was named, its stack top."""
    stack = value.get("stack") if isinstance(value, dict) else None
    return (
        isinstance(value, dict)
        and isinstance(value.get("node"), int)
        and isinstance(value.get("ranks"), list)
        and all(isinstance(rank, int) for rank in value["ranks"])
        and isinstance(value.get("how"), str)
        and (stack is None or (isinstance(stack, list) and all(isinstance(frame, str) for frame in stack)))
    )


# The fields the readers (hacfg events, goodput, the metrics, what plan measures) compute with, as
# the agent writes them; None stands for "not known" in any of them.
_FIELDS: dict[str, tuple[Callable[[object], bool], str]] = {
    **dict.fromkeys(
        ("node", "round", "attempt", "exit_code", "pid", "step", "cause_node", "counted", "max_restarts", "rank"),
        (lambda v: isinstance(v, int), "a whole number"),
    ),
    **dict.fromkeys(
        ("after", "idle", "timeout", "duration", "stopping", "gathering"),
        (lambda v: isinstance(v, int | float), "seconds"),
    ),
    **dict.fromkeys(("slowdown", "score"), (lambda v: isinstance(v, int | float), "a number")),
    **dict.fromkeys(
        ("event", "cause", "action", "reason", "resume_from", "resume_tier", "signal", "start", "start_reason", "phase",
         "culprit_note"),
        (lambda v: isinstance(v, str), "text"),
    ),
    "progressed": (lambda v: isinstance(v, bool), "true or false"),
    "checkpoints": (_checkpoints, "checkpoints, each with its step, path and zoned time"),
    "since": (lambda v: bool(_zoned_time(v)), "a zoned time"),
    "culprit": (_culprit, "a culprit: its node, ranks, how and stack"),
}


def _not_as_written(record: dict[str, Any]) -> str | None:
    """What in a record the agent would not have written, or None."""
    zoned = _zoned_time(record.get("time"))
    if not zoned:
        return 'no valid ISO 8601 "time"' if zoned is None else '"time" has no time zone'
    for key, (check, expected) in _FIELDS.items():
        if record.get(key) is not None and not check(record[key]):
            return f"{key}: expected {expected}, got {_shown(record[key])}"
    return None
