"""SARIF as GitHub code scanning takes it: encoded URIs from the repository root, fingerprints, UTF-16 columns."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from urllib.parse import unquote

import pytest
from jsonschema import Draft4Validator, Draft7Validator
from kit.cli import run_hacfg
from kit.paths import REPO

SCHEMA = json.loads((REPO / "tests/data/sarif-schema-2.1.0.json").read_text())
# Paths a real repository has: a space, a '#', non-ASCII letters and an emoji.
SCENARIO = "my jobs/#1/ha.yaml"
BODY = "données/训练 😀.json"
ONE_LINE_BODY = '{"kind": "job", "metadata": {"name": "😀😀-job", "annotations": {"fault-tolerance/job-retry-num": 3}}}\n'


@pytest.fixture
def repo(tmp_path):
    root = tmp_path / "repo"
    root.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    (root / "pyproject.toml").write_text("[project]\nname = 'demo'\n")
    for name, text in {SCENARIO: "version: 1\nscenario: single-node\nhang: {timeout: 5m}\ncheckpoint: {path: obs://b/c, resume: true}\n", BODY: ONE_LINE_BODY}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def sarif(*args, cwd: Path, env: dict | None = None) -> dict:
    result = run_hacfg("lint", "-f", "sarif", *args, cwd=cwd, env=env)
    assert result.code in (0, 1), result.err
    document = json.loads(result.out)
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in Draft4Validator(SCHEMA, format_checker=Draft7Validator.FORMAT_CHECKER).iter_errors(document)]
    assert errors == []
    return document


def locations(document: dict) -> dict[str, dict]:
    """uri -> (rule, region) of each located result."""
    found = {}
    for result in document["runs"][0]["results"]:
        physical = result["locations"][0]["physicalLocation"]
        found.setdefault(physical["artifactLocation"]["uri"], []).append((result["ruleId"], physical["artifactLocation"].get("uriBaseId"), physical["region"]))
    return found


@pytest.mark.slow
def test_uris_are_encoded_and_relative_to_the_repository_root_wherever_hacfg_runs(repo):
    from_root = sarif(cwd=repo)
    from_subfolder = sarif("#1", "../données", cwd=repo / "my jobs")
    absolute = sarif(repo / SCENARIO, repo / BODY, cwd=repo.parent)
    assert locations(from_root) == locations(from_subfolder) == locations(absolute)
    uris = sorted(locations(from_root))
    assert uris == ["donn%C3%A9es/%E8%AE%AD%E7%BB%83%20%F0%9F%98%80.json", "my%20jobs/%231/ha.yaml"]
    assert sorted(unquote(u) for u in uris) == sorted([BODY, SCENARIO])
    for run in (from_root, from_subfolder, absolute):
        assert run["runs"][0]["originalUriBaseIds"] == {"%SRCROOT%": {"uri": repo.as_uri() + "/"}}
        assert all(base == "%SRCROOT%" for found in locations(run).values() for _, base, _ in found)


def test_a_file_outside_the_repository_gets_an_absolute_file_uri(repo, tmp_path):
    outside = tmp_path / "elsewhere #2" / "ha.yaml"
    outside.parent.mkdir()
    outside.write_text("version: 1\nscenario: single-node\nhang: {timeout: 5m}\ncheckpoint: {path: obs://b/c, resume: true}\n")
    [(rule, base, _)] = locations(sarif(outside, cwd=repo))[outside.as_uri()]
    assert (rule, base) == ("HA016", None)
    assert "%232" in outside.as_uri()


@pytest.mark.slow
def test_columns_count_utf16_code_units(repo):
    document = sarif(BODY, cwd=repo)
    assert document["runs"][0]["columnKind"] == "utf16CodeUnits"
    [(_, _, region)] = [r for r in next(iter(locations(document).values())) if r[0] == "HA007"]
    characters = ONE_LINE_BODY.index(": 3}") + 3  # the 1-based column of the 3, counting characters
    assert region["startColumn"] == characters + 2  # each emoji is two UTF-16 code units
    assert region["endColumn"] == region["startColumn"] + 1
    text = json.loads(run_hacfg("lint", "-f", "json", BODY, cwd=repo).out)
    assert [f["column"] for f in text["findings"] if f["rule"] == "HA007"] == [characters]  # text and JSON keep characters


@pytest.mark.slow
def test_fingerprints_survive_lines_moving(repo):
    before = sarif(cwd=repo)["runs"][0]["results"]
    (repo / SCENARIO).write_text("# a new comment on top\n\n" + (repo / SCENARIO).read_text())
    after = sarif(cwd=repo)["runs"][0]["results"]
    assert all("partialFingerprints" in r for r in before)
    assert sorted(r["partialFingerprints"]["hacfgFinding/v1"] for r in before) == sorted(r["partialFingerprints"]["hacfgFinding/v1"] for r in after)
    assert len({r["partialFingerprints"]["hacfgFinding/v1"] for r in before}) == len(before)


def test_rule_descriptions_are_short_text_and_the_help_keeps_the_markdown(repo):
    rules = {r["id"]: r for r in sarif(cwd=repo)["runs"][0]["tool"]["driver"]["rules"]}
    for rule in rules.values():
        full = rule["fullDescription"]["text"]
        assert full and "\n" not in full and not full.startswith("#") and len(full) < 1000
        assert full != rule["help"]["markdown"]
        assert full != rule["shortDescription"]["text"] and not full.startswith("```")
    assert rules["HA007"]["help"]["markdown"].count("## ") >= 3
    assert rules["HA005"]["fullDescription"]["text"].startswith("Fires for each of `restart.unconditional`")


def test_rules_carry_the_tags_and_precision_code_scanning_filters_by(repo):
    rules = {r["id"]: r["properties"] for r in sarif(cwd=repo)["runs"][0]["tool"]["driver"]["rules"]}
    assert rules["HA001"] == {"source": "hacfg", "tags": ["reliability", "checkpoint"], "precision": "high"}
    assert rules["HA016"]["tags"] == ["reliability", "hang"]
    assert rules["HA101"] == {"source": "hacfg", "tags": ["correctness", "hacfg"], "precision": "very-high"}
    assert all(p["precision"] in ("very-high", "high") and len(p["tags"]) == 2 for p in rules.values())


@pytest.mark.slow
def test_plugin_failures_have_a_location(repo):
    env = {"PYTHONPATH": str(REPO / "tests" / "data" / "plugins")}
    result = run_hacfg("--plugin", "broken_import", "lint", "-f", "sarif", cwd=repo, env=env)
    document = json.loads(result.out)
    assert [e.message for e in Draft4Validator(SCHEMA, format_checker=Draft7Validator.FORMAT_CHECKER).iter_errors(document)] == []
    failures = [r for r in document["runs"][0]["results"] if r["ruleId"] == "HA000"]
    assert failures
    linted = {"donn%C3%A9es/%E8%AE%AD%E7%BB%83%20%F0%9F%98%80.json", "my%20jobs/%231/ha.yaml"}
    assert all(r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] in linted for r in failures)
    (repo / ".hacfg.toml").write_text("fail-on = 'error'\n")  # with settings of its own, failures are shown there
    document = json.loads(run_hacfg("--plugin", "broken_import", "lint", "-f", "sarif", cwd=repo, env=env).out)
    failures = [r for r in document["runs"][0]["results"] if r["ruleId"] == "HA000"]
    assert [r["locations"][0]["physicalLocation"]["artifactLocation"] for r in failures] == [{"uri": ".hacfg.toml", "uriBaseId": "%SRCROOT%"}]
