"""Warm restarts, the agent's side: keep an interpreter that has imported what the script imports, and
fork the next attempt from it, so that a restart skips Python's start and ``import torch``.

For a Python command (``python script.py``, ``python -m module``, an interpreter named by path),
:class:`WarmStarts` keeps at most one warm interpreter (:mod:`hacfg.agent.process.warm_server`), started
once an attempt runs, in its own session, with the attempt's environment minus the ``HACFG_*``
variables. At the next attempt, if it is ready and the environment is unchanged, the attempt is
forked from it: the agent sends it stdin and the write ends of two fresh pipes over a Unix socket
(``socket.send_fds``, as multiprocessing's forkserver does), it answers with the pid of an attempt
that is already the agent's own child (see the server's docstring), and the agent lets it run.
From then on the attempt is supervised exactly as a cold one: the same relay, hang detection,
classification, signals to its session and ``waitpid``. Otherwise the attempt starts cold, and
:class:`Launch` says why; either way a fresh warm interpreter is prepared for the next one.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from hacfg.agent.process.warm_server import MESSAGE_BYTES
from hacfg.restart.vocabulary import Start

if TYPE_CHECKING:
    from hacfg.agent.process.attempt import Process

SERVER = Path(__file__).with_name("warm_server.py")
# Loads the server by path: the training's interpreter need not have hacfg, and gets no hacfg package.
BOOT = (
    "import importlib.util as u, sys; s = u.spec_from_file_location('_hacfg_warm', sys.argv[1]); "
    "m = u.module_from_spec(s); sys.modules[s.name] = m; s.loader.exec_module(m); m.serve()"
)
INTERPRETER = re.compile(r"python[0-9.]*$")
FLAGS = "bBdEIOPqRsSuv"  # interpreter options without a value, kept for the warm interpreter
LAUNCHERS = ("torch.distributed.run", "torch.distributed.launch")  # they start workers of their own
RESTART_COUNT = "TORCHELASTIC_RESTART_COUNT"
# an attempt's own, when its workers use the agent's store: it says which attempt, and a port of its own
ATTEMPTS_OWN = frozenset({RESTART_COUNT, "MASTER_PORT"})
FORK_TIMEOUT = 5.0
_PR_GET_CHILD_SUBREAPER = 37


@dataclass(frozen=True)
class Entry:
    """How a command runs Python: the interpreter, its options, then a script or a module, and arguments."""

    python: str
    options: tuple[str, ...]
    script: str | None
    module: str | None
    args: tuple[str, ...]


def python_entry(command: list[str], path: str | None) -> Entry | str:
    """How ``command`` runs Python, or why it cannot start warm."""
    python = shutil.which(command[0], path=path) if command else None
    if python is None:
        return "the command is not found"
    ours = os.path.realpath(python) == os.path.realpath(sys.executable)
    if not (ours or INTERPRETER.match(os.path.basename(command[0]))):
        return f"{command[0]} is not a Python interpreter"
    options: list[str] = []
    rest = command[1:]
    while rest and rest[0].startswith("-") and rest[0] != "-":
        arg = rest.pop(0)
        if arg == "--":
            break
        if arg == "--check-hash-based-pycs" and rest:
            options += [arg, rest.pop(0)]
            continue
        if arg.startswith("--"):
            return f"python {arg} runs no training script"
        flags = arg[1:]
        for at, flag in enumerate(flags):
            if flag == "m":
                module = flags[at + 1 :] or (rest.pop(0) if rest else "")
                if flags[:at]:
                    options.append(f"-{flags[:at]}")
                if module in LAUNCHERS:
                    return f"{module} starts its workers itself"
                return Entry(python, tuple(options), None, module, tuple(rest)) if module else "-m without a module"
            if flag in "WX":
                options += [arg] if flags[at + 1 :] or not rest else [arg, rest.pop(0)]
                break
            if flag not in FLAGS:
                return f"python -{flag} cannot start warm"
        else:
            options.append(arg)
    if not rest or rest[0] == "-":
        return "python reads its program from stdin"
    if not os.path.isfile(rest[0]):
        return f"{rest[0]} is not a script file"
    return Entry(python, tuple(options), rest[0], None, tuple(rest[1:]))


def interpreter_env(env: dict[str, str]) -> dict[str, str]:
    """The attempt's environment without its own variables: what a warm interpreter may see at import."""
    return {key: value for key, value in env.items() if not key.startswith("HACFG_") and key not in ATTEMPTS_OWN}


