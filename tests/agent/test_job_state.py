"""Restart counters belong to one job: a final verdict closes them, a reschedule hands them on, and a
state written by another job is not taken over."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from kit.agents import agent_argv, read_events

pytestmark = pytest.mark.slow

FAIL_FIRST = 'test "$HACFG_ATTEMPT" -ge 2 || kill -9 $$'  # SIGKILLed in attempt 1, fine after
ALWAYS_FAIL = "kill -9 $$"


def run(state: Path, script: str, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in ("HACFG_JOB_ID", "MA_VJ_NAME")}
    argv = [*agent_argv(state, "--max-restarts", "1"), "sh", "-c", script]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, env={**clean, **env})


def decisions_since_start(state: Path) -> list[str]:
    events = read_events(state)
    last_start = max(i for i, e in enumerate(events) if e["event"] == "agent_start")
    return [e["action"] for e in events[last_start:] if e["event"] == "decision"]


def test_a_job_that_succeeded_leaves_no_budget_spent_for_the_next(tmp_path: Path) -> None:
    state = tmp_path / "state"
    assert run(state, FAIL_FIRST).returncode == 0
    second = run(state, ALWAYS_FAIL)
    assert decisions_since_start(state) == ["proc_restart", "job_reschedule"]  # a fresh budget of 1
    assert second.returncode == 138
    assert second.stderr.splitlines()[0] == (
        f"[hacfg] the job that left the state in {state} ended (success); starting from zero"
    )
    left = next(e for e in read_events(state) if e["event"] == "state_left")
    assert (left["ended"], left["job"]) == ("success", None)


def test_a_job_that_gave_up_closes_its_state_too(tmp_path: Path) -> None:
    state = tmp_path / "state"
    assert run(state, "exit 3").returncode == 3  # a user error, unconditional off: give up
    run(state, ALWAYS_FAIL)
    assert decisions_since_start(state) == ["proc_restart", "job_reschedule"]


def test_a_reschedule_hands_the_counters_to_the_same_job_started_again(tmp_path: Path) -> None:
    state = tmp_path / "state"
    assert run(state, ALWAYS_FAIL, MA_VJ_NAME="ma-job-1").returncode == 138  # the platform restarts the job
    again = run(state, ALWAYS_FAIL, MA_VJ_NAME="ma-job-1")
    assert decisions_since_start(state) == ["job_reschedule"]  # the budget stays spent
    assert again.stderr.splitlines()[0] == (
        f"[hacfg] taking over this job's counters from {state / 'state.json'}: 2 attempt(s), 1 of 1 restarts counted"
    )
    assert read_events(state)[-1]["exit_code"] == 138


def test_a_state_of_another_job_is_not_taken_over(tmp_path: Path) -> None:
    state = tmp_path / "state"
    assert run(state, ALWAYS_FAIL, HACFG_JOB_ID="train-a").returncode == 138
    other = run(state, ALWAYS_FAIL, MA_VJ_NAME="ma-job-b")
    assert decisions_since_start(state) == ["proc_restart", "job_reschedule"]
    assert other.stderr.splitlines()[0] == (
        f"[hacfg] the state in {state} is of job train-a, not of this one; starting from zero"
    )
    start = [e for e in read_events(state) if e["event"] == "agent_start"][-1]
    assert (start["job"], start["attempt"]) == ("ma-job-b", 0)
