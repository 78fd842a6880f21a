"""What a hung rank can tell about itself: installed in the training's own interpreter, cold or warm.

This file runs inside the user's interpreter, loaded by path (by the ``sitecustomize`` beside it
on a cold start, by the warm interpreter before it runs a forked attempt), so it imports the
standard library only. With ``HACFG_EVIDENCE_DIR`` set, :func:`install` leaves, per process:

- ``<pid>.stacks``: every thread's Python stack, appended by :mod:`faulthandler` each time the
  process receives :data:`STACKS_SIGNAL`. The dump is written by a C signal handler, so it comes
  even when the main thread is blocked in a collective or a C extension holds the GIL.
- ``<pid>.fifo``: its presence says the hook is installed (only then may the agent send the
  signal, whose default action would end the process). Opening it for writing wakes a thread
  that writes ``<pid>.json``: the rank, the world size and the tail of torch's flight recorder
  (the collectives each process group enqueued, started and completed; gloo records them with no
  setting, NCCL too), taken without stack symbolisation in about a millisecond.

Nothing runs until the agent asks: the steady-state cost is one parked thread and a signal handler.
"""

from __future__ import annotations

import faulthandler
import io
import json
import os
import signal
import sys
import threading
import time

ENV = "HACFG_EVIDENCE_DIR"
STACKS_SIGNAL = signal.SIGRTMIN + 4  # unlikely to be taken: SIGUSR1/2 often are (SLURM, elastic agents)
ENTRIES = 16  # the flight recorder's newest entries kept: enough to show where each rank stopped
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
        fifo = os.path.join(folder, f"{pid}.fifo")
        if not os.path.exists(fifo):
            os.mkfifo(fifo, 0o600)
    except (OSError, ValueError, RuntimeError):
        return  # evidence is a help, never a reason for training to fail
    threading.Thread(target=_answer, args=(fifo, os.path.join(folder, f"{pid}.json")), daemon=True,
                     name="hacfg-evidence").start()


def _answer(fifo: str, out: str) -> None:
    """Park on the pipe; each time the agent opens it, write what the process knows."""
    while True:
        try:
            with open(fifo, "rb") as request:  # blocks, without waking, until a writer opens
                request.read()
            state = collective_state()
            staging = f"{out}.tmp"
            with open(staging, "w") as handle:
                json.dump(state, handle)
            os.replace(staging, out)
        except OSError:
            return


def collective_state() -> dict[str, object]:
    """This rank's place in its job and the newest entries of torch's flight recorder."""
    state: dict[str, object] = {"pid": os.getpid(), "taken": time.time(), "rank": _env_int("RANK"), "world": None}
    dist = sys.modules.get("torch.distributed")  # never imported here: only if the script did
    try:
        if dist is None or not dist.is_available() or not dist.is_initialized():
            return state
        state["rank"], state["world"] = dist.get_rank(), dist.get_world_size()
        from torch._C import _distributed_c10d as c10d

        dump = getattr(c10d, "_dump_nccl_trace_json", None) or getattr(c10d, "_dump_fr_trace_json")  # noqa: B009
        trace = json.loads(dump(includeCollectives=True, onlyActive=False))
        state["flight_recorder"] = {
            "pg_status": trace.get("pg_status", {}),
            "pg_config": trace.get("pg_config", {}),
            "entries": trace.get("entries", [])[-ENTRIES:],
        }
    except Exception as err:  # a torch without the recorder, or one that refuses: say so
        state["flight_recorder_error"] = f"{type(err).__name__}: {err}"
    return state


def _env_int(name: str) -> int | None:
    value = os.environ.get(name, "")
    return int(value) if value.isdigit() else None