class Stale(Exception):
    """A module the warm interpreter imported changed on disk: the attempt runs today's code, cold."""


class WarmProcess:
    """An attempt forked from a warm interpreter, the agent's child as a cold one is, with
    ``subprocess.Popen``'s face (``pid``, ``stdout``, ``stderr``, ``poll``, ``wait``)."""

    def __init__(self, pid: int, stdout: int, stderr: int, go: int):
        self.pid = pid
        self.stdout: IO[bytes] = open(stdout, "rb", buffering=0)  # noqa: SIM115  # closed with the process
        self.stderr: IO[bytes] = open(stderr, "rb", buffering=0)  # noqa: SIM115
        self.returncode: int | None = None
        self._go: int | None = go

    def release(self) -> None:
        """Let the attempt run: until now it waits, before its first line of the script."""
        if self._go is not None:
            with contextlib.suppress(OSError):
                os.write(self._go, b"g")
            os.close(self._go)
            self._go = None

    def discard(self) -> None:
        """The attempt will not run: it exits without starting the script, and is reaped."""
        if self._go is not None:
            os.close(self._go)
            self._go = None
        self.wait()
        self.stdout.close()
        self.stderr.close()

    def poll(self) -> int | None:
        return self._reap(os.WNOHANG)

    def wait(self) -> int:
        code = self._reap(0)
        assert code is not None
        return code

    def _reap(self, options: int) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, options)
            except ChildProcessError:
                self.returncode = 0  # reaped elsewhere, as subprocess.Popen assumes
                return self.returncode
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode


