"""The restart rules, classification and checkpoint layouts, as plain functions on real files."""

from __future__ import annotations

import signal

import pytest

from hacfg.agent.checkpoints import newest_complete
from hacfg.agent.classify import classify
from hacfg.plugin.recovery import Failure
from hacfg.restart.policy import RETRY_ELSEWHERE, Budgets, Policy, decide


def run(causes, policy, progress=None):
    budgets = Budgets()
    actions = []
    for i, cause in enumerate(causes):
        decision = decide(cause, budgets, policy, progressed=bool(progress and progress[i]), command_code=1)
        actions.append(decision.action)
        if decision.exit_code is not None:
            break
    return actions, budgets


def test_environment_faults_spend_the_budget_then_ask_for_a_reschedule():
    actions, budgets = run(["environment"] * 5, Policy(max_restarts=3, pod_reschedules=2))
    assert actions == ["proc_restart"] * 3 + ["pod_reschedule"]
    assert (budgets.counted, budgets.restarts) == (3, 3)


def test_a_fault_no_restart_here_can_fix_moves_at_once_unless_restarts_are_off():
    budgets = Budgets()
    moved = decide("environment", budgets, Policy(max_restarts=3, pod_reschedules=1), progressed=False,
                   command_code=1, relocate=True)
    assert (moved.action, moved.exit_code, budgets.counted) == ("pod_reschedule", RETRY_ELSEWHERE, 0)
    off = decide("environment", Budgets(), Policy(), progressed=False, command_code=1, relocate=True)
    assert (off.action, off.exit_code) == ("give_up", 1)


def test_a_full_disk_is_given_up_with_what_to_free_whatever_the_budgets():
    policy = Policy(max_restarts=10, unconditional=True, hang_retry=True)
    decision = decide("disk_full", Budgets(), policy, progressed=True, command_code=1)
    assert (decision.action, decision.exit_code) == ("give_up", 1) and "free space on it" in decision.reason


def test_user_errors_need_unconditional_and_stop_after_three_in_a_row():
    assert run(["user"], Policy(max_restarts=10))[0] == ["give_up"]
    actions, budgets = run(["user"] * 5, Policy(max_restarts=10, unconditional=True))
    assert actions == ["proc_restart"] * 3 + ["give_up"]
    assert budgets.counted == 3


def test_unconditional_restarts_are_bounded_by_the_budget_too():
    assert run(["user"] * 5, Policy(max_restarts=2, unconditional=True))[0] == ["proc_restart", "proc_restart", "give_up"]


def test_hangs_do_not_count_and_stop_after_three_in_a_row():
    actions, budgets = run(["hang"] * 5, Policy(max_restarts=1, hang_retry=True))
    assert actions == ["proc_restart"] * 3 + ["job_reschedule"]
    assert (budgets.counted, budgets.hang_streak, budgets.restarts) == (0, 3, 3)


def test_progress_resets_the_streaks():
    actions, _ = run(["user"] * 6, Policy(max_restarts=10, unconditional=True), progress=[False, False, False, True, False, False])
    assert actions == ["proc_restart"] * 6


def test_mixed_faults_share_the_counted_budget():
    actions, budgets = run(["environment", "user", "hang", "environment", "user"], Policy(max_restarts=3, unconditional=True, hang_retry=True))
    assert actions == ["proc_restart", "proc_restart", "proc_restart", "proc_restart", "give_up"]
    assert budgets.counted == 3 and budgets.restarts == 4


def test_without_auto_restart_the_agent_passes_the_code_through():
    decision = decide("environment", Budgets(), Policy(), progressed=False, command_code=137)
    assert (decision.action, decision.exit_code) == ("give_up", 137)
    assert decide("environment", Budgets(counted=1), Policy(max_restarts=1), progressed=False, command_code=137).exit_code == RETRY_ELSEWHERE


@pytest.mark.parametrize(
    ("failure", "cause"),
    [
        (Failure(None, signal.SIGKILL, ()), "environment"),
        (Failure(137, None, ()), "environment"),
        (Failure(1, None, ("RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1191, unhandled system error",)), "environment"),
        (Failure(1, None, ("torch.cuda: CUDA error: an illegal memory access was encountered",)), "environment"),
        (Failure(1, None, ("ConnectionResetError: [Errno 104] Connection reset by peer",)), "environment"),
        (Failure(1, None, ("Traceback (most recent call last):", '  File "train.py", line 3', "ValueError: bad lr")), "user"),
        (Failure(2, None, ("usage: train.py [-h]",)), "user"),
        (Failure(None, signal.SIGTERM, (), hung=True), "hang"),
    ],
)
def test_classification(failure, cause):
    assert classify(failure).cause == cause


def test_checkpoint_layouts_choose_the_newest_complete(tmp_path):
    def make(name, *files):
        path = tmp_path / name
        path.mkdir(parents=True, exist_ok=True)
        for file in files:
            (path / file).write_text("x")
        return path

    assert newest_complete(tmp_path) is None
    make("checkpoint-100", "trainer_state.json")
    make("checkpoint-300", "model.safetensors")  # partial: never chosen
    assert newest_complete(tmp_path).path == tmp_path / "checkpoint-100"
    make("step_200", ".complete")
    make("step_400")
    assert newest_complete(tmp_path).path == tmp_path / "step_200"
    make("dcp_250", "__0_0.distcp", ".metadata")
    make("dcp_500", "__0_0.distcp")  # .metadata is written last
    assert newest_complete(tmp_path).path == tmp_path / "dcp_250"
    make("global_step260")
    (tmp_path / "latest").write_text("global_step260\n")
    assert newest_complete(tmp_path).path == tmp_path / "global_step260"
    make("iter_0000270")
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("270")
    assert newest_complete(tmp_path).path == tmp_path / "iter_0000270"
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("900")  # points at nothing: iter_0000270 is no longer vouched for
    assert newest_complete(tmp_path).path == tmp_path / "global_step260"


def test_accelerator_activity_counts_only_when_it_changes():
    from hacfg.agent.process.accelerator import UtilizationProbe

    samples = iter([[100, 100], [100, 100], [100, 99], [100, 100]])
    stuck = UtilizationProbe(lambda: next(samples))
    for _ in range(4):
        stuck.poll()
    assert not stuck.changing()  # a rank stuck in a collective reads a flat 100%
    working = iter([[30, 90], [85, 91], [40, 90]])
    busy = UtilizationProbe(lambda: next(working))
    for _ in range(3):
        busy.poll()
    assert busy.changing()
    broken = UtilizationProbe(lambda: 1 / 0)
    broken.poll()
    assert not broken.changing()
