"""The planning model: pure functions of a job's reliability inputs, all times in seconds.

Failures arrive independently at a constant rate (exponential gaps), each node alike, so a job of
``n`` nodes fails ``n`` times as often as one node. A run is ``work / interval`` segments, each one
``interval`` of compute and one ``save_time`` of saving; a failure loses the segment in progress,
costs ``restart_time`` (which may itself fail) and, for a hang, ``hang_timeout`` before it is
noticed. That is Daly's model (J. T. Daly, "A higher order estimate of the optimum checkpoint
interval for restart dumps", Future Generation Computer Systems 22, 2006) with hangs added.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import islice

from hacfg.restart.vocabulary import StragglerAction

HOPELESS = 50.0  # a segment and its restart this many MTBFs long succeed once in e^50 tries
TAIL = 1e-10  # the chance of more failures than a budget is walked until it is below this
CHAIN_WORK = 20_000  # the most failures × hangs the exact chain may cost (about 50 ms); past it, bounds


def job_mtbf(node_mtbf: float, nodes: float) -> float:
    """Any one of ``nodes`` failing stops the whole job: the rates add."""
    return node_mtbf / nodes


def young_interval(save_time: float, mtbf: float) -> float:
    """Young (1974), the first-order optimum: τ = √(2δM)."""
    return math.sqrt(2 * save_time * mtbf)


def daly_interval(save_time: float, mtbf: float) -> float:
    """Daly (2006), eq. 37: τ = √(2δM)·[1 + ⅓√(δ/2M) + ⅑(δ/2M)] − δ for δ < 2M, else M."""
    if save_time >= 2 * mtbf:
        return mtbf
    x = save_time / (2 * mtbf)
    return math.sqrt(2 * save_time * mtbf) * (1 + math.sqrt(x) / 3 + x / 9) - save_time


@dataclass(frozen=True)
class Costs:
    """What one segment costs and what a failure costs, for one job."""

    mtbf: float  # the job's
    save_time: float
    restart_time: float
    hang_share: float = 0.0
    hang_timeout: float = 0.0

    def failures_per_segment(self, interval: float) -> float:
        """Expected failures while one segment completes, counting failures during restarts."""
        return _expm1((interval + self.save_time) / self.mtbf) * _expm1(self.restart_time / self.mtbf, plus=1)

    def segment_time(self, interval: float) -> float:
        """Expected wall time of one segment: Daly's M·e^{R/M}·(e^{(τ+δ)/M} − 1), plus h·H per failure."""
        first_tries = _expm1((interval + self.save_time) / self.mtbf)
        restart = self.mtbf * _expm1(self.restart_time / self.mtbf, plus=1)
        return first_tries * (restart + self.hang_share * self.hang_timeout)

    def wall_time(self, work: float, interval: float) -> float:
        """Expected wall time to do ``work`` seconds of compute, saving every ``interval``."""
        return self.segment_time(interval) * work / interval

    def ettr(self, interval: float) -> float:
        """Effective training time ratio: productive compute over wall time, 0 to 1."""
        return interval / self.segment_time(interval)

    def failures(self, work: float, interval: float) -> float:
        """Expected failures over the whole run."""
        return self.failures_per_segment(interval) * work / interval

    def progress_chance(self, interval: float) -> float:
        """How likely an attempt completes a checkpoint before it fails (which ends a hang streak)."""
        return math.exp(-(self.restart_time + interval + self.save_time) / self.mtbf)


@dataclass(frozen=True)
class Rules:
    """The restart rules as hacfg's agent applies them (:func:`hacfg.restart.policy.decide`)."""

    restart_max: int
    on_hang: bool
    pod_reschedules: int = 0

    @property
    def budget(self) -> int:
        """Handovers the run survives: ``restart.max`` restarts in place, then one reschedule each."""
        return self.restart_max + self.pod_reschedules if self.restart_max else 0


@dataclass(frozen=True)
class Spending:
    """How the restart budget is spent: the chance that more than ``b`` units are needed, every ``b``
    up to where that chance is below :data:`TAIL` (or, with a tail too long to walk, below 1 %)."""

    over: Sequence[float]  # over[b] = P(units needed > b); beyond the end, at most over[-1]
    method: str
    low: Sequence[float] | None = None  # bounds only: over[b] is the upper bound, low[b] the lower one

    def p_exhausted(self, budget: int) -> float:
        return self.over[min(budget, len(self.over) - 1)]

    def p_low(self, budget: int) -> float | None:
        """Where ``p_exhausted`` is an upper bound, the lower one."""
        return None if self.low is None else self.low[min(budget, len(self.low) - 1)]

    def budget_for(self, risk: float) -> int:
        """The smallest budget whose chance of running out is at most ``risk``: the list goes that far."""
        return next(b for b, p in enumerate(self.over) if p <= risk)


