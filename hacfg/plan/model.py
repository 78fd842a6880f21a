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
from collections.abc import Sequence
from dataclasses import dataclass


def job_mtbf(node_mtbf: float, nodes: int) -> float:
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
        return math.expm1((interval + self.save_time) / self.mtbf) * math.exp(self.restart_time / self.mtbf)

    def segment_time(self, interval: float) -> float:
        """Expected wall time of one segment: Daly's M·e^{R/M}·(e^{(τ+δ)/M} − 1), plus h·H per failure."""
        first_tries = math.expm1((interval + self.save_time) / self.mtbf)
        return first_tries * (self.mtbf * math.exp(self.restart_time / self.mtbf) + self.hang_share * self.hang_timeout)

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
    """The restart rules as hacfg's agent applies them (hacfg.agent.policy.decide)."""

    restart_max: int
    on_hang: bool
    pod_reschedules: int = 0

    @property
    def budget(self) -> int:
        """Handovers the run survives: ``restart.max`` restarts in place, then one reschedule each."""
        return self.restart_max + self.pod_reschedules if self.restart_max else 0


@dataclass(frozen=True)
class Spending:
    """How the restart budget is spent: the chance that more than ``b`` units are needed."""

    over: Sequence[float]  # over[b] = P(units needed > b); beyond the end, 0
    exact: bool  # a negative binomial tail (True) or the Markov chain over failures (False)

    def p_exhausted(self, budget: int) -> float:
        return self.over[budget] if budget < len(self.over) else 0.0

    def budget_for(self, risk: float) -> int:
        """The smallest budget whose chance of running out is at most ``risk``."""
        return next((b for b, p in enumerate(self.over) if p <= risk), len(self.over))


def spending(
    failures: float, segments: float, hang_share: float, on_hang: bool, progress: float, *, cap: int
) -> Spending:
    """The distribution of budget units a run of ``segments`` segments needs, up to ``cap`` units.

    Each segment fails a geometric number of times before it completes, so the run's failures are
    negative binomial (overdispersed against a Poisson count of the same mean, ``failures``). An
    environment fault takes one unit (a counted restart, or a reschedule once those are spent); a
    hang takes none while the agent may restart it (``on_hang``, at most 3 in a row) and one when
    it must hand it over. A streak ends when the attempt before the failure completed a
    checkpoint (chance ``progress``). With no hang restarts every failure that counts is a
    thinned geometric count per segment: the tail is exact. Otherwise the units follow a Markov
    chain over the failures, mixed over their count.
    """
    if not on_hang or hang_share == 0.0:
        counted = failures * (1.0 - hang_share) if on_hang else failures
        return Spending(_over([_failures_pmf(counted, segments, n) for n in range(cap)]), exact=True)
    # After n failures, k of them were hangs restarted in place, so n - k units are spent.
    # mass[k][s]: that k, with s hang restarts in a row; hangs are rarely many, so k stays small.
    mass = [[1.0, 0.0, 0.0, 0.0]]  # s = 0..3: the platform's cap of 3 in a row, unrolled below
    units = [0.0] * (cap + 1)  # over the Poisson count of failures; units[cap] holds all beyond
    keep, env, hang = 1.0 - progress, 1.0 - hang_share, hang_share
    n, seen, last = 0, 0.0, failures + 40 * math.sqrt(failures * (1 + failures / segments) + 1) + 40
    while True:
        pmf = _failures_pmf(failures, segments, n)
        for k, row in enumerate(mass):
            units[min(n - k, cap)] += pmf * sum(row)
        seen += pmf
        if (1.0 - seen < 1e-12 and n >= failures) or n > last:
            break  # what was not seen counts as spent
        n += 1
        grown = [[0.0] * 4 for _ in range(len(mass) + 1)]
        for k, (s0, s1, s2, s3) in enumerate(mass):
            # A completed checkpoint first ends the streak...
            s0 = progress * (s0 + s1 + s2 + s3) + keep * s0
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
        mass = grown
    return Spending(_over(units[:cap]), exact=False)


def _failures_pmf(mean: float, segments: float, n: int) -> float:
    """P(n failures): negative binomial with ``segments`` geometric counts adding up to ``mean``.
    In logs, so that thousands of failures do not underflow."""
    if mean <= 0:
        return float(n == 0)
    p = segments / (segments + mean)  # a segment's chance to complete at each try
    log = math.lgamma(n + segments) - math.lgamma(segments) - math.lgamma(n + 1)
    return math.exp(log + segments * math.log(p) + n * math.log1p(-p))


def _over(pmf: Sequence[float]) -> list[float]:
    """P(X > b) from P(X = b), for each b of ``pmf``."""
    over, below = [], 0.0
    for p in pmf:
        below += p
        over.append(max(0.0, 1.0 - below))
    return over
