"""``hacfg events`` with no file: it reads the logs where the agent writes them by default."""

from __future__ import annotations

import json
from pathlib import Path

RECORD = {"time": "2026-01-01T00:00:00.000Z", "event": "agent_start", "pid": 1}


def _log(folder: Path, node: int) -> Path:
    path = folder / ".hacfg" / f"node-{node}" / "events.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({**RECORD, "node": node}) + "\n")
    return path


def test_the_checkpoint_path_of_ha_yaml_in_the_working_directory(cli, project):
    ckpt = project / "ckpt"
    _log(ckpt, 0), _log(ckpt, 1)
    (project / "ha.yaml").write_text(f"version: 1\nscenario: single-node\ncheckpoint:\n  path: {ckpt}\n")
    result = cli("events", "--format", "json")
    assert result.code == 0, result.err
    assert [record["node"] for record in json.loads(result.out)["events"]] == [0, 1]


def test_the_checkpoint_path_of_the_config_named(cli, project, tmp_path):
    ckpt = tmp_path / "elsewhere"
    _log(ckpt, 0)
    scenario = tmp_path / "job.ha.yaml"
    scenario.write_text(f"version: 1\nscenario: single-node\ncheckpoint:\n  path: {ckpt}\n")
    assert json.loads(cli("events", "--config", scenario, "-f", "json").out)["events"][0]["event"] == "agent_start"


def test_without_a_scenario_file_the_working_directory(cli, project):
    _log(project, 0)
    assert cli("events").code == 0


def test_nothing_found_names_the_default_it_looked_at(cli, project):
    result = cli("events")
    assert result.code == 2
    assert result.err == (
        "hacfg: error: no event logs at .hacfg/node-*/events.jsonl (no --config and no ./ha.yaml); "
        "name them: hacfg events PATH/.hacfg/node-*/events.jsonl\n"
    )
    (project / "ha.yaml").write_text(f"version: 1\nscenario: single-node\ncheckpoint:\n  path: {project / 'ckpt'}\n")
    assert f"no event logs at {project / 'ckpt'}/.hacfg/node-*/events.jsonl (checkpoint.path of ha.yaml)" in cli("events").err