class Units:
    """How many budget units a run's failures take, under the agent's restart rules.

    An environment fault takes one unit (a counted restart, or a reschedule once those are spent);
    a hang takes none while the agent may restart it (``on_hang``, at most 3 in a row) and one
    when it must hand it over. A streak ends when the attempt before the failure completed a
    checkpoint (chance ``progress``). Each segment fails a geometric number of times before it
    completes, so a run's failures are negative binomial (more spread than a Poisson count of
    the same mean). With no hang restarts, the units are a thinned count of the same kind: the
    tail is exact in closed form, walked in steps linear in the mean.

    With hang restarts, a Markov chain over the failures, mixed over their count, is exact too,
    but its work grows with the failures times the hangs among them: it runs while that is at
    most :data:`CHAIN_WORK`. Past it, two thinned counts bound the units on every run: at least
    the environment faults (share ``1 − h``), at most the failures less the hangs that follow a
    completed checkpoint (share ``1 − h·progress``), which are always restarted in place. The
    upper bound is the answer, so the advice errs safe, and the lower one says by how much.
    """

    def __init__(self, hang_share: float, on_hang: bool, progress: float) -> None:
        self.hang_share, self.progress = hang_share, progress
        self.chained = on_hang and hang_share > 0.0
        self.counted_share = 1.0 - hang_share if on_hang else 1.0
        # After n failures, k of them hangs restarted in place (so n - k units spent):
        # rows[n][k] is its chance, streaks summed out; mass[k][s] the chain's state now.
        self.rows: list[list[float]] = [[1.0]]
        self.mass = [[1.0, 0.0, 0.0, 0.0]]  # s = 0..3 in a row: the platform's cap of 3, unrolled below

    def spending(self, failures: float, segments: float, upto: int | None = None) -> Spending:
        """The chance of needing more than each budget, for a run with this mean number of failures;
        with ``upto``, only as far as that budget where a walk can stop there (a bisection asks
        about one budget many times)."""

        def tail(share: float) -> list[float]:
            return _over(islice(_failures_pmf(failures * share, segments), None if upto is None else upto + 1))

        if not self.chained:
            return Spending(tail(self.counted_share), "negative binomial tail")
        last = failures + 10 * math.sqrt(failures * (1 + failures / segments)) + 10  # ~ where the walk ends
        if last * (last * self.hang_share + 1) > CHAIN_WORK:
            return Spending(
                tail(1.0 - self.hang_share * self.progress), "negative binomial bounds", tail(1.0 - self.hang_share)
            )
        units: list[float] = []
        for n, pmf in enumerate(_failures_pmf(failures, segments)):
            if n == len(self.rows):
                self._step()
            row = self.rows[n]
            if upto is not None and n - len(row) >= upto:
                break  # every run of n failures spends more than upto, and so every longer one
            units.append(0.0)
            for k, p in enumerate(row):
                units[n - k] += pmf * p
        return Spending(_over(units), "Markov chain over the failures")

    def _step(self) -> None:
        """One more failure."""
        keep, env, hang = 1.0 - self.progress, 1.0 - self.hang_share, self.hang_share
        grown = [[0.0] * 4 for _ in range(len(self.mass) + 1)]
        for k, (s0, s1, s2, s3) in enumerate(self.mass):
            # A completed checkpoint first ends the streak...
            s0 = self.progress * (s0 + s1 + s2 + s3) + keep * s0
            s1, s2, s3 = keep * s1, keep * s2, keep * s3
            # ...then the failure: an environment fault spends a unit, a hang lengthens the streak;
            # the fourth hang in a row is handed over and spends one.
            same, more = grown[k], grown[k + 1]
            same[0] += env * s0
            same[1] += env * s1
            same[2] += env * s2
            same[3] += s3
            more[1] += hang * s0
            more[2] += hang * s1
            more[3] += hang * s2
        while len(grown) > 1 and sum(grown[-1]) < 1e-14:
            grown.pop()  # a dropped mass of fewer units counts as spent: the answer errs safe
        self.mass = grown
        self.rows.append([sum(row) for row in grown])


def _expm1(x: float, plus: float = 0.0) -> float:
    """e^x − 1 (+ ``plus``), held below overflow: a hopeless interval costs ~e^700, not an error."""
    return math.expm1(min(x, 700.0)) + plus


