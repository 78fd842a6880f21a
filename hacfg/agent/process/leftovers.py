"""One trainer at a time: what an earlier agent on the same state folder left running is ended
before a new attempt starts.

``PR_SET_PDEATHSIG`` reaches only the agent's direct child: after a ``kill -9`` of the agent, the
trainer under ``sh -c`` or ``bash run.sh``, and anything it moved to a session of its own with
``setsid``, would keep writing the checkpoint folder while the next agent starts a second copy.
So every process of an attempt carries ``HACFG_AGENT_TREE`` (one value per state folder) in its
environment, which ``sh``, ``setsid`` and double forks pass on, and the attempt's session is
recorded in the state folder (``attempt.json``: session id, its start time, the boot), sealed
with the job's key (:mod:`hacfg.agent.records.sealed`), so that a record someone else wrote never
names a session for the agent to kill. A new agent, holding the folder's lock, kills every process
that carries the mark or belongs to the recorded session, checking start times so that a reused
PID is never touched.

A process that both leaves the session and clears its environment (``setsid env -i ...``) is
out of reach; the container's end (a pod restart) still ends it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import select
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from hacfg import untrusted
from hacfg.agent.records import sealed
from hacfg.fsutil import atomic_write

TREE_ENV = "HACFG_AGENT_TREE"
RECORD = "attempt.json"
RECORD_BYTES = 4096
WAIT = 10.0  # seconds to wait for killed processes to be gone


def tree_mark(state_dir: Path) -> str:
    """The mark every process of this state folder's attempts carries: the same for every agent on it."""
    return hashlib.sha256(str(state_dir.resolve()).encode()).hexdigest()[:32]


@dataclass(frozen=True)
class Proc:
    pid: int
    session: int
    start: int  # clock ticks after boot (/proc/PID/stat field 22): with the PID, one process for good


def read_proc(pid: int) -> Proc | None:
    """The process ``pid`` as /proc shows it; None once it is gone (or a zombie: nothing left to end)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except OSError:
        return None
    fields = stat[stat.rfind(b")") + 2 :].split()
    if fields[0] in (b"Z", b"X"):
        return None
    return Proc(pid, int(fields[3]), int(fields[19]))


def boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def remember(state_dir: Path, pid: int, key: bytes) -> None:
    """Record the attempt's session (its leader is ``pid``, started with a session of its own), sealed with ``key``."""
    found = read_proc(pid)
    if found is not None:
        record = {"session": found.session, "start": found.start, "boot": boot_id()}
        atomic_write(state_dir / RECORD, sealed.seal(key, "attempt", json.dumps(record)), mode=0o600)


def leftovers(state_dir: Path, key: bytes) -> list[Proc]:
    """Every live process of an earlier attempt on ``state_dir``: carrying its mark or in its recorded session."""
    mark = f"\0{TREE_ENV}={tree_mark(state_dir)}\0".encode()
    session = _recorded_session(state_dir, key)
    me = os.getpid()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        proc = read_proc(int(entry))
        if proc is None:
            continue
        in_session = session is not None and proc.session == session.session and proc.start >= session.start
        if in_session or mark in _environment(proc.pid):
            found.append(proc)
    return found


def in_attempt(pid: int) -> bool:
    """Whether process ``pid`` belongs to some agent's attempt: a trainer, or anything it started."""
    return f"\0{TREE_ENV}=".encode() in _environment(pid)


def end_leftovers(state_dir: Path, key: bytes) -> list[int]:
    """Kill what earlier attempts on ``state_dir`` left running and wait until it is gone; their PIDs.
    ``key``: the job's file key, which the record of the last attempt's session was sealed with."""
    killed: list[tuple[int, int]] = []
    for proc in leftovers(state_dir, key):
        try:
            pidfd = os.pidfd_open(proc.pid)
        except OSError:
            continue  # gone already
        again = read_proc(proc.pid)  # the pidfd holds this very process: a reused PID cannot slip in
        try:
            if again is None or again.start != proc.start:
                raise ProcessLookupError(proc.pid)
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        except OSError:
            os.close(pidfd)
            continue
        killed.append((proc.pid, pidfd))
    deadline = time.monotonic() + WAIT
    for _, pidfd in killed:
        select.select([pidfd], [], [], max(0.0, deadline - time.monotonic()))  # readable once it has exited
        os.close(pidfd)
    with contextlib.suppress(OSError):
        (state_dir / RECORD).unlink()
    return [pid for pid, _ in killed]


def _recorded_session(state_dir: Path, key: bytes) -> Proc | None:
    """The session of the last attempt, if recorded by this job's agent on this boot and its ID was
    not reused since. A record not sealed with ``key``, or not as the agent writes it, names none."""
    try:
        found = sealed.read_file(state_dir / RECORD, "attempt", RECORD_BYTES)
        record = untrusted.loads(found.open(key), limit=RECORD_BYTES)
        numbers = [record["session"], record["start"]]
        if not all(isinstance(n, int) and not isinstance(n, bool) and 0 < n < 1 << 63 for n in numbers):
            return None
        if record["boot"] != boot_id():
            return None
    except (OSError, ValueError, KeyError, TypeError):
        return None
    session = Proc(record["session"], record["session"], record["start"])
    leader = read_proc(session.pid)
    if leader is not None and leader.start != session.start:
        return None  # the leader's PID now names another process, so the session ID may too
    return session


def _environment(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            return b"\0" + handle.read()
    except OSError:  # another user's process, or gone
        return b""
