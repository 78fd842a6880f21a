"""What the agent's recovery plugins implement and receive: failure classifiers, checkpoint layouts,
and the hook told before a restart.

Plain data and base classes only, as cheap to define as :mod:`hacfg.plugin.precheck`'s (named
tuples, so a lint that imports a classifier plugin pays no ``exec``); the words a verdict is
written in come from :mod:`hacfg.restart`, below this package. The agent's machinery that runs
these plugins sits above it. Plugin authors import these through :mod:`hacfg.plugin`.
"""

import re
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

from hacfg.restart.vocabulary import Cause

TAIL_LINES = 50  # a failure carries the last lines of stdout and of stderr, this many of each


class Failure(NamedTuple):
    """What a classifier sees about a failed attempt."""

    exit_code: int | None  # None when killed by a signal
    signal: int | None
    tail: tuple[str, ...]  # the last lines of stdout, then of stderr
    hung: bool = False

    @property
    def code(self) -> int:
        """The shell's view: the exit code, or 128 + the signal."""
        return self.exit_code if self.exit_code is not None else 128 + (self.signal or 0)

    def describe(self) -> str:
        if self.signal is not None:
            from signal import Signals  # here: a lint that imports a classifier plugin never describes a failure

            return f"killed by {Signals(self.signal).name}"
        return f"exit {self.exit_code}"


class Classification(NamedTuple):
    """A classifier's answer: what kind of failure it was, and why it thinks so."""

    cause: Cause
    reason: str
    classifier: str = ""
    peer: bool = False  # the failure follows from another rank's (connection closed by a peer, say)
    evidence: tuple[str, ...] = ()  # the lines of the tail the verdict rests on
    not_counted: tuple[str, ...] = ()  # why other telling lines did not count, one entry per reason
    relocate: bool = False  # no restart on the same node can fix it (a GPU fallen off the bus): the job moves


class Restart(NamedTuple):
    """What a recovery hook learns before the job restarts (``hacfg_before_restart``)."""

    action: str  # proc_restart (here, by the agent) | pod_reschedule | job_reschedule (by the platform)
    attempt: int  # the attempt that just ended
    cause: str  # environment | user | hang
    reason: str
    node: int  # this node's rank (0 alone)
    checkpoint: str | None  # the newest complete checkpoint: the next attempt resumes from it


class SavedCheckpoint(NamedTuple):
    """One checkpoint a layout found on disk (not the scenario's ``checkpoint:`` settings); ordered by step."""

    step: int
    path: Path
    complete: bool = True
    layout: str = ""
    doubt: str = ""  # what makes the layout unsure of it (a dangling pointer, say): said when it is resumed
    lacks: str = ""  # of one that is not complete, what its layout's rule still waits for ("no .metadata")
    order: tuple[int, ...] = ()  # where its step alone does not place it: MindSpore's (epoch, step in epoch, run)

    @property
    def position(self) -> tuple[int, ...]:
        """Where it stands in the training, for "newest" and "newer": ``order`` where the layout
        gives one, else the step."""
        return self.order or (self.step,)


class CheckpointLayout:
    """A way training code lays out checkpoints. Subclasses set ``name`` and implement ``find``."""

    name: str = ""

    def find(self, root: Path) -> Iterable[SavedCheckpoint]:
        """Every checkpoint under ``root``, complete or not (``complete=False`` is never resumed)."""
        raise NotImplementedError


_DIGITS = re.compile(r"(\d+)")
_STEP_FIELD = re.compile(r"(?:^|-)step=(\d+)")  # Lightning joins its ``name=value`` fields with ``-``


def step_of(name: str) -> int | None:
    """The step a checkpoint's name carries.

    Lightning and NeMo name checkpoints from ``name=value`` fields
    (``megatron_gpt--val_loss=2.31-step=2000-consumed_samples=128000.0``, ``epoch=2-step=3000.ckpt``):
    the ``step=`` field, and no step when there is none (an epoch or a sample count is not one).
    Any other name: its last number, ``checkpoint-1200`` -> 1200, ``iter_0000300`` -> 300.
    """
    if "=" in name:
        field = _STEP_FIELD.search(name)
        return int(field.group(1)) if field else None
    numbers = _DIGITS.findall(name)
    return int(numbers[-1]) if numbers else None
