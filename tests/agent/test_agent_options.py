"""One agent run's settings are checked once, when they are made: contradictions are one line and exit 2."""

from __future__ import annotations

import dataclasses
import json

import pytest
import typer
from kit.paths import REPO

from hacfg.agent.options import RunOptions
from hacfg.agent.settings import SETTINGS, run_options
from hacfg.cli.app import app
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


RAW = {"count": "3", "seconds": "7", "share": "0.5", "duration": "90s", "durations": "eval=25m", "path": "/tmp/somewhere", "text": "json"}
TEXTS = {"--rdzv-endpoint": "node-0:29400", "--metrics-port": "9464"}


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda setting: setting.field)
def test_every_setting_goes_from_its_flag_to_the_field_of_its_name(setting):
    """The command line's own parser makes the flag's value, and the run's options put it on the
    field the flag names: nothing between them renames a setting."""
    senses = setting.flag.split("/")
    flag = senses[-1] if setting.default is True else senses[0]  # the sense that changes something
    argv = [flag] if setting.kind == "switch" else [flag, TEXTS.get(flag, RAW[setting.kind])]
    command = typer.main.get_command(app).commands["agent"]
    parsed = command.make_context("agent", [*argv, "--", "true"]).params
    given = {name: value for name, value in parsed.items() if name not in ("command", "config")}
    assert [name for name, value in given.items() if value not in (None, [], ())] == [setting.field]

    def field(options):
        return getattr(options.policy if hasattr(options.policy, setting.field) else options, setting.field)

    assert field(run_options(["true"], None, given)) == setting.value(given[setting.field])
    assert field(run_options(["true"], None, given)) != field(run_options(["true"], None, {}))


@pytest.mark.parametrize("setting", [s for s in SETTINGS if s.scenario], ids=lambda setting: setting.field)
def test_a_setting_that_overrides_the_scenario_names_a_key_it_has_and_sets_the_policy(setting):
    schema = json.loads((REPO / "schemas" / "hacfg.schema.json").read_text())
    node = schema
    for part in setting.scenario.split("."):
        node = node["properties"][part]
        node = schema["$defs"][node["$ref"].rsplit("/", 1)[1]] if "$ref" in node else node
    assert setting.field in {field.name for field in dataclasses.fields(Policy)}


@pytest.mark.parametrize("share", ["0", "1.5"])
def test_a_peer_copy_share_outside_its_range_is_refused(cli, tmp_path, share):
    result = cli("agent", "--state-dir", tmp_path / "state", "--peer-copy-share", share, "--", "true")
    assert result.code == 2 and "--peer-copy-share" in result.err, result.err
