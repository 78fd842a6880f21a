"""The scenario model: presets merged underneath, durations, ranges, and errors at file:line:col."""

from __future__ import annotations

from datetime import timedelta

import pytest

from hacfg.plugin.provided import presets
from hacfg.scenario.config import ConfigInvalid, load_config
from hacfg.scenario.model import Checkpoint, format_duration, parse_duration


def errors_of(path, **kwargs) -> list[str]:
    with pytest.raises(ConfigInvalid) as caught:
        load_config(path, presets(), **kwargs)
    return [str(e) for e in caught.value.errors]


@pytest.mark.parametrize(
    ("text", "expected"),
    [("90s", 90), ("30m", 1800), ("2h", 7200), ("1d", 86400), ("1h30m", 5400)],
)
def test_durations(text, expected):
    assert parse_duration(text) == timedelta(seconds=expected)
    assert parse_duration(format_duration(parse_duration(text))) == parse_duration(text)


@pytest.mark.parametrize("bad", ["30", "m", "30 minutes", "1.5h", ""])
def test_bad_durations(bad):
    with pytest.raises(ValueError):
        parse_duration(bad)


def test_the_scenario_preset_is_the_base(write):
    path = write("ha.yaml", """
        version: 1
        scenario: multi-node
        job: {name: demo, nodes: 4}
        restart: {max: 8}
    """)
    config = load_config(path, presets()).config
    assert config.job.nodes == 4
    assert config.restart.max == 8
    assert config.restart.unconditional and config.restart.on_hang  # from the multi-node preset
    # Where and how often the script saves, and whether it resumes, only the user knows.
    assert config.checkpoint == Checkpoint()


def test_extends_a_relative_file_over_its_own_preset(write):
    write("base/team.yaml", """
        version: 1
        scenario: llm-long-term
        job: {accelerator: npu, environment: {A: "1"}}
    """)
    path = write("jobs/ha.yaml", """
        version: 1
        scenario: llm-long-term
        extends: ../base/team.yaml
        job: {name: run7, environment: {B: 2}}
    """)
    config = load_config(path, presets()).config
    assert config.job.accelerator == "npu"
    assert config.job.environment == {"A": "1", "B": "2"}
    assert config.restart.pod_reschedules == 3  # from llm-long-term, under team.yaml


def test_extends_cycle_is_reported(write):
    write("a.yaml", "version: 1\nscenario: single-node\nextends: b.yaml\n")
    path = write("b.yaml", "version: 1\nscenario: single-node\nextends: a.yaml\n")
    with pytest.raises(Exception, match="extends cycle"):
        load_config(path, presets())


def test_unknown_preset_suggests_one(write):
    path = write("ha.yaml", "version: 1\nscenario: multi-node\nextends: multinode\n")
    with pytest.raises(Exception, match=r"ha.yaml:3:10: extends: unknown preset 'multinode'; did you mean 'multi-node'\?"):
        load_config(path, presets())


def test_every_error_is_reported_with_its_position(write):
    path = write("ha.yaml", """
        version: 1
        scenario: multi-nod
        job:
          nodes: 0
          acelerator: gpu
        restart:
          unconditional: "yes"
        hang: {timeout: 30}
    """)
    assert errors_of(path) == [
        f"{path}:2:11: scenario: Input should be 'single-node', 'multi-node' or 'llm-long-term' (got 'multi-nod'); did you mean 'multi-node'?",
        f"{path}:4:10: job.nodes: Input should be greater than or equal to 1 (got 0)",
        f"{path}:5:3: unknown key 'acelerator' in job; did you mean 'accelerator'?",
        f"{path}:7:18: restart.unconditional: Input should be a valid boolean (got 'yes')",
        f"{path}:8:17: hang.timeout: a duration needs a unit, like '30m' or '2h' (got 30)",
    ]


def test_missing_keys_and_non_mappings(write):
    path = write("a.yaml", "version: 1\njob: {nodes: 2}\n")
    assert errors_of(path) == [f"{path}:1:1: missing required key 'scenario'"]
    assert "is a mapping of keys" in errors_of(write("b.yaml", "- 1\n"))[0]


@pytest.mark.parametrize(("platform", "maximum"), [("huaweicloud", 128), ("otc", 3)])
def test_restart_limits_follow_the_platform(write, platform, maximum):
    ok = write("ok.yaml", f"version: 1\nscenario: single-node\nplatform: {platform}\nrestart: {{max: {maximum}}}\n")
    assert load_config(ok, presets()).config.restart.max == maximum
    over = write("over.yaml", f"version: 1\nscenario: single-node\nplatform: {platform}\nrestart: {{max: {maximum + 1}}}\n")
    assert errors_of(over)[0].startswith(f"{over}:4:16: restart.max:")


def test_platform_override_applies_the_otc_limit(write):
    path = write("ha.yaml", "version: 1\nscenario: multi-node\nrestart: {max: 5}\n")
    assert load_config(path, presets()).config.restart.max == 5
    assert errors_of(path, platform="otc") == [f"{path}:3:16: restart.max: otc allows 1 to 3 restarts (0 turns auto restart off), got 5"]


def test_errors_inherited_from_a_base_file_point_at_that_file(write):
    base = write("base.yaml", "version: 1\nscenario: single-node\njob: {nodes: -1}\n")
    path = write("ha.yaml", "version: 1\nscenario: single-node\nextends: base.yaml\n")
    assert errors_of(path) == [f"{base}:3:14: job.nodes: Input should be greater than or equal to 1 (got -1)"]


def test_builtin_presets_are_installed():
    assert set(presets()) >= {"single-node", "multi-node", "llm-long-term"}