def _failures_pmf(mean: float, segments: float) -> Iterator[float]:
    """P(n failures) for n = 0, 1, …: negative binomial with ``segments`` geometric counts adding up
    to ``mean``, until what is left is below :data:`TAIL`. Each term from the one before, in logs
    so that thousands of failures do not underflow. Past the mean, the terms shrink at least as
    fast as their ratio now or ``1 − p``, whichever is larger: a geometric series bounds what is
    left. A tail that long (a run of a tiny share of one segment) stops at 100 × the mean, where
    Markov's inequality leaves under 1 % of it."""
    if mean <= 0:
        yield 1.0
        return
    p = segments / (segments + mean)  # a segment's chance to complete at each try
    log, step = segments * math.log(p), math.log1p(-p)
    for n in range(math.ceil(100 * (mean + 1))):
        pmf = math.exp(log)
        yield pmf
        ratio = max((n + segments) / (n + 1) * (1 - p), 1 - p)
        if n >= mean and ratio < 1 and pmf * ratio / (1 - ratio) < TAIL:
            return
        log += step + math.log((n + segments) / (n + 1))


def _over(pmf: Iterable[float]) -> list[float]:
    """P(X > b) from P(X = b), for each b of ``pmf``."""
    over, below = [], 0.0
    for p in pmf:
        below += p
        over.append(max(0.0, 1.0 - below))
    return over


@dataclass(frozen=True)
class StragglerPrice:
    """What a rank computing ``slowdown`` times as long as the others costs if the job keeps it."""

    action: StragglerAction
    reason: str
    cost: float | None = None  # seconds of wall time the slowdown adds over the remaining run


def straggler_price(
    slowdown: float,
    remaining: float | None,
    restart_time: float | None,
    ranks: int | None = None,
    pace: tuple[float, float] | None = None,
) -> StragglerPrice:
    """Keep going, warn, or restart elsewhere at the next checkpoint.

    Synchronous training runs at the slowest rank's pace: ``remaining`` seconds of work take
    ``slowdown`` times as long, ``(slowdown - 1) · remaining`` seconds more. Moving the job at its
    next checkpoint loses no work, only one restart (``restart_time``). Restart elsewhere when the
    slowdown costs more than twice a restart (a margin: a new node is not certain to be faster,
    and the estimate is rough); keep going when it costs less than one restart; warn in between,
    or when either number is unknown: never act on a guess. Nor on one rank's word: among fewer
    than :data:`QUORUM` ``ranks``, a rank's pace is measured against one other rank's clock
    stamps alone (a clock off by 80 ms, or a rank that lies, names its healthy peer), so a move
    becomes a warning. Nor while the job's own ``pace`` has not worsened: ``(period, before)``, the
    group's seconds from one collective to the next since the rank turned slow and before, each timed
    on the ranks' own clocks (:class:`hacfg.agent.culprit.straggler.Pace`), must be :data:`WORSENED`:
    a slowdown that costs the job nothing is a skewed clock or a lie, and one the rank showed from
    the first collectives seen cannot be shown to cost anything.
    """
    price = _price(slowdown, remaining, restart_time)
    if price.action != StragglerAction.RESTART_ELSEWHERE:
        return price
    if ranks is not None and ranks < QUORUM:
        alone = f"with {ranks} ranks, each one's pace rests on the other's clock stamps alone"
        reason = f"{price.reason}; but {alone}: not moving on one rank's word"
        return StragglerPrice(StragglerAction.WARN, reason, price.cost)
    period, before = pace or (0.0, 0.0)
    if pace is not None and not before:
        steady = "it was slow from the first collectives seen, so the job's pace before it is not known"
        return StragglerPrice(StragglerAction.WARN, f"{price.reason}; but {steady}: not moving", price.cost)
    if pace is not None and period < WORSENED * before:
        steady = f"the job's own pace has not worsened ({period:.3g}s a collective, {before:.3g}s before it slowed)"
        return StragglerPrice(StragglerAction.WARN, f"{price.reason}; but {steady}: not moving", price.cost)
    return price


QUORUM = 3  # ranks from which no one rank's stamps alone decide another's pace
WORSENED = 1.25  # the group's period since a rank turned slow over the one before: the straggler cost the job its pace


def _price(slowdown: float, remaining: float | None, restart_time: float | None) -> StragglerPrice:
    if remaining is None or restart_time is None:
        named = (("job.duration", remaining), ("reliability.restart_time", restart_time))
        unknown = " and ".join(name for name, value in named if value is None)
        return StragglerPrice(StragglerAction.WARN, f"cannot price it without {unknown}")
    cost = max(slowdown - 1, 0.0) * max(remaining, 0.0)
    said = f"{cost:.0f}s more over the remaining {remaining:.0f}s, against a restart of {restart_time:.0f}s"
    if cost > 2 * restart_time:
        moving = f"{said}: worth moving the job at its next checkpoint"
        return StragglerPrice(StragglerAction.RESTART_ELSEWHERE, moving, cost)
    if cost < restart_time:
        return StragglerPrice(StragglerAction.KEEP, f"{said}: cheaper to keep going", cost)
    return StragglerPrice(StragglerAction.WARN, f"{said}: not clearly worth a restart", cost)
