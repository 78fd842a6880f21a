"""The warm interpreter's side of a warm restart: import what the script imports, wait, fork one attempt.

This file runs inside the training's own interpreter (the one the command names, with the same
options), loaded by path so that no ``hacfg`` package is imported there: it uses the standard
library only. The agent's side is :mod:`hacfg.agent.process.warm`.

- **Imports at the lowest priority.** They run in a thread of their own at nice 19 and the idle
  I/O class, so they never compete with the training; nice and I/O priority are per thread on
  Linux and an unprivileged process cannot raise them again, so the main thread, which forks the
  attempt, keeps the agent's priority and the attempt runs at it. Where the kernel shares the CPU
  between sessions first (autogroups), a thread's nice weighs only within its own session, so the
  interpreter's session is set to nice 19 too while it imports, and back to 0 once it is done
  (which an unprivileged process may do); the attempt starts a session of its own.
- **Nothing the attempt owns is touched.** The interpreter's environment lacks the ``HACFG_*``
  variables, no port is opened, and if an import initialised an accelerator (``torch.cuda``,
  ``torch.npu``, ``torch.xpu``, or an open ``/dev/nvidia*``-like device) the interpreter refuses
  to serve: a forked child cannot use an accelerator its parent initialised.
- **The attempt becomes the agent's child.** The interpreter forks it, reports its pid once it has
  called ``setsid``, and exits, so the attempt is re-parented to the nearest subreaper, the agent,
  which then waits for it, sees its exit status or signal and kills its session exactly as for a
  cold start. The attempt waits for the agent's go (a pipe, written once the interpreter is gone)
  before it arms its parent-death signal, which must point at the agent, not at the interpreter.
- **The attempt looks like a fresh ``python script.py``.** Descriptors 0, 1, 2 are the ones the
  agent sent and the ``sys.std*`` objects are made anew as the interpreter makes them at start;
  ``os.environ``, ``sys.argv``, ``sys.orig_argv``, the working directory and ``sys.path[0]`` are
  the attempt's, and ``sys.argv`` and ``sys.orig_argv`` are already the attempt's while the
  preloaded modules import; ``__main__`` is a new module; random state is fresh (``random`` reseeds itself at
  fork; numpy's global state and torch's default generators are reseeded from the system); an
  uncaught exception prints its traceback without the frames of this file and exits 1; an
  uncaught ``KeyboardInterrupt`` ends the process by SIGINT, as CPython does. The string hash seed
  is the warm interpreter's own, chosen at its start like any interpreter's, and each warm
  interpreter serves one attempt only. What a module computed at import (the pid, the time) is the
  warm interpreter's, as documented in docs/warm-restarts.md.
- **What was imported is frozen.** ``gc.freeze()`` just before the fork moves every object the
  imports made into the collector's permanent generation (CPython's advice for a fork server): the
  attempt's collections, and the one its interpreter runs on the way out, skip them, so an attempt
  that dies of an exception exits in a fraction of a second rather than the second a collection
  over torch and ``torch._dynamo`` takes, and their pages stay shared with no copy-on-write.
  What the attempt itself creates is collected as usual.
- **Today's code, or a cold start.** Before it forks, the interpreter looks again at the size and
  modification time of every module file it imported; if one changed (a fix copied onto the
  shared storage during the attempt), it does not fork and says which, and the attempt starts cold.
"""

from __future__ import annotations

import ast
import atexit
import builtins
import contextlib
import ctypes
import gc
import importlib.machinery
import importlib.util
import io
import json
import os
import platform
import signal
import socket
import sys
import threading
import time
import types
from collections.abc import Callable
from typing import Any

BOOT_NAME = "<string>"  # the file name of the ``-c`` code that loads this one
MESSAGE_BYTES = 1 << 20  # one request: argv, environment, working directory
_PR_SET_PDEATHSIG = 1
_IOPRIO_WHO_PROCESS, _IOPRIO_CLASS_IDLE, _IOPRIO_CLASS_SHIFT = 1, 3, 13
_SYS_IOPRIO_SET = {"x86_64": 251, "aarch64": 30}
_DEVICES = ("/dev/nvidia", "/dev/davinci", "/dev/kfd", "/dev/dri/", "/dev/accel/")
# What a package imports on its first use rather than at its import, preloaded with it where installed:
# torch's first optimizer step imports torch._dynamo, which takes about as long as ``import torch``.
_FIRST_USE = {"torch": "torch._dynamo"}


