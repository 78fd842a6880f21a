"""One agent run's settings are checked once, when they are made: contradictions are one line and exit 2."""

from __future__ import annotations

import pytest

from hacfg.agent.options import RunOptions
from hacfg.restart.policy import Policy
from hacfg.scenario.source import InputError


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (("--no-warm", "--preload", "json"), "--preload names what a warm interpreter imports, and --no-warm turns them off"),
        (("--hang-timeout", "10m", "--initial-hang-timeout", "1m"), "the initial hang timeout (1m) is shorter than the hang timeout (10m)"),
    ],
)
def test_settings_that_contradict_each_other_are_refused_before_anything_runs(cli, tmp_path, flags, says):
    marker = tmp_path / "ran"
    result = cli("agent", "--state-dir", tmp_path / "state", *flags, "--", "touch", marker)
    assert result.code == 2
    assert len(result.err.splitlines()) == 1
    assert says in result.err
    assert not marker.exists() and not (tmp_path / "state").exists()


def test_settings_that_agree_make_options_handed_down_whole():
    policy = Policy(hang_detect=True, hang_timeout=60.0, initial_hang_timeout=60.0)
    options = RunOptions(("python", "train.py"), policy, preload=("torch",))
    assert (options.policy.first_hang_timeout, options.preload, options.warm) == (60.0, ("torch",), True)
    with pytest.raises(InputError, match="no command"):
        RunOptions((), policy)
