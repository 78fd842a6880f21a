"""Learned hang timeouts, and detection that follows step progress once steps are reported."""

import json
import re

import pytest
from kit.agents import agent, read_events, saved_state
from kit.paths import REPO

from hacfg.agent.records.state import NodeState
from hacfg.restart.learning import LONGEST, PHASES, SHORTEST, Intervals, Learned, p99

S = 1_000_000_000  # file times are in nanoseconds


def test_the_p99_of_fewer_than_a_hundred_is_the_largest_and_of_more_the_nearest_rank():
    assert p99([0.3, 2.0, 0.1]) == 2.0
    assert p99([*range(1, 201)]) == 198


def test_a_learned_timeout_is_five_p99s_between_the_floor_and_the_timeout_without_learning():
    learned = Learned(floor=60)
    for seconds in (4.0, 5.0):
        learned.observe("train", seconds)
    assert learned.limit("train", ceiling=1800) is None  # two samples are too few: the declared one applies
    learned.observe("train", 30.0)
    assert learned.limit("train", ceiling=1800) == 150
    assert learned.limit("train", ceiling=100) == 100
    assert Learned(floor=60, beyond=True, samples=learned.samples).limit("train", ceiling=100) == 150
    quick = Learned(floor=60, samples={"eval": [1.0, 1.0, 1.0]})
    assert quick.limit("eval", ceiling=1800) == 60


def test_start_up_and_tear_down_are_not_learned_a_resume_loads_what_the_first_start_did_not():
    learned = Learned(floor=1)
    for _ in range(5):
        learned.observe("init", 2.0)
        learned.observe("shutdown", 2.0)
    assert learned.samples == {}


def test_steps_are_the_time_between_step_reports_and_the_first_after_start_up_is_not_one():
    learned = Learned(floor=1)
    seen = Intervals(learned)
    assert seen.write(1 * S, None, "init")
    assert seen.write(9 * S, None, "train")  # start-up ended: 8 s, never learned
    assert seen.write(12 * S, 1, "train")  # the first step: start-up's own, not sampled
    assert seen.write(14 * S, 2, "train") and seen.write(17 * S, 3, "train")
    assert not seen.write(18 * S, 3, "train")  # a beat without a new step is no progress
    assert learned.samples == {"train": [2.0, 3.0]}


def test_a_phase_runs_from_the_write_seen_before_it_and_the_first_step_after_it_is_not_sampled():
    learned = Learned(floor=1)
    seen = Intervals(learned)
    for at, step in ((10, 1), (11, 2), (13, 3)):
        seen.write(at * S, step, "train")
    seen.write(16 * S, 3, "checkpoint")  # after step 3's interval of 3 s, the save; begun at some time after 13 s
    seen.write(40 * S, 3, "checkpoint")  # a beat inside the save
    seen.write(45 * S, 3, "train")
    seen.write(50 * S, 4, "train")  # the step the save interrupted
    seen.write(54 * S, 5, "train")
    assert learned.samples == {"train": [1.0, 2.0, 3.0, 4.0], "checkpoint": [32.0]}


def test_a_phase_whose_start_was_not_seen_or_whose_end_never_came_is_no_sample():
    """A save cut by a kill leaves "3 checkpoint" behind: what the next attempt sees first is not its start."""
    learned = Learned(floor=1)
    seen = Intervals(learned)
    seen.write(100 * S, 3, "checkpoint")  # the first write this attempt saw
    seen.write(130 * S, 3, "train")
    seen.write(132 * S, 3, "eval")  # the attempt is killed during the evaluation
    assert learned.samples == {}


def test_a_declared_timeout_wins_and_training_is_judged_by_a_learned_one_only_once_steps_are_reported(tmp_path):
    from hacfg.agent.process.attempt import Limit, Supervisor

    learned = Learned(floor=1, samples={"train": [0.2, 0.3, 0.4], "checkpoint": [9.0, 9.0, 9.0]})
    supervisor = Supervisor(["true"], {}, hang_timeout=30, first_hang_timeout=60, heartbeat=tmp_path / "beat",
                            grace=1, phase_timeouts={"eval": 600}, learned=learned)
    assert supervisor._limit("train", steady=True, stepping=True) == Limit(2.0, "learned")
    assert supervisor._limit("train", steady=True, stepping=False) == Limit(30, "hang.timeout")
    assert supervisor._limit("checkpoint", steady=True, stepping=True) == Limit(30, "learned")  # 45 s, capped
    assert supervisor._limit("eval", steady=True, stepping=True) == Limit(600, "hang.phases")
    assert supervisor._limit("init", steady=False, stepping=False) == Limit(60, "initial")


def test_what_was_learned_survives_in_the_state_and_a_damaged_record_of_it_is_refused_whole():
    state = NodeState(learned={"train": [0.5, 0.7], "checkpoint": [30.0]})
    assert NodeState.from_json(json.loads(json.dumps(state.to_json()))) == state
    for learned, why in [
        ({"train": [0.5, "x", True], "eval": "slow"}, "learned: train: a sample that is not"),
        (None, "learned: not a mapping"),
        ({"train": [10**400]}, "learned: train: a sample"),  # made the agent exit 3 (OverflowError) on every start
        ({"train": [1e308] * 3}, "learned: train: a sample"),  # an infinite learned timeout: no hang ever declared
        ({"train": [0.0]}, "learned: train: a sample"),
        ({f"p{i}": [1.0] for i in range(PHASES + 1)}, f"more than {PHASES}"),
        ({"init": [1.0]}, "'init' is not a phase that is learned"),
        ({"x\x1b]0;": [1.0]}, "is not a phase that is learned"),
    ]:
        with pytest.raises(ValueError, match=re.escape(why)):
            NodeState.from_json({**state.to_json(), "learned": learned})