def serve() -> None:
    """The warm interpreter's main: ``sys.argv`` is ``['-c', THIS_FILE, SOCKET_FD, CONFIG_JSON, '--', *COMMAND]``."""
    sock = socket.socket(fileno=int(sys.argv[2]))
    config = json.loads(sys.argv[3])
    sys.orig_argv = sys.argv[sys.argv.index("--") + 1 :]
    sys.argv = _argv(config)  # what a library that reads it at import sees in a cold start
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != config["agent"]:
        return  # the agent is already gone
    started = time.monotonic()
    path0 = _path0(config["script"])
    if path0 is not None:
        sys.path[0] = path0  # '' under -c
    named = config["preload"] is not None  # --preload: a name not found is an import that fails
    preloaded, skipped = _installed(config["preload"] if named else _imports_of(config), path0, missing_ok=not named)
    if not named:
        preloaded = _with_first_use(preloaded)
    failure = _import_quietly(preloaded) or _accelerator_in_use()
    if failure:
        print(f"warm interpreter {os.getpid()} cannot serve: {failure}", flush=True)
        sock.send(json.dumps({"ready": False, "reason": failure}).encode())
        return
    imported = _module_files()
    ready = {"ready": True, "preloaded": preloaded, "skipped": skipped, "seconds": round(time.monotonic() - started, 3)}
    print(
        f"warm interpreter {os.getpid()} ready: imported {', '.join(preloaded) or 'nothing'} in {ready['seconds']}s"
        + (f", skipped {', '.join(skipped)}" if skipped else ""),
        flush=True,
    )
    sock.send(json.dumps(ready).encode())
    try:
        message, fds, _, _ = socket.recv_fds(sock, MESSAGE_BYTES, 4)
    except OSError:
        return
    if not message or len(fds) != 4:
        return  # the agent is done with this interpreter
    changed = _changed(imported)
    if changed:
        for fd in fds:
            os.close(fd)
        sock.send(json.dumps({"changed": changed}).encode())
        return
    attempt = _fork(json.loads(message), fds, sock, config["agent"])
    if attempt is None:
        os._exit(0)  # served: the next attempt gets a fresh interpreter; nothing here to finalise
    attempt()


def _argv(config: dict[str, Any]) -> list[str]:
    """``sys.argv`` as a cold start has it while the script's imports run: the script as named, or
    the module's file under ``-m`` (runpy sets it before it runs the module)."""
    first = config["script"] or _module_source(config["module"]) or "-m"
    return [first, *config["args"]]


def _module_files() -> dict[str, tuple[int, int]]:
    """The size and modification time of every imported module's file."""
    found = {}
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if isinstance(path, str) and path not in found:
            with contextlib.suppress(OSError):
                info = os.stat(path)
                found[path] = (info.st_size, info.st_mtime_ns)
    return found


def _changed(imported: dict[str, tuple[int, int]]) -> str | None:
    """The first imported file that changed or went away since it was imported."""
    for path, seen in imported.items():
        try:
            info = os.stat(path)
        except OSError:
            return f"{path} is gone"
        if (info.st_size, info.st_mtime_ns) != seen:
            return f"{path} changed"
    return None


def _path0(script: str | None) -> str | None:
    """``sys.path[0]`` as ``python script.py`` (the script's real folder) or ``python -m`` (cwd) sets it;
    None under ``-P`` or ``-I``, which add nothing."""
    if getattr(sys.flags, "safe_path", False):
        return None
    return os.path.dirname(os.path.realpath(script)) if script else os.getcwd()


def _imports_of(config: dict[str, Any]) -> list[str]:
    """The modules the script imports at its top level (not in functions), found without running it."""
    path = config["script"] or _module_source(config["module"])
    if path is None:
        return []
    try:
        with open(path, "rb") as handle:
            tree = ast.parse(handle.read(), path)
    except (OSError, SyntaxError, ValueError):
        return []  # the attempt will report it as a cold start would
    names: list[str] = []
    pending = list(tree.body)
    while pending:
        node = pending.pop(0)
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and node.module != "__future__":
            names.append(node.module)
        elif isinstance(node, (ast.If, ast.Try, getattr(ast, "TryStar", ast.Try), ast.With)):
            for field in ("body", "orelse", "finalbody", "handlers"):
                pending += getattr(node, field, [])
        elif isinstance(node, ast.ExceptHandler):
            pending += node.body
    return list(dict.fromkeys(names))


def _with_first_use(names: list[str]) -> list[str]:
    """``names``, and what their packages import on first use where the installed version has it."""
    later = [
        module
        for top, module in _FIRST_USE.items()
        if module not in names and any(name.split(".")[0] == top for name in names) and _find(module) is not None
    ]
    return names + later


def _find(name: str) -> importlib.machinery.ModuleSpec | None:
    """Where module ``name`` is, found along ``sys.path`` without importing anything (not even its parents)."""
    search: list[str] | None = None
    spec = None
    for part in name.split("."):
        spec = importlib.machinery.PathFinder.find_spec(part, search)
        if spec is None:
            return None
        search = list(spec.submodule_search_locations or [])
    return spec


