"""Records what a Python attempt can observe of how it was started, then ends as told.

Usage: probe.py RECORDS ENDING. Attempt 1 waits until its warm interpreter is ready when
RECORDS/wait-for-warm exists (so attempt 2 can start warm), then kills itself; attempt 2 writes
RECORDS/attempt-2.json and ends with ENDING: success, exit3, exception, interrupt, sigkill, sigsegv.
"""

import atexit
import ctypes
import faulthandler
import gc
import json
import multiprocessing
import os
import random
import signal
import sys
import threading
import time
import weakref
from pathlib import Path

import helper

try:
    import numpy
except ImportError:
    numpy = None


def stream(s):
    return [s.name, s.mode, s.encoding, s.errors, s.line_buffering, s.write_through, s.isatty(), s.fileno(), type(s.buffer).__name__]


def descriptors():
    found = {}
    for fd in sorted(os.listdir("/proc/self/fd"), key=int):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # the listing's own
        found[fd] = target.split(":")[0] if ":" in target else target
    return found


def status(*keys):
    lines = Path("/proc/self/status").read_text().splitlines()
    return {line.split(":")[0]: line.split(":")[1].strip() for line in lines if line.split(":")[0] in keys}


def record():
    main = sys.modules["__main__"]
    return {
        "name": __name__, "file": __file__, "argv": sys.argv, "orig_argv": sys.orig_argv, "path0": sys.path[0], "path": sys.path,
        "cwd": os.getcwd(), "env": dict(os.environ), "stdin": sys.stdin.read(), "flags": repr(sys.flags),
        "executable": sys.executable, "globals": sorted(k for k in vars(main) if k.startswith("__")),
        "loader": type(main.__loader__).__name__, "spec": main.__spec__ and [main.__spec__.name, main.__spec__.origin, type(main.__spec__.loader).__name__], "cached": main.__cached__,
        "builtins": repr(vars(main)["__builtins__"]), "main_is_module": main.__dict__ is globals(),
        "streams": [stream(s) for s in (sys.stdin, sys.stdout, sys.stderr)],
        "dunder_streams": [sys.__stdin__ is sys.stdin, sys.__stdout__ is sys.stdout, sys.__stderr__ is sys.stderr],
        "signals": {s.name: repr(signal.getsignal(s)) for s in signal.valid_signals() if isinstance(s, signal.Signals)},
        "proc": status("SigBlk", "SigIgn", "SigCgt", "NoNewPrivs", "Seccomp", "Cpus_allowed_list", "Threads"),
        "session": [os.getsid(0) == os.getpid(), os.getpgid(0) == os.getpid()], "ppid": os.getppid(),
        "nice": os.getpriority(os.PRIO_PROCESS, 0), "scheduler": os.sched_getscheduler(0), "umask": os.umask(os.umask(0)),
        "descriptors": descriptors(), "helper": helper.__file__, "faulthandler": faulthandler.is_enabled(),
        "main_thread": threading.current_thread() is threading.main_thread(), "threads": threading.active_count(),
        "pools": [pooled(method, 7) for method in ("spawn", "fork", "forkserver")],
        "random": random.random(), "hash": hash("warm"), "numpy": float(numpy.random.rand()) if numpy else None,
        "matmul": float((numpy.ones((256, 256)) @ numpy.ones((256, 256))).sum()) if numpy else None,
        "frozen": gc.get_freeze_count() > 0, "collects": collects(),
    }


def collects():
    """Whether a reference cycle this process makes is collected."""
    class Cycle:
        pass

    cycle = Cycle()
    cycle.self = cycle
    alive = weakref.ref(cycle)
    del cycle
    gc.collect()
    return alive() is None


def pooled(method, x):
    with multiprocessing.get_context(method).Pool(1) as pool:
        return pool.apply(helper.square, (x,))


def fail() -> None:
    raise ValueError("the probe failed on purpose")


if __name__ == "__main__":
    records, ending = Path(sys.argv[1]), sys.argv[2]
    attempt = int(os.environ["HACFG_ATTEMPT"])
    if attempt == 1:
        log = Path(os.environ["PROBE_STATE"]) / "warm.log"
        while (records / "wait-for-warm").exists() and " ready:" not in (log.read_text() if log.exists() else ""):
            time.sleep(0.02)
        os.kill(os.getpid(), signal.SIGKILL)
    (records / "attempt-2.json").write_text(json.dumps(record(), indent=1))
    atexit.register(print, "atexit handler ran", flush=True)
    threading.Thread(target=lambda: (time.sleep(0.2), print("thread finished after the main one", flush=True))).start()
    print("out line", flush=True)
    print("err line", file=sys.stderr, flush=True)
    if ending == "exit3":
        sys.exit(3)
    if ending == "exception":
        fail()
    if ending == "interrupt":
        raise KeyboardInterrupt
    if ending == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    if ending == "sigsegv":
        faulthandler.enable()
        ctypes.string_at(0)
