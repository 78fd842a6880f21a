"""What the agent says, in its lines and its events, is what happened: the timeout that fired, how
each attempt ended, the checkpoints it did not see."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from kit.agents import agent_argv, read_events
from kit.paths import CHILDREN


@pytest.mark.slow
def test_a_hang_before_the_first_sign_of_life_is_reported_with_the_initial_timeout(tmp_path: Path) -> None:
    argv = [*agent_argv(tmp_path / "state", "--hang-timeout", "1s", "--initial-hang-timeout", "2s", "--grace", "1"), "sleep", "30"]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    (hang,) = [e for e in read_events(tmp_path / "state") if e["event"] == "hang"]
    assert hang["timeout"] == 2 and hang["idle"] >= 2
    assert "[hacfg] attempt 1 hung: no output and no heartbeat for 2s; stopping it" in result.stderr.splitlines()


def _saving(tmp_path: Path, folder: Path, seconds: float) -> tuple[subprocess.CompletedProcess, list[dict]]:
    """The agent on a script that saves into ``folder`` for ``seconds``; checkpoint.path is tmp_path/ckpt, every 1s."""
    scenario = tmp_path / "ha.yaml"
    scenario.write_text(
        f"version: 1\nscenario: single-node\njob:\n  name: demo\n  accelerator: cpu\n"
        f"checkpoint:\n  path: {tmp_path / 'ckpt'}\n  interval: 1s\nrestart:\n  max: 0\n"
    )
    argv = agent_argv(tmp_path / "state", "--config", str(scenario))
    result = subprocess.run(
        [*argv, sys.executable, str(CHILDREN / "save_every.py"), str(folder), str(seconds)],
        capture_output=True, text=True, timeout=60,
    )
    return result, read_events(tmp_path / "state")


@pytest.mark.slow
def test_a_script_saving_elsewhere_is_warned_of_once_naming_the_path_watched(tmp_path: Path) -> None:
    result, events = _saving(tmp_path, tmp_path / "elsewhere", 3.5)
    assert result.returncode == 0
    (overdue,) = [e for e in events if e["event"] == "checkpoint_overdue"]
    assert (overdue["path"], overdue["interval"], overdue["newest"]) == (str(tmp_path / "ckpt"), 1, None)
    assert 2 <= overdue["training"] < 3.5
    (line,) = [line for line in result.stderr.splitlines() if "no new complete checkpoint" in line]
    assert line.startswith(f"[hacfg] no new complete checkpoint under {tmp_path / 'ckpt'} in 2s of training, ")
    assert line.endswith("twice checkpoint.interval (1s): does the script save there? A restart would resume from the start")


@pytest.mark.slow
def test_a_script_saving_under_the_checkpoint_path_is_not_warned_of(tmp_path: Path) -> None:
    result, events = _saving(tmp_path, tmp_path / "ckpt", 3.5)
    assert result.returncode == 0
    assert not [e for e in events if e["event"] == "checkpoint_overdue"]
    assert "no new complete checkpoint" not in result.stderr
