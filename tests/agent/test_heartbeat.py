"""The heartbeat helper's phases, as the agent reads them, and the per-phase hang timeouts they select."""

import os
import sys
import time

import pytest
from kit.agents import agent, read_events
from kit.paths import REPO

from hacfg import heartbeat


@pytest.fixture
def beating(tmp_path, monkeypatch):
    path = tmp_path / "heartbeat"
    monkeypatch.setenv("HACFG_HEARTBEAT_FILE", str(path))
    monkeypatch.setenv("HACFG_HEARTBEAT_INTERVAL", "3600")  # only forced writes land after the first
    monkeypatch.setattr(heartbeat, "_last", float("-inf"))
    monkeypatch.setattr(heartbeat, "_step", None)
    monkeypatch.setattr(heartbeat, "_phase", heartbeat.TRAIN)
    monkeypatch.setattr(heartbeat, "_said", False)
    return path


def test_a_bare_beat_only_touches_the_file(beating):
    heartbeat.beat()
    assert beating.read_bytes() == b"" and heartbeat.read(beating) == (None, "train")


def test_a_phase_is_written_on_entry_and_exit_whatever_the_interval(beating):
    heartbeat.beat(step=7)
    assert heartbeat.read(beating) == (7, "train")
    with heartbeat.phase("eval"):
        assert heartbeat.read(beating) == (7, "eval")
        with heartbeat.phase("checkpoint"):
            assert beating.read_text() == "7 checkpoint\n"
        assert heartbeat.read(beating) == (7, "eval")
    assert heartbeat.read(beating) == (7, "train")


def test_the_first_step_is_written_at_once_the_next_at_the_interval(beating):
    with heartbeat.phase("init"):
        pass
    heartbeat.beat(step=1)  # the end of the start-up, which the agent times
    assert heartbeat.read(beating) == (1, "train")
    heartbeat.beat(step=2)
    assert heartbeat.read(beating) == (1, "train")


def test_a_phase_ends_even_when_its_block_raises(beating):
    with pytest.raises(KeyError), heartbeat.phase("data"):
        raise KeyError("shard")
    assert heartbeat.read(beating) == (None, "train")


def test_beat_can_name_the_phase_the_loop_is_in(beating):
    heartbeat.beat(phase="init")
    assert beating.read_text() == "- init\n"
    heartbeat.beat(step=1, phase="train")
    assert heartbeat.read(beating) == (1, "train")


def test_a_phase_name_with_spaces_is_refused(beating):
    with pytest.raises(ValueError, match="phase name"):
        heartbeat.beat(phase="my eval")


def test_save_step_runs_in_the_checkpoint_phase(beating, tmp_path):
    seen = []
    from hacfg.checkpoint import save_step

    save_step(tmp_path / "ckpt", 3, lambda folder: seen.append(heartbeat.read(beating)))
    assert seen == [(None, "checkpoint")] and heartbeat.read(beating) == (None, "train")


def test_an_old_or_foreign_file_reads_as_training(tmp_path):
    (tmp_path / "old").write_text("12\n")
    (tmp_path / "odd").write_text("x y z\n")
    assert heartbeat.read(tmp_path / "old") == (12, "train")
    assert heartbeat.read(tmp_path / "odd") == (None, "train")
    assert heartbeat.read(tmp_path / "absent") == (None, "train")


