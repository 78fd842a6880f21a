"""Plugins: found through entry points, listed, and isolated when they break."""

from __future__ import annotations

import json
import os
import sys

import pytest

from conftest import REPO, run_hacfg

PLUGINS = REPO / "tests" / "plugins"
BODY = '{"kind": "job", "metadata": {"name": "x", "annotations": {"fault-tolerance/job-retry-num": 3}}, "spec": {"volumes": [{}]}}\n'


@pytest.fixture
def site(tmp_path):
    """A folder on PYTHONPATH holding a real (unpacked) distribution with entry points, like pip leaves."""
    dist = tmp_path / "site" / "broken_plugins-1.2.3.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-plugins\nVersion: 1.2.3\n")
    (dist / "entry_points.txt").write_text(
        "[hacfg]\nbroken = broken_import\nraising = raising\ngarbage = garbage\nrival = claims\n"
    )
    return {"PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), str(PLUGINS)])}


def test_broken_plugins_are_named_once_and_everything_else_works(tmp_path, site):
    (tmp_path / "job.json").write_text(BODY)
    result = run_hacfg("lint", "-f", "json", "job.json", cwd=tmp_path, env=site)
    findings = json.loads(result.out)["findings"]
    assert result.code == 1
    assert ("HA007", "job.json") in {(f["rule"], f["path"]) for f in findings}  # built-in rules still ran
    plugin_errors = sorted(f["message"] for f in findings if f["rule"] == "HA000")
    assert plugin_errors == sorted([
        "plugin 'broken' failed to load: ImportError: libascendcl.so: cannot open shared object file",
        "rule RAI001 of plugin 'raising' raised KeyError: 'spec'",
        "plugin 'garbage' raised in hacfg_rules: returned int, expected a hacfg.rules.Rule",
        "plugin 'rival' raised in hacfg_rules: rule HA050: the HA prefix is hacfg's own; pick a prefix for your plugin",
        "plugin 'rival' raised in hacfg_rules: rule RAI001 is already provided by broken-plugins",
    ])
    assert "Traceback" not in result.err


def test_wrong_types_from_presets_and_targets_get_a_clear_message(tmp_path, site):
    result = run_hacfg("build", "--only", "annotations", "single-node", cwd=tmp_path, env=site)
    assert result.code == 0
    assert json.loads(result.out) == {"metadata": {"annotations": {"fault-tolerance/job-retry-num": "2"}}}
    assert "hacfg: plugin 'garbage' raised in hacfg_presets: returned str, expected a dict of name -> path" in result.err
    assert "hacfg: plugin 'garbage' raised in hacfg_targets: returned str, expected a hacfg.target.Target" in result.err
    assert result.err.count("plugin 'broken' failed to load") == 1


def test_autoload_can_be_turned_off(tmp_path, site):
    (tmp_path / "job.json").write_text(BODY)
    result = run_hacfg("lint", "-f", "json", "job.json", cwd=tmp_path, env={**site, "HACFG_DISABLE_PLUGIN_AUTOLOAD": "1"})
    assert [f["rule"] for f in json.loads(result.out)["findings"]] == ["HA007"]
    assert result.err == ""


def test_plugins_lists_distribution_version_and_what_each_provides(tmp_path, site):
    result = run_hacfg("plugins", cwd=tmp_path, env=site)
    assert "raising              broken-plugins 1.2.3" in result.out
    assert "rules: RAI001" in result.out
    assert "rules-checkpoint     hacfg" in result.out and "rules: HA001, HA002, HA011, HA017" in result.out


def test_plugin_option_loads_a_module_for_a_quick_trial(tmp_path):
    env = {"PYTHONPATH": str(PLUGINS)}
    result = run_hacfg("--plugin", "raising", "rules", cwd=tmp_path, env=env)
    assert "RAI001" in result.out and "(--plugin)" in result.out
    assert run_hacfg("rules", cwd=tmp_path, env=env).out.count("RAI001") == 0


def test_agent_reports_broken_prechecks_and_classifiers_as_events(tmp_path):
    env = {
        "PYTHONPATH": str(PLUGINS),
        "HACFG_PRECHECK_ROOT_MIN": "1K",
        "HACFG_PRECHECK_SHM_MIN": "1K",
        "VC_WORKER_HOSTS": "localhost",
    }
    config = tmp_path / "ha.yaml"
    config.write_text("version: 1\nscenario: single-node\njob: {accelerator: cpu}\nrestart: {max: 1}\n")
    result = run_hacfg("--plugin", "raising", "agent", "--config", config, "--state-dir", tmp_path / "state", "--", sys.executable, "-c", "pass", env=env)
    assert result.code == 138  # a pre-check that raises counts as failed
    assert "[hacfg] item=exploding status=failed detail=RuntimeError: probe crashed" in result.err
    # with pre-checks off, the classifier that raises is reported and the built-in one decides
    result = run_hacfg(
        "--plugin", "raising", "agent", "--config", config, "--no-precheck", "--state-dir", tmp_path / "s2", "--",
        sys.executable, "-c", "import os; os.kill(os.getpid(), 9)", env=env,
    )
    assert result.code == 138
    events = [json.loads(line) for line in (tmp_path / "s2" / "events.jsonl").read_text().splitlines()]
    failures = [e for e in events if e["event"] == "plugin_failure"]
    assert failures[0]["plugin"] == "raising" and failures[0]["error"] == "ValueError: classifier bug"
    assert [e["cause"] for e in events if e["event"] == "attempt_exit"] == ["environment", "environment"]
