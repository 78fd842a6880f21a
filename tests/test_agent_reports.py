"""What the agent says, in its lines and its events, is what happened: the timeout that fired, how
each attempt ended, the checkpoints it did not see."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from conftest import agent_argv, read_events


@pytest.mark.slow
def test_a_hang_before_the_first_sign_of_life_is_reported_with_the_initial_timeout(tmp_path: Path) -> None:
    argv = [*agent_argv(tmp_path / "state", "--hang-timeout", "1s", "--initial-hang-timeout", "2s", "--grace", "1"), "sleep", "30"]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    (hang,) = [e for e in read_events(tmp_path / "state") if e["event"] == "hang"]
    assert hang["timeout"] == 2 and hang["idle"] >= 2
    assert "[hacfg] attempt 1 hung: no output and no heartbeat for 2s; stopping it" in result.stderr.splitlines()