@pytest.mark.slow
@pytest.mark.parametrize("phase_timeout, hangs", [("checkpoint=10s", False), (None, True)])
def test_a_save_longer_than_the_hang_timeout_hangs_only_without_its_phase_timeout(tmp_path, phase_timeout, hangs):
    options = ["--hang-timeout", "1s", "--initial-hang-timeout", "20s"]
    options += ["--phase-timeout", phase_timeout] if phase_timeout else []
    env = {"PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
    result = agent(tmp_path, *options, child="slow_save.py", args=(tmp_path / "ckpt",), env=env)
    hang = [e for e in read_events(tmp_path / "state") if e["event"] == "hang"]
    if hangs:
        assert hang and hang[0]["phase"] == "checkpoint" and hang[0]["timeout"] == 1
        assert "hung in phase checkpoint" in result.stderr
    else:
        assert (result.returncode, result.stdout, hang) == (0, "done\n", [])
        assert os.path.isdir(tmp_path / "ckpt" / "step_3")


def test_a_malformed_phase_timeout_is_one_line_and_exit_2(cli):
    result = cli("agent", "--phase-timeout", "checkpoint", "--", "true")
    assert result.code == 2 and "--phase-timeout: 'checkpoint' is not NAME=DURATION" in result.err


def test_the_scenarios_phases_and_the_command_lines_make_the_agents_phase_timeouts(tmp_path):
    from hacfg.agent.settings import run_options

    config = tmp_path / "ha.yaml"
    config.write_text("version: 1\nscenario: single-node\nhang:\n  timeout: 5m\n  phases: {checkpoint: 30m, eval: 20m}\n")
    policy = run_options(["true"], config, {"phase_timeout": ["data=90s", "eval=25m"]}).policy
    assert (policy.hang_timeout, policy.phase_timeout) == (300, (("checkpoint", 1800), ("eval", 1200), ("data", 90), ("eval", 1500)))
    assert dict(policy.phase_timeout)["eval"] == 1500  # the command line's, given last, wins


def test_a_phase_name_the_heartbeat_could_not_write_is_a_finding(cli, tmp_path):
    config = tmp_path / "ha.yaml"
    config.write_text("version: 1\nscenario: single-node\nhang:\n  phases: {my eval: 30m}\n")
    result = cli("lint", "--select", "HA102", config)
    assert result.code == 1 and result.out.startswith(f"{config}:4:") and "(got 'my eval')" in result.out


@pytest.mark.slow
@pytest.mark.parametrize(("phase", "child", "says"), [("init", "slow_init.py", "done\n"), ("shutdown", "slow_shutdown.py", "trained\n")])
def test_start_up_and_tear_down_have_the_initial_hang_timeout_unless_declared(tmp_path, phase, child, says):
    env = {"PYTHONPATH": str(REPO)}
    result = agent(tmp_path, "--hang-timeout", "1s", "--initial-hang-timeout", "20s", child=child, env=env)
    assert (result.returncode, result.stdout) == (0, says)
    (tmp_path / "declared").mkdir()
    declared = agent(tmp_path / "declared", "--hang-timeout", "1s", "--initial-hang-timeout", "20s",
                     "--phase-timeout", f"{phase}=1s", child=child, env=env)
    assert f"hung in phase {phase}" in declared.stderr


def test_a_phase_declared_before_the_watch_begins_still_counts(tmp_path):
    """A warm fork runs at once: its init phase may be on disk before the agent starts watching."""
    from hacfg.agent.process.attempt import Supervisor, start_cold

    beat = tmp_path / "heartbeat"
    beat.write_text("16 train\n")  # the previous attempt's
    script = "from hacfg import heartbeat\nimport time\nwith heartbeat.phase('init'):\n print('started', flush=True)\n time.sleep(1.5)\n"

    def fast_start(argv: list[str], env: dict[str, str]):
        proc = start_cold(argv, env)
        while heartbeat.read(beat)[1] != "init":
            time.sleep(0.01)
        return proc

    env = {**os.environ, "PYTHONPATH": str(REPO), "HACFG_HEARTBEAT_FILE": str(beat)}
    supervisor = Supervisor([sys.executable, "-c", script], env, hang_timeout=0.3, first_hang_timeout=20,
                            heartbeat=beat, grace=1, launch=fast_start)
    result = supervisor.run()
    assert (result.hung, result.exit_code) == (False, 0)


def test_a_bare_beat_never_shows_the_last_attempts_step_as_this_ones(tmp_path):
    """A bare ``beat()`` only touches the file: the step the last attempt left in it is not this one's."""
    from hacfg.agent.process.attempt import Supervisor

    beat = tmp_path / "heartbeat"
    beat.write_text("16 train\n")  # the previous attempt's
    script = "from hacfg import heartbeat\nimport time\nheartbeat.beat()\ntime.sleep(0.5)\nheartbeat.beat(step=1)\n"
    env = {**os.environ, "PYTHONPATH": str(REPO), "HACFG_HEARTBEAT_FILE": str(beat)}
    seen: dict[str, float] = {}
    supervisor = Supervisor([sys.executable, "-c", script], env, hang_timeout=None, first_hang_timeout=None,
                            heartbeat=beat, grace=1, on_milestone=lambda event, after: seen.setdefault(event, after))
    assert supervisor.run().exit_code == 0
    assert seen["first_step"] >= seen["first_activity"] + 0.45, seen
