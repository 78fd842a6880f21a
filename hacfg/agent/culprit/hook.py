"""What a hung rank can tell about itself: installed in the training's own interpreter, cold or warm.

This file runs inside the user's interpreter, loaded by path (by the ``sitecustomize`` beside it
on a cold start, by the warm interpreter before it runs a forked attempt), so it imports the
standard library only. With ``HACFG_EVIDENCE_DIR`` set, :func:`install` leaves, per process:

- ``<pid>.stacks``: every thread's Python stack, appended by :mod:`faulthandler` each time the
  process receives :data:`STACKS_SIGNAL`. The dump is written by a C signal handler, so it comes
  even when the main thread is blocked in a collective or a C extension holds the GIL.
- ``<pid>.fifo``: its presence says the hook is installed (only then may the agent send the
  signal, whose default action would end the process). Opening it for writing wakes a thread
  that writes into ``<pid>.answer``, a pipe the agent holds open for reading: the rank, the world
  size and the tail of each of torch's flight recorders (the collectives each process group
  enqueued, started and completed), taken without stack symbolisation in about a millisecond per
  recorder. A pipe, not a file: another process of the same user could replace a file between the
  answer and its reading, where every byte written into the pipe reaches the agent, so an answer
  written over is two answers, and seen as such.

torch keeps more than one recorder, and which depends on the build: NCCL's own
(``_dump_nccl_trace_json``, in CUDA builds, empty for gloo groups) and the generic one
(``_dump_fr_trace_json``), which gloo records into with no setting, as does any backend a
``FlightRecorderHook`` is attached to. From torch 2.15 the generic one is kept per backend (its
``backend`` argument, ``"gloo"`` by default); before, there is one. XCCL's is read from its
process groups (``_dump_xccl_trace_json``, in XPU builds). torch_npu keeps HCCL's beside torch's
(``torch_npu._C._distributed_c10d._dump_hccl_trace_json``, the same JSON as NCCL's), read when the
script imported torch_npu. Every one there is, is read.

Nothing runs until the agent asks: the steady-state cost is one parked thread and a signal handler.
"""

from __future__ import annotations

import errno
import faulthandler
import functools
import io
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

ENV = "HACFG_EVIDENCE_DIR"
STACKS_SIGNAL = signal.SIGRTMIN + 4  # unlikely to be taken: SIGUSR1/2 often are (SLURM, elastic agents)
ENTRIES = 16  # the flight recorder's newest entries kept: enough to show where each rank stopped
GENERIC = ""  # torch's generic recorder before 2.15, one for every backend without a recorder of its own
NATIVE = ("nccl", "xccl", "hccl")  # backends that keep a recorder of their own
_stacks: io.TextIOWrapper | None = None  # the open stacks file: faulthandler writes to its descriptor


def install() -> None:
    """Arm this process, if the agent asked for evidence (``HACFG_EVIDENCE_DIR``); never raises."""
    global _stacks
    folder = os.environ.get(ENV)
    if not folder:
        return
    pid = os.getpid()
    try:
        _stacks = open(os.path.join(folder, f"{pid}.stacks"), "w")  # noqa: SIM115  # lives with the process
        faulthandler.register(STACKS_SIGNAL, file=_stacks, all_threads=True, chain=False)
        answer = os.path.join(folder, f"{pid}.answer")
        fifo = os.path.join(folder, f"{pid}.fifo")
        for pipe in (answer, fifo):  # the request pipe last: its presence says the hook is ready
            if not os.path.exists(pipe):
                os.mkfifo(pipe, 0o600)
    except (OSError, ValueError, RuntimeError):
        return  # evidence is a help, never a reason for training to fail
    threading.Thread(target=_answer, args=(fifo, answer), daemon=True, name="hacfg-evidence").start()