class Server:
    """One warm interpreter, importing, then waiting to fork one attempt."""

    def __init__(self, command: list[str], entry: Entry, preload: list[str] | None, env: dict[str, str], log: Path):
        self.entry, self.env = entry, env
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        config = {
            "script": entry.script,
            "module": entry.module,
            "args": list(entry.args),
            "preload": preload,
            "agent": os.getpid(),
        }
        log.parent.mkdir(parents=True, exist_ok=True)
        argv = [entry.python, *entry.options, "-c", BOOT, str(SERVER), str(theirs.fileno()), json.dumps(config)]
        argv += ["--", *command]  # names the job in ps, and leaves the room to show it for the attempt
        with theirs, open(log, "ab") as out:
            # no preexec_fn: the agent's relay threads may be running; the server arms its own
            # parent-death signal
            self.proc = subprocess.Popen(
                argv,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                pass_fds=(theirs.fileno(),),
                start_new_session=True,
            )
        self.sock = ours
        self.status: dict[str, Any] | None = None

    def unready(self, env: dict[str, str]) -> str | None:
        """Why this interpreter cannot fork the next attempt now, or None when it can."""
        if self.status is None and select.select([self.sock], [], [], 0)[0]:
            self.status = self._receive() or {"ready": False, "reason": f"it exited ({self._exit_text()})"}
        if self.status is None:
            return "the warm interpreter is still importing"
        if not self.status["ready"]:
            return f"the warm interpreter cannot serve: {self.status['reason']}"
        if self.proc.poll() is not None:
            return f"the warm interpreter exited ({self._exit_text()})"
        if env != self.env:
            return "the environment changed since the warm interpreter started"
        return None

    def describe(self) -> str:
        assert self.status is not None
        return f"imported {', '.join(self.status['preloaded']) or 'nothing'} in {self.status['seconds']}s"

    def fork(self, command: list[str], env: dict[str, str]) -> WarmProcess:
        """Ask for the attempt; it waits for :meth:`WarmProcess.release`."""
        out_read, out_write = os.pipe()
        err_read, err_write = os.pipe()
        go_read, go_write = os.pipe()
        request = {
            "command": command,
            "script": self.entry.script,
            "module": self.entry.module,
            "args": list(self.entry.args),
            "env": env,
            "cwd": os.getcwd(),
        }
        try:
            socket.send_fds(self.sock, [json.dumps(request).encode()], [0, out_write, err_write, go_read])
            ready = select.select([self.sock], [], [], FORK_TIMEOUT)[0]
            reply = (self._receive() if ready else None) or {"error": f"no answer in {FORK_TIMEOUT:g}s"}
        except OSError as err:
            reply = {"error": str(err)}
        finally:
            for fd in (out_write, err_write, go_read):
                os.close(fd)
        if "changed" in reply:
            for fd in (out_read, err_read, go_write):
                os.close(fd)
            raise Stale(f"{reply['changed']} on disk since the warm interpreter imported it")
        try:
            if "pid" not in reply:
                raise OSError(reply.get("error") or "no pid")
            self.proc.wait(timeout=FORK_TIMEOUT)  # gone: the attempt is now the agent's child
        except (OSError, subprocess.TimeoutExpired) as err:
            for fd in (out_read, err_read, go_write):
                os.close(fd)
            raise OSError(str(err)) from None
        return WarmProcess(int(reply["pid"]), out_read, err_read, go_write)

    def close(self) -> None:
        """Stop it, if it still runs (it serves one attempt), and reap it."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self.sock.close()

    def _receive(self) -> dict[str, Any] | None:
        try:
            data = self.sock.recv(MESSAGE_BYTES)
        except OSError:
            return None
        return json.loads(data) if data else None

    def _exit_text(self) -> str:
        code = self.proc.wait()
        return f"signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"


@dataclass
class Launch:
    """How one attempt starts, warm or cold, and why; called, it starts the attempt."""

    starts: WarmStarts
    how: Start
    reason: str
    process: WarmProcess | None = None
    spent: Server | None = None  # stopped once the attempt runs: its exit takes time the attempt need not wait

    def __call__(self, argv: list[str], env: dict[str, str]) -> Process:
        from hacfg.agent.process.attempt import start_cold

        proc: Process
        if self.process is not None:
            self.process.release()
            proc = self.process
        else:
            proc = start_cold(argv, env)
        self._stop_spent()
        self.starts.prepare(env)  # the next attempt's, now that this one runs
        return proc

    def discard(self) -> None:
        """The attempt does not run after all."""
        if self.process is not None:
            self.process.discard()
        self._stop_spent()

    def _stop_spent(self) -> None:
        if self.spent is not None:
            self.spent.close()
            self.spent = None


@dataclass
class WarmStarts:
    """One agent's warm interpreters: at most one waiting, a fresh one after each use."""

    command: list[str]
    log: Path  # where the warm interpreters' own output goes
    enabled: bool = True
    preload: list[str] | None = None  # default: the script's top-level imports that are installed
    server: Server | None = None
    entry: Entry | str = field(init=False)

    def __post_init__(self) -> None:
        if not self.enabled:
            self.entry = "warm restarts are off"
        elif not sys.platform.startswith("linux"):
            self.entry = "warm restarts need Linux"
        else:
            self.entry = python_entry(self.command, os.environ.get("PATH"))

    def start(self, env: dict[str, str]) -> Launch:
        """How the next attempt, with environment ``env``, starts."""
        if isinstance(self.entry, str):
            return Launch(self, Start.COLD, self.entry)
        server, self.server = self.server, None
        if server is None:
            return Launch(self, Start.COLD, "no warm interpreter was prepared yet")
        reason = server.unready(interpreter_env(env)) or (None if _subreaper() else "the agent is not a subreaper")
        try:
            if reason is None:
                return Launch(self, Start.WARM, server.describe(), server.fork(self.command, env), spent=server)
        except Stale as err:
            reason = str(err)
        except OSError as err:
            reason = f"the warm interpreter failed to fork: {err}"
        return Launch(self, Start.COLD, reason, spent=server)

    def prepare(self, env: dict[str, str]) -> None:
        """Start a warm interpreter for the next attempt, unless one is waiting."""
        if self.server is None and isinstance(self.entry, Entry):
            try:
                self.server = Server(self.command, self.entry, self.preload, interpreter_env(env), self.log)
            except OSError:
                self.server = None  # the next attempt starts cold and says why

    def keep(self) -> frozenset[int]:
        """The agent's children that are not an attempt's: the waiting warm interpreter."""
        return frozenset({self.server.proc.pid}) if self.server is not None else frozenset()

    def close(self) -> None:
        if self.server is not None:
            self.server.close()
            self.server = None


def _subreaper() -> bool:
    value = ctypes.c_int(0)
    ctypes.CDLL(None, use_errno=True).prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(value), 0, 0, 0)
    return bool(value.value)
