"""The planning model against published figures, and against a simulation of the same process
that applies the agent's own restart rules (hacfg.restart.policy.decide)."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from hacfg.plan import model
from hacfg.plan.model import Costs, Rules, Units, daly_interval, job_mtbf, young_interval
from hacfg.restart.policy import Budgets, Policy, decide
from hacfg.restart.vocabulary import Action

MINUTE, HOUR, DAY = 60.0, 3600.0, 86400.0


# Daly (2006), section 5: δ = 5 min gives 117, 57 and 9.1 min at M = 24 h, 6 h and 15 min.
@pytest.mark.parametrize(("mtbf", "daly", "young"), [(24 * HOUR, 117, 120), (6 * HOUR, 57, 60), (15 * MINUTE, 9.1, 12.2)])
def test_optimum_intervals_match_the_published_figures(mtbf: float, daly: float, young: float) -> None:
    assert daly_interval(5 * MINUTE, mtbf) / MINUTE == pytest.approx(daly, abs=0.5 if daly > 10 else 0.05)
    assert young_interval(5 * MINUTE, mtbf) / MINUTE == pytest.approx(young, abs=0.05)


def test_a_save_as_long_as_twice_the_mtbf_checkpoints_every_mtbf() -> None:
    assert daly_interval(2 * HOUR, 1 * HOUR) == 1 * HOUR


def test_nodes_fail_independently_so_their_rates_add() -> None:
    assert job_mtbf(264 * DAY, 1024) == pytest.approx(6.1875 * HOUR)


def test_daly_optimum_is_where_the_expected_wall_time_is_least() -> None:
    costs = Costs(mtbf=6 * HOUR, save_time=5 * MINUTE, restart_time=10 * MINUTE, hang_share=0.2, hang_timeout=30 * MINUTE)
    best = daly_interval(costs.save_time, costs.mtbf)
    for other in (best * 0.8, best * 1.25):
        assert costs.wall_time(30 * DAY, best) < costs.wall_time(30 * DAY, other)
    assert 0 < costs.ettr(best) < 1


def test_the_budget_on_off_rules() -> None:
    assert Rules(restart_max=5, on_hang=True, pod_reschedules=3).budget == 8
    assert Rules(restart_max=0, on_hang=True, pod_reschedules=3).budget == 0  # auto restart off: a fault ends it


def simulate(rng: random.Random, work: float, interval: float, costs: Costs, policy: Policy) -> tuple[float, int, bool]:
    """One run in time: (wall time, failures, whether the budget ran out before the end).

    A handover (exit 138) takes a pod reschedule, else one of the counted restarts left (the
    platform re-issues the job), else the run stops."""
    wall, done, failures, budgets, handovers, first = 0.0, 0.0, 0, Budgets(), 0, True
    while done < work:
        gap = rng.expovariate(1 / costs.mtbf)
        lead = 0.0 if first else costs.restart_time
        first = False
        progressed = False
        if gap >= lead:
            left = gap - lead
            wall += lead
            while done < work:
                segment = min(interval, work - done) + costs.save_time
                if left < segment:
                    break
                left, wall, done, progressed = left - segment, wall + segment, done + min(interval, work - done), True
            if done >= work:
                return wall, failures, False
            wall += left
        else:
            wall += gap
        failures += 1
        hang = rng.random() < costs.hang_share
        wall += costs.hang_timeout if hang else 0.0
        decision = decide("hang" if hang else "environment", budgets, policy, progressed=progressed, command_code=1)
        if decision.action == Action.PROC_RESTART:
            continue
        if decision.action == Action.GIVE_UP:
            return wall, failures, True
        if handovers < policy.pod_reschedules:
            handovers += 1
        elif budgets.counted < policy.max_restarts:
            budgets.counted += 1
        else:
            return wall, failures, True
    return wall, failures, False


@pytest.mark.slow
@pytest.mark.parametrize("on_hang", [True, False])
def test_expected_wall_time_failures_and_budget_match_a_simulation_of_the_agent(on_hang: bool) -> None:
    costs = Costs(mtbf=2 * HOUR, save_time=4 * MINUTE, restart_time=6 * MINUTE, hang_share=0.35, hang_timeout=20 * MINUTE)
    work, interval = 1.5 * DAY, 40 * MINUTE
    policy = Policy(max_restarts=14, hang_retry=on_hang, pod_reschedules=2)
    rng = random.Random(20260)
    runs = [simulate(rng, work, interval, costs, Policy(max_restarts=10**6, hang_retry=on_hang)) for _ in range(3000)]
    walls, counts = [w for w, _, _ in runs], [n for _, n, _ in runs]
    assert statistics.fmean(walls) == pytest.approx(costs.wall_time(work, interval), rel=0.01)
    assert statistics.fmean(counts) == pytest.approx(costs.failures(work, interval), rel=0.03)

    stops = [simulate(rng, work, interval, costs, policy)[2] for _ in range(3000)]
    rules = Rules(policy.max_restarts, on_hang, policy.pod_reschedules)
    units = Units(costs.hang_share, on_hang, costs.progress_chance(interval))
    plan = units.spending(costs.failures(work, interval), work / interval)
    assert plan.method == ("Markov chain over the failures" if on_hang else "negative binomial tail")
    assert statistics.fmean(stops) == pytest.approx(plan.p_exhausted(rules.budget), abs=0.035)


def negative_binomial_over(mean: float, segments: float, upto: int) -> list[float]:
    """P(X > b) for b < ``upto``, each term from its own lgamma: the computation the walk replaces."""
    p, below, over = segments / (segments + mean), 0.0, []
    for n in range(upto):
        below += math.exp(math.lgamma(n + segments) - math.lgamma(segments) - math.lgamma(n + 1)
                          + segments * math.log(p) + n * math.log1p(-p))
        over.append(1.0 - below)
    return over


@pytest.mark.parametrize(("mean", "segments"), [(0.3, 5.0), (4.0, 0.5), (25.0, 12.0), (148.0, 720.0), (600.0, 40.0)])
def test_the_walked_tail_is_the_negative_binomial_s(mean: float, segments: float) -> None:
    walked = Units(0.0, False, 0.5).spending(mean, segments)
    assert walked.p_exhausted(len(walked.over) - 1) < 1e-9  # walked until nothing is left
    exact = negative_binomial_over(mean, segments, len(walked.over))
    assert walked.over == pytest.approx(exact, abs=1e-9)
    b = walked.budget_for(0.05)
    assert exact[b] <= 0.05 < (exact[b - 1] if b else 1.0)  # the smallest budget, with nothing capped


@pytest.mark.parametrize("mean", [10.0, 1e3, 1e4])
def test_the_tail_walk_grows_with_the_failures_not_faster(mean: float) -> None:
    for segments in (mean / 10, mean, 100 * mean):
        steps = len(Units(0.0, False, 0.5).spending(mean, segments).over)
        spread = math.sqrt(mean * (1 + mean / segments))
        assert mean < steps <= mean + 25 * spread + 10


def test_a_tail_too_long_to_walk_stops_where_markov_leaves_under_1_percent() -> None:
    # a run of a hundredth of one segment: rare failures, each run of them geometric and long
    spent = Units(0.0, False, 0.5).spending(50.0, 0.01)
    assert len(spent.over) == 100 * 51
    assert spent.budget_for(0.05) < len(spent.over) and spent.p_exhausted(10**9) <= 0.01


@pytest.mark.parametrize("hang_share", [0.05, 0.35, 0.8])
@pytest.mark.parametrize("progress", [0.1, 0.6, 0.95])
def test_the_bounds_hold_the_exact_chain_between_them(monkeypatch, hang_share: float, progress: float) -> None:
    exact = Units(hang_share, True, progress).spending(40.0, 30.0)
    assert exact.method == "Markov chain over the failures"
    monkeypatch.setattr(model, "CHAIN_WORK", 0)
    units = Units(hang_share, True, progress)
    bounds = units.spending(40.0, 30.0)
    assert bounds.method == "negative binomial bounds" and len(units.rows) == 1  # the chain never ran
    for b in range(len(exact.over)):
        low, high = bounds.p_low(b), bounds.p_exhausted(b)
        assert low is not None and low - 1e-9 <= exact.p_exhausted(b) <= high + 1e-9
    assert bounds.budget_for(0.05) >= exact.budget_for(0.05)  # the advice errs safe


def test_the_exact_chain_runs_only_while_its_work_is_bounded() -> None:
    small, large = Units(0.017, True, 0.6), Units(0.017, True, 0.6)
    assert small.spending(600.0, 650.0).method == "Markov chain over the failures"
    assert len(small.rows) * (len(small.rows) * 0.017 + 1) <= model.CHAIN_WORK
    assert large.spending(10_000.0, 40_000.0).method == "negative binomial bounds"
    assert len(large.rows) == 1


@pytest.mark.parametrize(("hang_share", "on_hang", "mean"), [(0.2, True, 60.0), (0.2, False, 60.0), (0.017, True, 5000.0)])
def test_a_walk_that_stops_at_one_budget_gives_that_budget_s_chance(hang_share: float, on_hang: bool, mean: float) -> None:
    whole = Units(hang_share, on_hang, 0.4).spending(mean, mean / 2)
    for budget in (0, int(mean / 2), int(mean), int(mean * 1.2)):
        units = Units(hang_share, on_hang, 0.4)
        stopped = units.spending(mean, mean / 2, upto=budget)
        assert stopped.p_exhausted(budget) == pytest.approx(whole.p_exhausted(budget), abs=1e-12)
        assert len(units.rows) <= 2 * budget + 40  # the chain, where it runs, stops near the budget too
