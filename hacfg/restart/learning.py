"""Learned hang timeouts: ``FACTOR`` x the p99 of how long each phase of :mod:`hacfg.heartbeat` has
taken, never under a floor and, unless the user opts in, never over the timeout that would apply
without learning. A train "step" is the time between two step reports (``beat(step=N)``).

What is learned is kept in the job's state and survives restarts; nothing unfinished does. DLRover's
hang detector kept the start of a save cut short by a kill across the restart, and judged every later
attempt against it: a job restarted every 30 minutes, forever (its pull request 1749). Here:

- only a phase seen to end is a sample: a phase cut by a kill, a hang or the attempt's end never is,
  and each attempt's clocks start anew (:class:`Intervals`);
- start-up and tear-down are not learned: a resume loads a checkpoint the first attempt did not have;
- a learned timeout that fired is forgotten, so the next attempt is judged by the timeout that applies
  without learning: a phase that became slower (another node, a bigger checkpoint) is learned again,
  not killed again and again.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from hacfg import heartbeat

FACTOR = 5
WINDOW = 200  # samples kept per phase, the newest
PHASES = 32  # phases learned: the trainer names them, and the state that keeps them must stay small
SHORTEST, LONGEST = 0.001, 7 * 86400.0  # seconds a sample may hold: a phase seen to end took this long
ENOUGH = 3  # samples before a phase's learned timeout applies: with fewer, the one without learning does


@dataclass
class Learned:
    """The samples of each phase, in seconds, and the limits drawn from them."""

    floor: float
    beyond: bool = False  # the user lets a learned timeout exceed the one that applies without learning
    samples: dict[str, list[float]] = field(default_factory=dict)

    def observe(self, phase: str, seconds: float) -> None:
        if phase in heartbeat.AS_START_UP or not seconds >= 0:
            return
        if phase not in self.samples and len(self.samples) >= PHASES:
            return  # a phase beyond the first few keeps the timeout it has without learning
        kept = self.samples.setdefault(phase, [])
        kept.append(min(max(round(seconds, 3), SHORTEST), LONGEST))
        del kept[:-WINDOW]

    def limit(self, phase: str, ceiling: float) -> float | None:
        """The learned timeout of ``phase``, or None while too little is known; ``ceiling`` is the
        timeout that applies without learning."""
        kept = self.samples.get(phase, ())
        if len(kept) < ENOUGH:
            return None
        learned = max(self.floor, FACTOR * p99(kept))
        return learned if self.beyond else min(learned, ceiling)

    def forget(self, phase: str) -> None:
        self.samples.pop(phase, None)


def p99(values: Iterable[float]) -> float:
    """The nearest-rank 99th percentile: of fewer than 100 values, the largest."""
    ordered = sorted(values)
    return ordered[math.ceil(0.99 * len(ordered)) - 1]


def samples_from_json(data: object) -> dict[str, list[float]]:
    """The samples a state holds, as :meth:`Learned.observe` keeps them; ``ValueError`` says what
    else it holds: a sample that is not a number of seconds between :data:`SHORTEST` and
    :data:`LONGEST` (a 400-digit integer, ``1e308``) would make a timeout that never fires."""
    if not isinstance(data, Mapping):
        raise ValueError("learned: not a mapping of phases")
    if len(data) > PHASES:
        raise ValueError(f"learned: {len(data)} phases, more than {PHASES}")
    for phase, values in data.items():
        if not isinstance(phase, str) or not heartbeat.is_phase(phase) or phase in heartbeat.AS_START_UP:
            raise ValueError(f"learned: {phase!r} is not a phase that is learned")
        if not isinstance(values, list) or len(values) > WINDOW:
            raise ValueError(f"learned: {phase}: not a list of at most {WINDOW} samples")
        if not all(isinstance(v, int | float) and not isinstance(v, bool) and SHORTEST <= v <= LONGEST for v in values):
            raise ValueError(f"learned: {phase}: a sample that is not {SHORTEST:g} to {LONGEST:g} seconds")
    return {phase: [float(v) for v in values] for phase, values in data.items()}


class Intervals:
    """One attempt's heartbeat writes turned into samples: how long each phase lasted, and the time
    between step reports in training.

    Each write is seen when the watcher looks, not when it is made (file times are used). A phase is
    measured from the newest write seen before it began to the first write seen after it ended: never
    shorter than the truth, whatever was missed in between. A step interval runs between the writes
    that reported the two steps. Start-up's first step, and the first after another phase, are not
    steps of training: they are not sampled."""

    def __init__(self, learned: Learned) -> None:
        self.learned = learned
        self.phase = heartbeat.TRAIN
        self.step: int | None = None
        self.seen: int | None = None  # file time (ns) of the newest write seen in this attempt
        self.began: int | None = None  # file time (ns) from which the current sample runs
        self.sampled: str | None = None  # what the current state is a sample of, when it ends

    def write(self, at: int, step: int | None, phase: str) -> bool:
        """A write seen, made at file time ``at``; whether it shows progress (a new step or phase)."""
        changed = phase != self.phase
        stepped = not changed and step is not None and step != self.step
        if changed or (stepped and phase == heartbeat.TRAIN):
            if self.sampled is not None and self.began is not None:
                self.learned.observe(self.sampled, (at - self.began) / 1e9)
            self.began = self.seen if changed else at
            self.sampled = None if phase == heartbeat.TRAIN and changed else phase
        self.phase = phase
        self.step = step if step is not None else self.step
        self.seen = at
        return changed or stepped
