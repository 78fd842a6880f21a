"""Presets carry platform policy; what only the user knows is judged as the user's file states it."""

from __future__ import annotations

import json

import pytest
from kit.cli import findings
from kit.paths import REPO

from hacfg.plugin.provided import presets
from hacfg.scenario import modelarts as ma
from hacfg.scenario.config import load_config
from hacfg.scenario.model import Checkpoint

OUTPUT_CHANNEL = "/home/ma-user/modelarts/outputs/train_url_0"
STATED = "checkpoint: {path: obs://b/ckpt, interval: 30m, resume: true}\n"


@pytest.mark.parametrize("scenario", ["single-node", "multi-node", "llm-long-term"])
@pytest.mark.parametrize("how", ["scenario: {name}\n", "scenario: {name}\nextends: {name}\n", "scenario: {name}\nextends: {preset}\n"])
def test_a_preset_never_supplies_what_only_the_user_knows(cli, write, scenario, how):
    preset = presets()[scenario]
    path = write("ha.yaml", "version: 1\n" + how.format(name=scenario, preset=preset))
    assert load_config(path, presets()).config.checkpoint == Checkpoint(path=None, interval=None, resume=False)
    found = {f["rule"]: f for f in findings(cli, path)}
    assert {"HA001", "HA017"} <= set(found)
    assert found["HA001"]["line"] == (3 if "extends" in how else 2) and found["HA001"]["message"].endswith(
        f"set checkpoint.path: {OUTPUT_CHANNEL} (the {scenario} preset's recommendation)"
    )
    assert "set checkpoint.resume: true" in found["HA017"]["message"]
    assert "inherited" not in found["HA001"]["message"]
    if scenario == "llm-long-term":
        assert "set checkpoint.interval: 30m (the llm-long-term preset's recommendation)" in found["HA011"]["message"]


def test_the_one_line_the_message_names_makes_the_file_clean(cli, write):
    path = write("ha.yaml", "version: 1\nscenario: llm-long-term\n")
    assert findings(cli, path, keys="rule") == {"HA001", "HA011", "HA017"}
    path.write_text(f"version: 1\nscenario: llm-long-term\ncheckpoint: {{path: {OUTPUT_CHANNEL}, interval: 30m, resume: true}}\n")
    assert findings(cli, path, keys="rule") == set()


def test_the_users_own_base_file_may_state_them(cli, write):
    write("base/team.yaml", f"version: 1\nscenario: llm-long-term\n{STATED}")
    path = write("jobs/ha.yaml", "version: 1\nscenario: llm-long-term\nextends: ../base/team.yaml\n")
    config = load_config(path, presets()).config
    assert config.checkpoint.path == "obs://b/ckpt" and config.checkpoint.resume
    assert findings(cli, path, keys="rule") == set()


def test_init_writes_the_lines_for_the_user_to_confirm(cli, tmp_path):
    for scenario in ("single-node", "multi-node", "llm-long-term"):
        target = tmp_path / f"{scenario}.ha.yaml"
        assert cli("init", "--scenario", scenario, "-o", target).code == 0
        text = target.read_text()
        assert f"path: {OUTPUT_CHANNEL}" in text and "resume: true" in text and "interval:" in text
        assert findings(cli, target, keys="rule") == set()


def test_the_preset_annotations_are_still_table_4(cli):
    result = cli("build", "--only", "annotations", REPO / "presets" / "multi-node.yaml")
    assert json.loads(result.out) == {
        "metadata": {
            "annotations": {
                ma.JOB_RETRY_NUM: "3",
                ma.UNCONDITIONAL_RETRY: "true",
                ma.HANG_RETRY: "true",
            }
        }
    }