def _module_source(name: str) -> str | None:
    """The file ``python -m NAME`` runs, found along ``sys.path`` without importing anything."""
    spec = _find(name)
    if spec is not None and spec.submodule_search_locations:
        spec = importlib.machinery.PathFinder.find_spec("__main__", list(spec.submodule_search_locations))
    return spec.origin if spec is not None and spec.has_location else None


def _installed(names: list[str], path0: str | None, missing_ok: bool = True) -> tuple[list[str], list[str]]:
    """The names whose top-level package is installed, and those skipped: missing, or the script's own."""
    local = os.path.realpath(path0) if path0 else None
    keep, skip = [], []
    for name in names:
        try:
            spec = importlib.util.find_spec(name.split(".")[0])
        except (ImportError, ValueError):
            spec = None
        # a package's folder, or a module's file, found in the script's folder itself
        places = list(spec.submodule_search_locations or []) or [spec.origin or ""] if spec is not None else []
        if (spec is None and missing_ok) or any(os.path.dirname(os.path.realpath(p)) == local for p in places):
            skip.append(name)
        else:
            keep.append(name)
    return keep, skip


def _import_quietly(names: list[str]) -> str | None:
    """Import ``names`` in a thread at the lowest CPU and I/O priority; the error, if one failed."""
    failure: list[str] = []

    def work() -> None:
        tid = threading.get_native_id()
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, tid, 19)
        number = _SYS_IOPRIO_SET.get(platform.machine())
        if number is not None and sys.platform.startswith("linux"):
            idle = _IOPRIO_CLASS_IDLE << _IOPRIO_CLASS_SHIFT
            ctypes.CDLL(None, use_errno=True).syscall(number, _IOPRIO_WHO_PROCESS, tid, idle)
        for name in names:
            try:
                __import__(name)
            except BaseException as err:  # any failure means: start the attempt cold
                failure.append(f"importing {name} failed: {type(err).__name__}: {err}")
                return

    thread = threading.Thread(target=work, name="hacfg-preload")
    gc.disable()  # imports make next to no garbage: collecting while they run wastes a fifth of their CPU
    _session_nice(19)
    try:
        thread.start()
        thread.join()
    finally:
        _session_nice(0)
        gc.enable()  # the attempt's interpreter collects, as a fresh one does
    sys.stdout.flush()
    sys.stderr.flush()
    return failure[0] if failure else None


def _session_nice(nice: int) -> None:
    """Set the nice of this session's autogroup, as the kernel weighs it against the training's;
    nothing where there are no autogroups. The kernel takes one change in 100 ms from an
    unprivileged process, any process's: a refusal is tried again for a while."""
    for _ in range(50):
        try:
            with open("/proc/self/autogroup", "w") as autogroup:
                autogroup.write(str(nice))
            return
        except BlockingIOError:  # EAGAIN: another change within the last 100 ms
            time.sleep(0.01)
        except OSError:
            return


def _accelerator_in_use() -> str | None:
    """Why this interpreter may not fork attempts: an accelerator was initialised at import."""
    torch = sys.modules.get("torch")
    for name in ("cuda", "npu", "xpu"):
        with contextlib.suppress(Exception):
            if getattr(torch, name).is_initialized():
                return f"torch.{name} was initialised at import"
    with contextlib.suppress(OSError):
        for fd in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/self/fd/{fd}")
                if target.startswith(_DEVICES):
                    return f"an import opened {target}"
    return None


def _fork(request: dict[str, Any], fds: list[int], sock: socket.socket, agent: int) -> Callable[[], None] | None:
    """Fork the attempt; in the server, report its pid once it has its own session and return None
    (the server then exits, and the attempt becomes the agent's child); in the attempt, return what
    runs it."""
    pid_read, pid_write = os.pipe()
    gc.freeze()
    if os.fork() == 0:
        os.setsid()
        os.write(pid_write, str(os.getpid()).encode())
        for fd in (pid_read, pid_write):
            os.close(fd)
        sock.close()
        return _attempt(request, fds, agent)
    os.close(pid_write)
    for fd in fds:
        os.close(fd)
    with os.fdopen(pid_read, "rb") as handle:
        told = handle.read()
    sock.send(json.dumps({"pid": int(told)} if told else {"error": "the attempt died before it started"}).encode())
    return None


