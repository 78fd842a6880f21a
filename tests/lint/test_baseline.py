"""A baseline: adopt hacfg in a repository that already has findings, and see only new ones."""

from __future__ import annotations

import json

from jsonschema import Draft4Validator, Draft7Validator
from kit.paths import REPO

SARIF_SCHEMA = json.loads((REPO / "tests/data/sarif-schema-2.1.0.json").read_text())

RISKY = """\
version: 1
scenario: single-node
checkpoint: {path: null}
restart:
  max: 2
"""
# The same scenario, reformatted: a comment and blank lines on top, block style, keys in another order.
REFORMATTED = """\
# the training team's job


restart:
  max: 2
checkpoint:
  path: null
scenario: single-node
version: 1
"""
FIXED = """\
version: 1
scenario: single-node
checkpoint: {path: /mnt/ckpt, resume: true}
restart:
  max: 2
"""


def repository(tmp_path, **files: str):
    (tmp_path / ".git").mkdir()
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path


def test_a_written_baseline_reports_nothing_until_something_new_appears(tmp_path, cli, monkeypatch):
    monkeypatch.chdir(repository(tmp_path, **{"jobs/ha.yaml": RISKY}))
    written = cli("lint", "--write-baseline", "hacfg-baseline.json", ".")
    assert written.code == 0 and written.err == "wrote 2 findings of 1 file to hacfg-baseline.json\n"
    entries = json.loads((tmp_path / "hacfg-baseline.json").read_text())["findings"]
    assert entries == [
        {"path": "jobs/ha.yaml", "rule": "HA001", "key": "restart.max"},
        {"path": "jobs/ha.yaml", "rule": "HA017", "key": "checkpoint"},
    ]  # keyed on the logical key path, never the line
    quiet = cli("lint", "--baseline", "hacfg-baseline.json", ".")
    assert (quiet.code, quiet.out) == (0, "2 more in the baseline hacfg-baseline.json, not reported.\n")
    (tmp_path / "jobs/other.yaml").write_text(RISKY)
    new = cli("lint", "--baseline", "hacfg-baseline.json", "-f", "json", ".")
    assert new.code == 1
    assert {(f["path"], f["rule"]) for f in json.loads(new.out)["findings"]} == {
        ("jobs/other.yaml", "HA001"), ("jobs/other.yaml", "HA017"),
    }


def test_reformatting_and_moving_keys_keep_every_entry_matched(tmp_path, cli, monkeypatch):
    monkeypatch.chdir(repository(tmp_path, **{"ha.yaml": RISKY}))
    cli("lint", "--write-baseline", "baseline.json", ".")
    (tmp_path / "ha.yaml").write_text(REFORMATTED)
    assert cli("lint", "ha.yaml").code == 1  # the findings are still there, on other lines
    result = cli("lint", "--baseline", "baseline.json", ".")
    assert (result.code, result.out) == (0, "2 more in the baseline baseline.json, not reported.\n")


def test_a_fixed_finding_is_a_stale_entry_until_the_baseline_is_written_again(tmp_path, cli, monkeypatch):
    monkeypatch.chdir(repository(tmp_path, **{"ha.yaml": RISKY}))
    cli("lint", "--write-baseline", "baseline.json", ".")
    (tmp_path / "ha.yaml").write_text(FIXED)
    stale = cli("lint", "--baseline", "baseline.json", "-f", "json", ".")
    assert stale.code == 0  # info
    reported = json.loads(stale.out)["findings"]
    assert [(f["rule"], f["severity"], f["path"], f["line"]) for f in reported] == [
        ("HA099", "info", "baseline.json", 4),
        ("HA099", "info", "baseline.json", 9),
    ]
    assert "HA001 at restart.max in ha.yaml matches no finding" in reported[0]["message"]
    pruned = cli("lint", "--write-baseline", "baseline.json", ".")
    assert pruned.err == "wrote 0 findings of 1 file to baseline.json\n"
    assert cli("lint", "--baseline", "baseline.json", ".").out == ""


def test_the_baseline_is_settable_beside_the_settings_and_found_from_a_subfolder(tmp_path, cli, monkeypatch):
    settings = '[tool.hacfg]\nbaseline = "hacfg-baseline.json"\n'
    root = repository(tmp_path, **{"pyproject.toml": settings, "jobs/ha.yaml": RISKY})
    monkeypatch.chdir(root)
    cli("lint", "--write-baseline", "hacfg-baseline.json", ".")
    monkeypatch.chdir(root / "jobs")
    assert cli("lint", "ha.yaml").code == 0
    assert cli("lint", "--baseline", root / "missing.json", "ha.yaml").code == 2


def test_sarif_marks_baselined_results_unchanged_and_suppressed_and_new_ones_new(tmp_path, cli, monkeypatch):
    monkeypatch.chdir(repository(tmp_path, **{"ha.yaml": RISKY}))
    cli("lint", "--write-baseline", "baseline.json", ".")
    (tmp_path / "b.yaml").write_text(RISKY)
    document = json.loads(cli("lint", "--baseline", "baseline.json", "-f", "sarif", ".").out)
    checker = Draft4Validator(SARIF_SCHEMA, format_checker=Draft7Validator.FORMAT_CHECKER)
    assert [e.message for e in checker.iter_errors(document)] == []
    states = {
        (r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"], r["ruleId"]): (
            r["baselineState"], [s["kind"] for s in r.get("suppressions", [])],
        )
        for r in document["runs"][0]["results"]
    }
    assert states == {
        ("ha.yaml", "HA001"): ("unchanged", ["external"]),
        ("ha.yaml", "HA017"): ("unchanged", ["external"]),
        ("b.yaml", "HA001"): ("new", []),
        ("b.yaml", "HA017"): ("new", []),
    }


def test_a_file_that_is_no_baseline_is_one_line_and_exit_2(tmp_path, cli, monkeypatch):
    monkeypatch.chdir(repository(tmp_path, **{"ha.yaml": RISKY, "baseline.json": '{"findings": [1]}'}))
    result = cli("lint", "--baseline", "baseline.json", ".")
    assert result.code == 2
    assert result.err == "baseline.json: not a hacfg baseline (version 1): --write-baseline writes one\n"