TABLE_4 = {
    "single-node": ({ma.JOB_RETRY_NUM: "2"}, "restart: {max: 2}\n"),
    "multi-node": (
        {ma.JOB_RETRY_NUM: "3", ma.UNCONDITIONAL_RETRY: "true", ma.HANG_RETRY: "true"},
        "restart: {max: 3, unconditional: true, on_hang: true}\n",
    ),
    "llm-long-term": (
        {ma.JOB_RETRY_NUM: "5", ma.UNCONDITIONAL_RETRY: "true", ma.HANG_RETRY: "true", ma.POD_RETRY_NUM: "3"},
        "restart: {max: 5, unconditional: true, on_hang: true, pod_reschedules: 3}\n",
    ),
}


def _body(annotations: dict, nodes: int) -> str:
    return json.dumps(
        {
            "kind": "job",
            "metadata": {"name": "job1", "annotations": annotations},
            "algorithm": {"outputs": [{"name": "train_url", "remote": {"obs": {"obs_url": "/b/out/"}}}]},
            "spec": {"resource": {"flavor_id": "modelarts.p3.large.public", "node_count": nodes}},
        }
    )


@pytest.mark.parametrize("platform", ["huaweicloud", "otc"])
@pytest.mark.parametrize("scenario", list(TABLE_4))
def test_table_4_lints_clean_as_scenario_and_as_body(cli, write, scenario, platform):
    annotations, restart = TABLE_4[scenario]
    nodes = {"single-node": 1, "multi-node": 2, "llm-long-term": 8}[scenario]
    if platform == "otc" and int(annotations[ma.JOB_RETRY_NUM]) > 3:
        pytest.skip("OTC allows at most 3 restarts")
    scenario_file = write("ha.yaml", f"version: 1\nscenario: {scenario}\njob: {{nodes: {nodes}}}\n{STATED}{restart}")
    body_file = write("body.json", _body(annotations, nodes))
    assert findings(cli, scenario_file, "--platform", platform, keys="rule") == set()
    assert findings(cli, body_file, "--platform", platform, keys="rule") == set()


@pytest.mark.parametrize(
    ("restart", "annotations", "expected"),
    [
        ("{max: 3, unconditional: true, on_hang: false}", {ma.JOB_RETRY_NUM: "3", ma.UNCONDITIONAL_RETRY: "true"}, {"HA003", "HA009"}),
        ("{max: 2, unconditional: true, on_hang: true}", {ma.JOB_RETRY_NUM: "2", ma.UNCONDITIONAL_RETRY: "true", ma.HANG_RETRY: "true"}, {"HA009"}),
        ("{max: 4, unconditional: true, on_hang: true}", {ma.JOB_RETRY_NUM: "4", ma.UNCONDITIONAL_RETRY: "true", ma.HANG_RETRY: "true"}, set()),
        ("{max: 3, unconditional: true, on_hang: true}", {ma.JOB_RETRY_NUM: "3", ma.UNCONDITIONAL_RETRY: "true", ma.HANG_RETRY: "true"}, set()),
    ],
)
def test_one_verdict_per_meaning(cli, write, restart, annotations, expected):
    scenario_file = write("ha.yaml", f"version: 1\nscenario: multi-node\n{STATED}restart: {restart}\n")
    body_file = write("body.json", _body(annotations, 2))
    assert findings(cli, scenario_file, keys="rule") == findings(cli, body_file, keys="rule") == expected


@pytest.mark.parametrize("max_", [1, 2, 3])
def test_no_advice_beyond_what_otc_allows(cli, write, max_):
    scenario_file = write("ha.yaml", f"version: 1\nscenario: single-node\nplatform: otc\n{STATED}restart: {{max: {max_}, unconditional: true}}\n")
    body_file = write("body.json", _body({ma.JOB_RETRY_NUM: str(max_), ma.UNCONDITIONAL_RETRY: "true"}, 1))
    for found in (findings(cli, scenario_file), findings(cli, body_file, "--platform", "otc")):
        (ha009,) = [f for f in found if f["rule"] == "HA009"]
        assert "above" not in ha009["message"] and "recommended combination" in ha009["message"]
    huaweicloud = [f for f in findings(cli, body_file) if f["rule"] == "HA009"]
    assert "above 3" in huaweicloud[0]["message"]