def _attempt(request: dict[str, Any], fds: list[int], agent: int) -> Callable[[], None]:
    """Wait for the agent's go, then become the attempt; returns the function that runs the script."""
    stdin, stdout, stderr, go = fds
    if os.read(go, 1) != b"g":
        os._exit(1)  # the agent gave this attempt up before it started
    os.close(go)
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != agent:
        os._exit(1)  # the agent died in between: so does its attempt
    streams = (sys.stdin, sys.stdout, sys.stderr)
    for fd, target in ((stdin, 0), (stdout, 1), (stderr, 2)):
        os.dup2(fd, target)
        os.close(fd)
    buffered = not getattr(sys.stdout, "write_through", False)  # python -u
    sys.stdin, sys.stdout, sys.stderr = (_stdio(fd, like, buffered) for fd, like in enumerate(streams))
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr  # type: ignore[misc]
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    hook = sys.modules.get("_hacfg_evidence")  # loaded at this interpreter's start when the agent arms it
    if hook is not None:
        hook.install()  # this attempt's evidence folder, from its environment
    sys.orig_argv = list(request["command"])
    _show_command(request["command"])
    path0 = _path0(request["script"])
    if path0 is not None:
        sys.path[0] = path0
    _reseed()
    main = types.ModuleType("__main__")
    main.__annotations__ = {}
    main.__builtins__ = builtins  # type: ignore[attr-defined]
    sys.modules["__main__"] = main
    if request["script"] is not None:
        sys.argv = [request["script"], *request["args"]]
        return lambda: _run(_script(main, request["script"]))
    sys.argv = ["-m", *request["args"]]
    import runpy

    return lambda: _run(lambda: runpy._run_module_as_main(request["module"], alter_argv=True))  # type: ignore[attr-defined]


def _show_command(command: list[str]) -> None:
    """Make ``/proc/PID/cmdline`` (``ps``, ``pkill -f``) show the training command, not the warm
    interpreter's: written over the interpreter's own arguments, which end with that command, so it fits."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        with open("/proc/self/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
        start, end = int(fields[45]), int(fields[46])  # arg_start, arg_end: fields 48 and 49 of proc(5)
        text = b"\0".join(os.fsencode(arg) for arg in command) + b"\0"
        if len(text) <= end - start:
            with open("/proc/self/mem", "r+b", buffering=0) as mem:
                mem.seek(start)
                mem.write(text.ljust(end - start, b"\0"))


def _stdio(fd: int, like: Any, buffered: bool) -> io.TextIOWrapper:
    """A standard stream as the interpreter creates it at start (Python/pylifecycle.c, create_stdio)."""
    write = fd != 0
    raw = io.FileIO(fd, "wb" if write else "rb", closefd=False)
    raw.name = ("<stdin>", "<stdout>", "<stderr>")[fd]
    stream: Any = raw
    if buffered or not write:
        stream = io.BufferedWriter(raw) if write else io.BufferedReader(raw)
    text = io.TextIOWrapper(
        stream,
        encoding=like.encoding,
        errors=like.errors,
        newline="\n",
        line_buffering=buffered and (raw.isatty() or fd == 2),
        write_through=not buffered,
    )
    text.mode = "w" if write else "r"  # type: ignore[misc]
    return text


def _reseed() -> None:
    """Random state a fresh interpreter would have (``random`` reseeds itself at fork)."""
    numpy_random = sys.modules.get("numpy.random")
    if numpy_random is not None and hasattr(numpy_random, "seed"):
        numpy_random.seed()
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "seed"):
        torch.seed()


def _script(main: types.ModuleType, script: str) -> Callable[[], None]:
    path = os.path.abspath(script)
    with open(path, "rb") as handle:
        source = handle.read()
    main.__loader__ = importlib.machinery.SourceFileLoader("__main__", path)
    main.__file__ = path
    main.__cached__ = None  # type: ignore[attr-defined]
    code = compile(source, path, "exec", dont_inherit=True)
    return lambda: exec(code, main.__dict__)


_interrupted: list[bool] = []


def _run(body: Callable[[], object]) -> None:
    """Run the script; an uncaught exception ends the process as it ends a fresh interpreter."""
    atexit.register(_exit_by_sigint)  # registered first, so it runs after the script's own handlers
    try:
        body()
    except SystemExit:
        raise
    except BaseException as err:  # the interpreter's own top level, reproduced
        trace = err.__traceback__
        while trace is not None and _ours(trace.tb_frame):
            trace = trace.tb_next
        sys.excepthook(type(err), err.with_traceback(trace), trace)  # the hook prints the exception's own
        if isinstance(err, KeyboardInterrupt):
            _interrupted.append(True)
        raise SystemExit(1) from None


def _ours(frame: types.FrameType) -> bool:
    return frame.f_globals is globals() or frame.f_code.co_filename == BOOT_NAME


def _exit_by_sigint() -> None:
    """CPython ends a process interrupted by an uncaught KeyboardInterrupt with SIGINT itself."""
    if _interrupted:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
