"""Real processes: their children, what is left running, agents waited for or killed, free ports."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest


def children_of(pid: int) -> list[tuple[int, str]]:
    """The processes whose parent is ``pid``, each with its state letter (``S``, ``Z``...)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            if int(fields[1]) == pid:
                found.append((int(entry.name), fields[0]))
    return found


def left_running(marker: str | Path) -> list[int]:
    """The live processes (zombies aside) whose command line names ``marker``, a test's own folder: what it left."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                named = str(marker).encode() in (entry / "cmdline").read_bytes()
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if named and state not in ("Z", "X"):
                found.append(int(entry.name))
    return found


def wait_agents(agents: Mapping[int, subprocess.Popen], timeout: float, output: Callable[[int], str]) -> dict[int, int]:
    """Each agent's exit code, all within ``timeout`` seconds; else every agent's session is killed and the
    test fails with the output of the one that did not finish."""
    deadline = time.monotonic() + timeout
    codes = {}
    for key, agent in sorted(agents.items()):
        try:
            codes[key] = agent.wait(timeout=max(1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            kill_agents(agents)
            pytest.fail(f"agent {key} did not finish:\n{output(key)[-4000:]}")
    return codes


def kill_agents(agents: Mapping[int, subprocess.Popen]) -> None:
    """End every agent a test started in a session of its own, and whatever it runs."""
    for agent in agents.values():
        if agent.poll() is None:
            os.killpg(agent.pid, signal.SIGKILL)
            agent.wait()


def free_port() -> int:
    """A TCP port nobody holds now, for a store or a process group (the OS picks it)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_logged(argv: list[str], log: Path, **options: Any) -> subprocess.Popen:
    """``argv`` started with its stdout and stderr in ``log``; the child holds the file, the test does not."""
    with log.open("wb") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, **options)


def end(proc: subprocess.Popen) -> None:
    """Kill ``proc`` if it still runs, reap it and close the pipes the test held to it."""
    proc.kill()
    with proc:  # Popen's exit closes its pipes and waits
        pass


@contextlib.contextmanager
def ending(proc: subprocess.Popen) -> Iterator[subprocess.Popen]:
    """``proc``, ended (killed if still running, reaped, its pipes closed) when the block leaves, failed or not."""
    try:
        yield proc
    finally:
        end(proc)
