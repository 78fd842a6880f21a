"""The agent's side of the evidence: arm the attempt's processes, ask them when a hang is declared,
and keep what they said under the node's state folder (``evidence/attempt-N/``).

Asking is a signal for the stacks and a write to a pipe for the flight recorder (see :mod:`hook`),
sent only to processes that armed themselves; a stopped process cannot answer, and /proc says it
is stopped. Whatever has not answered by the deadline is left out of the summary, whose ranks
then say what was seen of them, so the verdict can say what it does not know.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import re
import secrets
import select
import shutil
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from hacfg import untrusted
from hacfg.agent.culprit import hook
from hacfg.agent.culprit.analysis import GONE, STOPPED, ZOMBIE, NodeEvidence, RankEvidence
from hacfg.fsutil import atomic_write

FOLDER = "evidence"
SUMMARY = "summary.json"
SITE = Path(__file__).with_name("site")
DEADLINE = 2.0  # seconds from the request to the summary, whatever has not answered
KEEP = 3  # attempts whose evidence is kept
READ_BYTES = 4 << 20  # of a rank's answer or a node's summary: the ranks can write the folder
_ASKED: collections.deque[str] = collections.deque(maxlen=64)  # the newest questions: a late answer is no forgery
NODES = 1 << 16  # a summary of a node numbered higher is no job's
FRAMES = 8  # of each stack, in the summary sent to node 0
FR_BUFFER = "TORCH_FR_BUFFER_SIZE"  # the flight recorder's ring of entries (NCCL's and gloo's)
HCCL_BUFFER = "TORCH_HCCL_TRACE_BUFFER_SIZE"  # torch_npu's HCCL recorder's: 0, so off, unless set
RECORDED = 4 * hook.ENTRIES
SETTLE = 0.05  # seconds for the hook's thread to park again between its answer and the stacks signal
_STATES = {"R": "running", "S": "sleeping", "D": "disk", "T": STOPPED, "t": STOPPED, "Z": ZOMBIE, "X": GONE}
_FRAME = re.compile(r'\s+File "(?P<file>.*)", line (?P<line>\d+) in (?P<func>.*)')


def folder_for(state_dir: Path, attempt: int) -> Path:
    """This attempt's evidence folder, fresh; older attempts' beyond the newest few are removed."""
    root = state_dir / FOLDER
    folder = root / f"attempt-{attempt}"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True, mode=0o700)
    older = sorted((p for p in root.glob("attempt-*") if p != folder), key=lambda p: _number(p.name))
    for stale in older[: max(0, len(older) - (KEEP - 1))]:
        shutil.rmtree(stale, ignore_errors=True)
    return folder


def armed(env: dict[str, str], folder: Path) -> dict[str, str]:
    """The command's environment with the hook armed: every Python process it starts loads it.

    torch's flight recorder keeps 2,000 entries unless told otherwise, and a dump serialises all
    of them (0.1-0.3 s on a loaded CPU, holding the GIL for the parse): too slow to sample every
    second. The hook reads only the newest few, so the buffer is cut to :data:`RECORDED` (a dump
    then takes about 2 ms), unless the job sized it itself. torch_npu's HCCL recorder keeps
    nothing unless its buffer is sized (``ProcessGroupHCCL``'s ``TORCH_HCCL_TRACE_BUFFER_SIZE``,
    default 0): it is sized the same, unless the job did; only torch_npu reads it."""
    path = [str(SITE), *filter(None, [env.get("PYTHONPATH")])]
    buffer = {} if {"TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"} & env.keys() else {FR_BUFFER: str(RECORDED)}
    hccl = {} if HCCL_BUFFER in env else {HCCL_BUFFER: str(RECORDED)}
    return {**env, **buffer, **hccl, hook.ENV: str(folder), "PYTHONPATH": os.pathsep.join(path)}


def collect(
    session: int, folder: Path, node: int, step: int | None, deadline: float = DEADLINE, py_spy: str | None = None
) -> NodeEvidence:
    """Ask every armed process of the attempt (its ``session`` and their descendants); what they
    and /proc said by the deadline. With ``py_spy`` (its executable), the ranks that gave no stack
    (a stopped one cannot run its handler) are dumped from outside, within the same deadline."""
    until = time.monotonic() + deadline
    pids = _attempt(session)
    armed = [pid for pid in pids if _state(pid) != STOPPED and (folder / f"{pid}.fifo").exists()]
    asked = {pid: _size(folder / f"{pid}.stacks") for pid in armed}  # the stacks files' sizes before
    # The flight recorder first, the stacks after: faulthandler walks every thread's frames from a
    # signal handler, safe only for threads that stand still, and the hook's thread runs while it
    # answers (a rank was seen to crash that way). Once it has answered, it parks again at once.
    answers = ask(folder, armed, time.monotonic() + deadline / 2)
    time.sleep(SETTLE if armed else 0)
    for pid in armed:
        with contextlib.suppress(OSError):
            os.kill(pid, hook.STACKS_SIGNAL)
    _wait_until(lambda: all(_dumped(folder, pid, size) for pid, size in asked.items()), until)
    ranks = [rank for pid in pids if (rank := _rank(folder, pid, asked.get(pid), answers.get(pid))) is not None]
    if py_spy is not None:
        ranks = _spied(py_spy, ranks, folder, until)
    evidence = NodeEvidence(node, tuple(ranks), step)
    with contextlib.suppress(OSError):
        atomic_write(folder / SUMMARY, json.dumps(evidence.to_json(), indent=1) + "\n")
    return evidence


def arrivals(folder: Path, deadline: float = DEADLINE / 4) -> dict[int, list[list[int | str]]]:
    """Per rank of the attempt, the collectives its flight recorders hold and when the rank enqueued
    each: ``[process group, sequence number, ns]``, the group as :func:`group_key` names it. Only
    the pipe is poked, never the stacks signal: this runs while training goes on, every second, so
    the armed processes are found from their pipes in the attempt's ``folder``, not from all of
    /proc. A rank that has not answered by the deadline is left out of this sample."""
    armed = [pid for pid in _piped(folder) if _state(pid) not in (STOPPED, ZOMBIE, GONE)]
    answers = ask(folder, armed, time.monotonic() + deadline)
    found: dict[int, list[list[int | str]]] = {}
    for answer in answers.values():
        if isinstance(answer, str) or not isinstance(answer.get("rank"), int):
            continue
        found[answer["rank"]] = [
            [group, int(e["collective_seq_id"]), int(e["time_created_ns"])]
            for group, e in _entries(answer.get("flight_recorders"))
            if not e.get("is_p2p") and e.get("time_created_ns")
        ]
    return found


def ask(folder: Path, pids: Iterable[int], until: float) -> dict[int, dict[str, Any] | str]:
    """Each armed process's answer by ``until``, read from the pipe it writes into (see :mod:`hook`), or
    why it is not believed. The question is a fresh random word the hook echoes; every byte any process
    writes into the pipe reaches this reader, so an answer written over is a second answer to it.
    Processes that said nothing are left out."""
    readers: dict[int, int] = {}  # descriptor -> pid
    for pid in pids:
        with contextlib.suppress(OSError):
            readers[os.open(folder / f"{pid}.answer", os.O_RDONLY | os.O_NONBLOCK)] = pid
    question = secrets.token_hex(8)
    _ASKED.append(question)
    unasked = set(readers.values())  # a hook busy with the last question is not yet parked to hear the next
    said: dict[int, bytearray] = {pid: bytearray() for pid in readers.values()}
    poller = select.poll()
    for descriptor in readers:
        poller.register(descriptor, select.POLLIN)
    ended: list[int] = []
    try:
        while len(ended) < len(readers) and (left := until - time.monotonic()) > 0:
            unasked = {pid for pid in unasked if not _poke(folder / f"{pid}.fifo", question)}
            for descriptor, _ in poller.poll(min(left, 0.01 if unasked else left) * 1000):
                chunk = os.read(descriptor, 1 << 16)
                said[readers[descriptor]] += chunk
                if not chunk or len(said[readers[descriptor]]) > READ_BYTES:  # every writer closed, or too much
                    poller.unregister(descriptor)
                    ended.append(readers[descriptor])
    finally:
        for descriptor in readers:
            os.close(descriptor)
    found: dict[int, dict[str, Any] | str] = {}
    for pid, text in said.items():
        believed = _believed(bytes(text), pid, question, set(_ASKED)) if text else None
        if pid not in ended and isinstance(believed, str) and believed.startswith("its answer is unreadable"):
            believed = "its answer did not end by the deadline: another process may hold its pipe open"
        if believed is not None:
            found[pid] = believed
    return found


def _believed(said: bytes, pid: int, question: str, asked: set[str]) -> dict[str, Any] | str:
    """Process ``pid``'s answer to ``question``, if exactly one came and nothing but answers to questions
    this agent asked before (a late one) came beside it; else why not."""
    try:
        answers = untrusted.documents(said, limit=READ_BYTES)
    except untrusted.Unreadable as err:
        return f"its answer is unreadable: {err}"
    if not all(isinstance(answer, dict) and answer.get("pid") == pid for answer in answers):
        return "its pipe carried another process's answer, or something else"
    mine: list[dict[str, Any]] = [answer for answer in answers if answer.get("question") == question]
    if len(mine) != 1 or not all(str(answer.get("question")) in asked for answer in answers):
        return "its answer was written over: more than one answer to this question came through its pipe"
    return mine[0]


def _rank(folder: Path, pid: int, size: int | None, said: dict[str, Any] | str | None) -> RankEvidence | None:
    """What one process showed; None for a process that is no rank (a launcher, a shell, a loader)."""
    state = _state(pid)
    if size is None and state != STOPPED:
        return None  # not armed: not Python, or not ours
    answer, doubt = (None, said) if isinstance(said, str) else (said, None)
    claimed = answer.get("rank") if answer else None
    numbered = type(claimed) is int and claimed >= 0
    if answer is not None and not numbered and state != STOPPED:
        return None  # no rank (a launcher's Python), or no number a rank has
    rank = claimed if numbered else _environ_rank(pid)
    stack = _main_stack(_read_from(folder / f"{pid}.stacks", size or 0))
    recorders = answer.get("flight_recorders") if answer else None
    collectives, last_op, history = _collectives(recorders)
    read = tuple(sorted(recorders)) if isinstance(recorders, dict) else None
    done = _status(recorders, "last_completed_collective") if recorders else None
    by = "the rank" if stack else None
    return RankEvidence(rank, pid, state, stack[:FRAMES], collectives, last_op, history, read, done, doubt, by)


def _spied(py_spy: str, ranks: list[RankEvidence], folder: Path, until: float) -> list[RankEvidence]:
    """The ranks, those without a stack given one by ``py-spy dump --nonblocking`` (it reads the
    process's memory without stopping it, so a stopped process is read as it stands); its output
    is kept as ``<pid>.py-spy``. A dump that fails or outlasts the deadline leaves the rank as it was."""
    dumps = {}
    for rank in ranks:
        if not rank.stack and rank.state not in (GONE, ZOMBIE):
            with contextlib.suppress(OSError), open(folder / f"{rank.pid}.py-spy", "wb") as out:
                argv = [py_spy, "dump", "--nonblocking", "--pid", str(rank.pid)]
                dumps[rank.pid] = subprocess.Popen(argv, stdout=out, stderr=subprocess.DEVNULL)
    for proc in dumps.values():
        try:
            proc.wait(max(0.0, until - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    spied = {pid for pid, proc in dumps.items() if proc.returncode == 0}
    stacks = {pid: _py_spy_stack(_read_from(folder / f"{pid}.py-spy", 0), pid)[:FRAMES] for pid in spied}
    return [replace(rank, stack=stacks[rank.pid], stack_by="py-spy") if rank.pid in spied else rank for rank in ranks]


def _py_spy_stack(dump: str, pid: int) -> tuple[str, ...]:
    """The main thread's frames from ``py-spy dump``, innermost first: the thread whose id is the
    process's (py-spy shows the native ids), else the first."""
    threads: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in dump.splitlines():
        if line.startswith("Thread "):
            current = threads.setdefault(line.split()[1], [])
        elif current is not None and line.startswith("    ") and line.strip():
            current.append(line.strip())
    main = threads.get(str(pid)) or next(iter(threads.values()), [])
    return tuple(main)


def group_key(group: object, recorder: str) -> str:
    """A process group as one recorder saw it: ``0 (gloo)``. One group served by two backends
    (``cpu:gloo,cuda:nccl``) numbers each backend's collectives apart, so each is a group of its own."""
    return f"{group} ({recorder})"


def _entries(recorders: Mapping[str, Any] | None) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every recorder's entries, each with the process group it belongs to (:func:`group_key`)."""
    for name, recorder in sorted((recorders or {}).items()):
        for entry in (recorder or {}).get("entries") or []:
            yield group_key((entry.get("process_group") or [entry.get("pg_id")])[0], name), entry


def _collectives(
    recorders: Mapping[str, Any] | None,
) -> tuple[dict[str, int] | None, str | None, dict[str, tuple[str, ...]] | None]:
    """From every flight recorder the rank has, merged per process group: the newest collective
    each group enqueued (torch's ``pg_status``); the newest collective's name; and per group, the
    names of its newest collectives in order, as far back as the recorder's entries run without a gap."""
    if not recorders:
        return None, None, None
    counts = _status(recorders, "last_enqueued_collective")
    entries = list(_entries(recorders))
    names: dict[str, dict[int, str]] = {}
    for group, entry in entries:
        seq = entry.get("collective_seq_id")
        if entry.get("is_p2p") or not isinstance(seq, int):
            continue  # point-to-point calls are numbered apart
        names.setdefault(group, {})[seq] = str(entry.get("profiling_name"))
    history = {}
    for group, by_seq in names.items():
        seq, run = max(by_seq), []
        while seq in by_seq:
            run.append(by_seq[seq])
            seq -= 1
        history[group] = tuple(reversed(run))
    # the newest entry that names its collective, across the recorders (HCCL's name none: torch_npu
    # records an empty profiling_name); within one recorder, the later in its ring
    named = [i for i, (_, entry) in enumerate(entries) if entry.get("profiling_name")]
    newest = max(named, key=lambda i: (entries[i][1].get("time_created_ns") or 0, i), default=None)
    return counts, str(entries[newest][1]["profiling_name"]) if newest is not None else None, history


def _status(recorders: Mapping[str, Any], field: str) -> dict[str, int]:
    """Per process group, a number torch's ``pg_status`` keeps: the newest collective enqueued, or completed."""
    return {
        group_key(group, name): int(status.get(field, -1))
        for name, recorder in recorders.items()
        for group, status in ((recorder or {}).get("pg_status") or {}).items()
    }


def _main_stack(dump: str) -> tuple[str, ...]:
    """The main thread's frames from a faulthandler dump, innermost first: the thread that runs the
    script's ``<module>``, else the first that is not the hook's."""
    threads: list[list[str]] = []
    for line in dump.splitlines():
        if line.startswith(("Thread 0x", "Current thread 0x")):
            threads.append([])
        elif (frame := _FRAME.match(line)) and threads:
            threads[-1].append(f"{frame['func']} ({frame['file']}:{frame['line']})")
    ours = [thread for thread in threads if thread and not any("_answer (" in frame for frame in thread)]
    main = next((thread for thread in ours if thread[-1].startswith("<module> ")), ours[0] if ours else [])
    return tuple(main)


def _wait_until(done: Callable[[], bool], until: float) -> None:
    while not done() and time.monotonic() < until:
        time.sleep(0.02)


def _dumped(folder: Path, pid: int, size: int) -> bool:
    return _state(pid) in (GONE, ZOMBIE) or _size(folder / f"{pid}.stacks") > size


def _poke(fifo: Path, question: str) -> bool:
    """Ask the hook's thread ``question`` through its pipe, without blocking if no one reads it; whether
    it was there to hear."""
    try:
        descriptor = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:
        return False
    with contextlib.suppress(OSError):
        os.write(descriptor, question.encode())
    os.close(descriptor)
    return True


def _piped(folder: Path) -> list[int]:
    """The processes that armed themselves in ``folder``, each by its ``<pid>.fifo``; some may have exited since."""
    with contextlib.suppress(OSError), os.scandir(folder) as entries:
        names = [entry.name.removesuffix(".fifo") for entry in entries if entry.name.endswith(".fifo")]
        return [int(name) for name in names if name.isdigit()]
    return []


def _attempt(session: int) -> list[int]:
    """The session's processes and every descendant of theirs: a launcher may start its workers in
    sessions of their own (torchrun's elastic agent does, to signal each one's group), and they
    are the attempt's all the same."""
    stats = {pid: fields for pid in _pids() if len(fields := _stat(pid)) > 3}
    children: dict[int, list[int]] = {}
    for pid, fields in stats.items():
        children.setdefault(int(fields[1]), []).append(pid)
    found = {pid for pid, fields in stats.items() if fields[3] == str(session)}
    todo = list(found)
    while todo:
        fresh = [child for child in children.get(todo.pop(), []) if child not in found]
        found.update(fresh)
        todo += fresh
    return sorted(found)


def _pids() -> Iterable[int]:
    return (int(entry) for entry in os.listdir("/proc") if entry.isdigit())


def _stat(pid: int) -> list[str]:
    """The fields of /proc/PID/stat after the command name: state, ppid, pgrp, session, ..."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            raw = handle.read()
    except OSError:
        return []
    return raw[raw.rfind(b")") + 2 :].decode("ascii", "replace").split()


def _state(pid: int) -> str:
    fields = _stat(pid)
    return _STATES.get(fields[0], fields[0]) if fields else GONE


def _environ_rank(pid: int) -> int | None:
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    found = next((entry[5:] for entry in environ if entry.startswith(b"RANK=")), b"")
    return int(found) if found.isdigit() else None


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _read_from(path: Path, offset: int) -> str:
    try:
        return untrusted.head(path, 1 << 20, offset).decode("utf-8", "replace")
    except (OSError, ValueError):
        return ""


def _number(name: str) -> int:
    digits = name.rpartition("-")[2]
    return int(digits) if digits.isdigit() else -1


def read_summaries(folder: Path) -> dict[str, list[NodeEvidence]]:
    """Every hang's summaries under ``folder`` (a job's ``.hacfg``, a node's state folder, one
    attempt's evidence), by attempt folder name. A summary that is not one the agent writes (the
    ranks can write the folder: any size, any nesting, any types) is skipped."""
    found: dict[str, list[NodeEvidence]] = {}
    for path in sorted(folder.rglob(SUMMARY), key=lambda p: (_number(p.parent.name), str(p))):
        try:
            evidence = NodeEvidence.from_json(untrusted.read(path, limit=READ_BYTES))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
        if not 0 <= evidence.node < NODES:
            continue  # the analysis counts the nodes of the job from the highest one
        found.setdefault(path.parent.name, []).append(evidence)
    return found
