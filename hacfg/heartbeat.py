"""Calls for training loops to tell `hacfg agent` they are alive, and what they are doing.

    from hacfg import heartbeat
    for step in range(steps):
        train_step()
        heartbeat.beat(step=step + 1)
        if step % 1000 == 0:
            with heartbeat.phase("eval"):      # may stay quiet as long as hang.phases.eval allows
                evaluate()

``beat()`` touches the file named by ``HACFG_HEARTBEAT_FILE`` (set by the agent for its child)
at most once per ``HACFG_HEARTBEAT_INTERVAL`` seconds (the agent picks a quarter of its hang
timeout, at most 1 s), so calling it every step costs a clock read. With ``step``, the file holds
the step (replaced atomically), so the agent's goodput accounting knows when progress stopped,
not only when the process went quiet; and from the first step reported, a new step (or phase) is
what proves the loop alive in training, not output. The first step is written at once, whatever the
interval: the agent records when it came (``first_step``), the end of a restart's start-up. Outside
the agent it does nothing.

A phase (``"checkpoint"``, ``"eval"``, ``"init"``, ``"data"``, ``"shutdown"`` or a name of your own) tells the agent
which hang timeout applies: a save or an evaluation may be silent for longer than a training step
without being a hang. Entering and leaving a phase is written at once, whatever the interval;
``beat(phase=...)`` names the phase the loop is in until the next beat says otherwise. The file
then holds one line, ``STEP PHASE`` (``-`` for a step not reported).
"""

from __future__ import annotations

import os
import re
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager

TRAIN = "train"  # the phase outside any other: the agent's hang.timeout applies
INIT = "init"  # start-up: unless declared, the agent's initial hang timeout applies, as before any beat
# Tearing down (the process group's last barrier, the interpreter's exit) waits for the slowest rank
# as start-up does: unless declared, the initial hang timeout applies to it too.
SHUTDOWN = "shutdown"
AS_START_UP = frozenset({INIT, SHUTDOWN})
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")

_last = float("-inf")
_step: int | None = None
_phase = TRAIN
_said = False  # a step or phase was written: from then on every beat writes the line


def beat(step: int | None = None, phase: str | None = None) -> None:
    """Say the loop is alive; ``step`` is the last one finished, ``phase`` what it does from now on."""
    global _step, _phase
    first_step = step is not None and _step is None  # the end of the start-up: timed by the agent, written at once
    if step is not None:
        _step = int(step)
    if phase is not None and phase != _phase:
        _phase = _checked(phase)
        _write(force=True)
    else:
        _write(force=first_step)


@contextmanager
def phase(name: str) -> Iterator[None]:
    """Run the block in phase ``name``; the phase it interrupted applies again after it, even on error."""
    global _phase
    outer, _phase = _phase, _checked(name)
    _write(force=True)
    try:
        yield
    finally:
        _phase = outer
        _write(force=True)


def is_phase(name: str) -> bool:
    """Whether ``name`` can name a phase: 1-64 letters, digits, '_', '.' or '-'."""
    return _NAME.fullmatch(name) is not None


def _checked(name: str) -> str:
    if not is_phase(name):
        raise ValueError(f"a phase name is 1-64 letters, digits, '_', '.' or '-', not {name!r}")
    return name


def _write(*, force: bool) -> None:
    global _last, _said
    now = time.monotonic()
    if not force and now - _last < float(os.environ.get("HACFG_HEARTBEAT_INTERVAL", "1")):
        return
    path = os.environ.get("HACFG_HEARTBEAT_FILE")
    if not path:
        return
    try:
        if _step is None and _phase == TRAIN and not _said:
            _touch(path)
        else:
            _said = True
            staging = f"{path}.{os.getpid()}.tmp"
            with open(staging, "w") as handle:
                handle.write(f"{'-' if _step is None else _step} {_phase}\n")
            os.replace(staging, path)
    except OSError:
        return  # a heartbeat must never break training
    _last = now


def _touch(path: str) -> None:
    try:
        os.utime(path)
    except FileNotFoundError:
        with open(path, "a"):
            pass


def read(path: str | os.PathLike[str]) -> tuple[int | None, str]:
    """The agent's side: the step and phase the file says (``(None, "train")`` for a bare touch).

    The training can put anything in the file's place: a link, a pipe with no writer (which would
    block a plain ``open``), a step of a hundred digits. Only a regular file holding a line this
    module writes is read: a step that fits in 64 bits, a phase name."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None, TRAIN
    try:
        words = os.read(fd, 128).split() if stat.S_ISREG(os.fstat(fd).st_mode) else []
    except OSError:
        words = []
    finally:
        os.close(fd)
    if not words or not ((words[0].isdigit() and len(words[0]) <= 18) or words[0] == b"-") or len(words) > 2:
        return None, TRAIN  # a bare touch, or not a line this module wrote
    name = words[1].decode("ascii", "replace") if len(words) > 1 else TRAIN
    return int(words[0]) if words[0].isdigit() else None, name if _NAME.fullmatch(name) else TRAIN