def _answer(fifo: str, answer: str) -> None:
    """Park on the request pipe; each time the agent opens it, write what the process knows into the
    answer pipe the agent reads. SIGPIPE is blocked in this thread: an agent that stopped reading
    makes the write fail, never ends the process (a script may have set SIGPIPE's default action)."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGPIPE})
    while True:
        try:
            with open(fifo, "rb") as request:  # blocks, without waking, until a writer opens
                question = request.read(64).decode("ascii", "replace")
            _reply(answer, json.dumps({**collective_state(), "question": question}).encode())
        except OSError:
            return  # the folder is gone: the attempt is over


def _reply(answer: str, state: bytes) -> None:
    """Write ``state`` into the answer pipe; nothing when no one reads it (the asker gave up)."""
    try:
        out = os.open(answer, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as err:
        if err.errno == errno.ENXIO:
            return
        raise
    try:
        os.set_blocking(out, True)
        view = memoryview(state)
        while view:
            view = view[os.write(out, view) :]
    except BrokenPipeError:
        pass
    finally:
        os.close(out)


def collective_state() -> dict[str, object]:
    """This rank's place in its job and the newest entries of each of torch's flight recorders."""
    state: dict[str, object] = {"pid": os.getpid(), "taken": time.time(), "rank": _env_int("RANK"), "world": None}
    dist = sys.modules.get("torch.distributed")  # never imported here: only if the script did
    try:
        if dist is None or not dist.is_available() or not dist.is_initialized():
            return state
        state["rank"], state["world"] = dist.get_rank(), dist.get_world_size()
        recorders: dict[str, object] = {}
        for name, dump in _recorders(dist):
            trace = _status_by_name(json.loads(dump()))
            for backend, groups in _owners(dist, name, trace).items():
                recorders[backend] = {
                    "pg_status": {g: v for g, v in (trace.get("pg_status") or {}).items() if g in groups},
                    "entries": [e for e in trace.get("entries") or [] if _group(e) in groups][-ENTRIES:],
                }
        state["flight_recorders"] = recorders
    except Exception as err:  # a torch without the recorder, or one that refuses: say so
        state["flight_recorder_error"] = f"{type(err).__name__}: {err}"
    return state


def _recorders(dist: Any) -> list[tuple[str, Callable[[], Any]]]:
    """Each flight recorder this torch keeps, by the backend that records into it, as a call that
    dumps its JSON (collectives included, finished ones too)."""
    from torch._C import _distributed_c10d as c10d

    found: dict[str, Callable[[], Any]] = {}
    options = {"includeCollectives": True, "onlyActive": False}
    if (nccl := getattr(c10d, "_dump_nccl_trace_json", None)) is not None:
        found["nccl"] = functools.partial(nccl, **options)
    npu = getattr(sys.modules.get("torch_npu"), "_C", None)  # never imported here: only if the script did
    if (hccl := getattr(getattr(npu, "_distributed_c10d", None), "_dump_hccl_trace_json", None)) is not None:
        found["hccl"] = functools.partial(hccl, **options)
    for backend in _backend_objects(dist):  # a native recorder reached through its backend's object (XCCL's)
        for attribute in dir(type(backend)):
            name = attribute[len("_dump_") : -len("_trace_json")]
            if attribute.startswith("_dump_") and attribute.endswith("_trace_json") and name not in found:
                found[name] = functools.partial(getattr(backend, attribute), **options)
    if (generic := getattr(c10d, "_dump_fr_trace_json", None)) is not None:
        if "backend" in (generic.__doc__ or "").partition("\n")[0]:  # one per backend (torch >= 2.15)
            for name in sorted({"gloo", *(name for names in _backends(dist).values() for name in names)}):
                found.setdefault(name, functools.partial(generic, backend=name, **options))
        else:  # one for all: gloo's, and any hooked backend's
            found[GENERIC] = functools.partial(generic, **options)
    return sorted(found.items())


def _backends(dist: Any) -> dict[str, list[str]]:
    """Per process group (by name), the names of its backends: ``cpu:gloo,cuda:nccl`` is gloo and nccl."""
    return {
        str(group.group_name): [part.rpartition(":")[2] for part in str(dist.get_backend(group)).split(",")]
        for group in _groups(dist)
    }


def _owners(dist: Any, recorder: str, trace: dict[str, Any]) -> dict[str, set[str]]:
    """The process groups in a recorder's dump, by the backend that recorded them. A recorder kept
    for one backend holds only its groups; torch's generic one before 2.15 held every backend's
    without a native recorder (gloo's, a hooked one's): each group is its backend's."""
    groups = {*(trace.get("pg_status") or {}), *map(_group, trace.get("entries") or [])}
    if recorder != GENERIC:
        return {recorder: groups}
    backends = _backends(dist)
    owners: dict[str, set[str]] = {}
    for group in groups:
        names = [name for name in backends.get(group, ()) if name not in NATIVE] or ["gloo"]
        owners.setdefault(names[0], set()).add(group)
    return owners


def _status_by_name(trace: dict[str, Any]) -> dict[str, Any]:
    """The dump with ``pg_status`` keyed by group name, as its entries are. torch keys it by group id,
    the same as the name for torch's own groups ("0", "1"), not for torch_npu's ("group_name_0")."""
    names = {str(entry.get("pg_id")): _group(entry) for entry in trace.get("entries") or []}
    return {**trace, "pg_status": {names.get(key, key): value for key, value in (trace.get("pg_status") or {}).items()}}


def _group(entry: dict[str, Any]) -> str:
    """The name of the process group a recorder's entry belongs to."""
    return str((entry.get("process_group") or [entry.get("pg_id")])[0])


def _backend_objects(dist: Any) -> list[Any]:
    """The backend objects of every process group, one per device type each serves."""
    found = []
    for group in _groups(dist):
        for device in getattr(group, "_device_types", ()):
            try:
                found.append(group._get_backend(device))
            except (RuntimeError, ValueError, AttributeError):
                continue
    return found


def _groups(dist: Any) -> list[Any]:
    """The job's process groups: every one torch's registry holds, else the default one."""
    world = getattr(getattr(dist, "distributed_c10d", None), "_world", None)
    groups = list(getattr(world, "pg_map", {}) or {})
    return groups or [dist.group.WORLD]


def _env_int(name: str) -> int | None:
    value = os.environ.get(name, "")
    return int(value) if value.isdigit() else None