def test_what_is_learned_stays_within_the_bounds_a_state_is_read_back_with():
    learned = Learned(floor=1)
    for phase in [f"p{i}" for i in range(PHASES + 5)]:
        learned.observe(phase, 0.0)
        learned.observe(phase, 10**9)
    assert len(learned.samples) == PHASES
    assert set(map(tuple, learned.samples.values())) == {(SHORTEST, LONGEST)}
    assert NodeState.from_json(NodeState(learned=learned.samples).to_json()).learned == learned.samples


def test_a_floor_above_the_hang_timeout_it_stays_under_is_one_line_and_exit_2(cli):
    result = cli("agent", "--hang-timeout", "30s", "--learn-hang-timeouts", "--learn-floor", "2m", "--", "true")
    assert result.code == 2
    assert "floor of learned timeouts (2m) is longer than the hang timeout (30s)" in result.err
    assert "Traceback" not in result.err


def test_the_scenario_turns_learning_on_and_the_command_line_overrides_it(tmp_path):
    from hacfg.agent.settings import run_options

    config = tmp_path / "ha.yaml"
    config.write_text("version: 1\nscenario: single-node\nhang:\n  timeout: 30m\n  learn: true\n  learn_floor: 2m\n")
    policy = run_options(["true"], config, {}).policy
    assert (policy.learn_hang_timeouts, policy.learn_floor, policy.learn_beyond_hang_timeout) == (True, 120, False)
    given = {"learn_hang_timeouts": False, "learn_floor": "90s", "learn_beyond_hang_timeout": True}
    overridden = run_options(["true"], config, given).policy
    assert (overridden.learn_hang_timeouts, overridden.learn_floor, overridden.learn_beyond_hang_timeout) == (False, 90, True)


LEARNING = ("--hang-timeout", "20s", "--learn-hang-timeouts", "--learn-floor", "1s", "--grace", "1")
ENV = {"PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}


def _learned(tmp_path) -> dict[str, list[float]]:
    return saved_state(tmp_path / "state")["learned"]


def _hangs(tmp_path) -> list[dict]:
    return [e for e in read_events(tmp_path / "state") if e["event"] == "hang"]


@pytest.mark.slow
def test_a_save_twenty_steps_long_in_its_phase_is_no_hang_while_steps_are_judged_by_a_learned_timeout(tmp_path):
    result = agent(tmp_path, *LEARNING, child="stepper.py", args=(tmp_path / "ckpt", 0.15, 3, 16, "save", 3), env=ENV)
    assert (result.returncode, result.stdout, _hangs(tmp_path)) == (0, "done\n", [])
    learned = _learned(tmp_path)
    # training was judged by what it had learned (5 x p99 of steps of about 0.3 s, under 3 s on a
    # machine that is not starved): only its own phase kept the save alive
    assert len(learned["train"]) >= 3
    assert len(learned["checkpoint"]) == 1 and learned["checkpoint"][0] >= 3


@pytest.mark.slow
def test_a_stuck_step_is_caught_by_the_learned_timeout_and_the_timeout_that_fired_is_forgotten(tmp_path):
    result = agent(tmp_path, *LEARNING, child="stepper.py", args=(tmp_path / "ckpt", 0.15, 0, 16, "stuck"), env=ENV)
    [hang] = _hangs(tmp_path)
    assert (hang["timeout_from"], hang["learned"], hang["progress"], hang["phase"]) == ("learned", True, True, "train")
    assert 1 <= hang["timeout"] < 20 and hang["idle"] >= hang["timeout"]
    assert "no step progress" in result.stderr and "(learned)" in result.stderr
    assert "train" not in _learned(tmp_path)  # the next attempt would be judged by hang.timeout again


@pytest.mark.slow
def test_a_kill_in_the_middle_of_a_save_neither_shrinks_what_was_learned_nor_makes_the_next_attempt_hang(tmp_path):
    args = (tmp_path / "ckpt", 0.1, 1, 3, "save", 3, "killsave", 3, "save", 3)
    result = agent(tmp_path, *LEARNING, "--max-restarts", "1", child="stepper.py", args=args, env=ENV)
    assert (result.returncode, result.stdout.splitlines()[-1], _hangs(tmp_path)) == (0, "done", [])
    starts = [e for e in read_events(tmp_path / "state") if e["event"] == "attempt_start"]
    assert len(starts) == 2
    saves = _learned(tmp_path)["checkpoint"]
    # one whole save before the kill, three after it (the last judged by what was learned); the cut one is none
    assert len(saves) == 4 and min(saves) >= 1


@pytest.mark.slow
@pytest.mark.parametrize(("plan", "hangs"), [((4, "chatty"), True), (("chatty",), False)])
def test_once_steps_are_reported_output_without_progress_is_no_sign_of_life(tmp_path, plan, hangs):
    """Before the first step report, output counts as it always did."""
    args = (tmp_path / "ckpt", 0.1, 0, *plan)
    result = agent(tmp_path, "--hang-timeout", "2s", "--grace", "1", child="stepper.py", args=args, env=ENV)
    if hangs:
        [hang] = _hangs(tmp_path)
        assert (hang["progress"], hang["timeout_from"], hang["learned"]) == (True, "hang.timeout", False)
        assert "waiting for data" in hang["last_output"][-1] and "no step progress for 2s" in result.stderr
    else:
        assert (result.returncode, result.stdout.splitlines()[-1], _hangs(tmp_path)) == (0, "done", [])
