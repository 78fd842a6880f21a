"""Every rule against its fixtures: inline `# expect:` comments say exactly what must fire."""

from __future__ import annotations

import pytest
from kit.paths import REPO

from hacfg.lint import engine as lint
from hacfg.lint.settings import Settings
from hacfg.testing import assert_fixture, check_rule_catalogue, fixtures_for

FIXTURES = REPO / "tests" / "data" / "rules"


@pytest.mark.parametrize("fixture", fixtures_for(FIXTURES), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_fixture(fixture):
    assert_fixture(fixture)


def test_every_rule_has_help_and_firing_and_near_miss_fixtures():
    rules = [source.rule for rule_id, source in lint.registry().items() if source.distribution == "hacfg" and rule_id != "HA000"]
    check_rule_catalogue(rules, FIXTURES, id_pattern=r"HA[01]\d\d")  # names the folder a rule lacks
    strays = sorted(str(folder) for folder in FIXTURES.iterdir() if folder.name not in {rule.id for rule in rules})
    assert not strays, f"fixtures for no rule: {', '.join(strays)}"


def test_a_rule_without_fixtures_is_named_with_the_folder_it_lacks(tmp_path):
    rule = lint.registry()["HA001"].rule
    with pytest.raises(AssertionError) as caught:
        check_rule_catalogue([rule], tmp_path, id_pattern=r"HA[01]\d\d")
    assert f"HA001: no fixture under {tmp_path / 'HA001'} expects it to fire" in str(caught.value)


@pytest.mark.parametrize("path", [*sorted((REPO / "presets").glob("*.yaml")), *sorted(REPO.glob("examples/**/ha.yaml"))], ids=lambda p: p.name)
def test_presets_and_examples_are_clean(path):
    report = lint.lint_paths([path], Settings())
    assert [f for f in report.findings if f.suppressed is None] == []


def test_the_kit_reports_missing_and_unexpected_findings(tmp_path):
    fixture = tmp_path / "ha.yaml"
    fixture.write_text("version: 1\nscenario: single-node\nrestart:\n  max: 3  # expect: HA017\n  unconditional: true\n")
    with pytest.raises(AssertionError) as caught:
        assert_fixture(fixture, select=["HA009", "HA017"])
    assert "unexpected HA009 line 4" in str(caught.value)
    fixture.write_text("version: 1\nscenario: single-node\n# expect-next: HA001\nrestart: {max: 0}\n")
    with pytest.raises(AssertionError, match="missing    HA001 line 4"):
        assert_fixture(fixture)


def test_ha023_names_each_count_and_more_processes_than_cards_is_an_error():
    from hacfg.testing import lint_fixture

    findings = lint_fixture(FIXTURES / "HA023" / "msrun_fires.yaml")
    assert [(f.line, f.column, f.severity, f.message) for f in findings] == [
        (7, 12, "warning", "--worker_num is 16, but 1 node(s) of 8 card(s) (job.cards) make 8 ranks: make them agree"),
        (7, 12, "error", "--local_worker_num 16 on nodes of 8 card(s) (job.cards): more processes than cards"),
    ]


def test_ha023_says_how_many_cards_fewer_processes_leave_idle(tmp_path):
    from hacfg.testing import lint_fixture

    scenario = tmp_path / "ha.yaml"
    scenario.write_text(
        "version: 1\nscenario: single-node\njob:\n  accelerator: npu\n"
        "  flavor: modelarts.bm.npu.arm.8snt9b2.d\n  command: torchrun --nproc-per-node 4 train.py\n"
    )
    (idle,) = lint_fixture(scenario, select=["HA023"])
    assert (idle.severity, idle.logical_path, idle.message) == (
        "warning", "job.command",
        "--nproc-per-node 4 on nodes of 8 card(s) (modelarts.bm.npu.arm.8snt9b2.d): 4 card(s) per node left idle",
    )
    scenario.write_text(
        "version: 1\nscenario: single-node\njob:\n  accelerator: npu\n"
        "  flavor: modelarts.bm.npu.arm.8snt9b2.d\n  cards: 2\n"
    )
    (fewer,) = lint_fixture(scenario, select=["HA023"])
    assert (fewer.severity, fewer.logical_path, fewer.line) == ("warning", "job.cards", 6)
    assert fewer.message == "job.cards 2 but modelarts.bm.npu.arm.8snt9b2.d has 8 card(s) per node: 6 card(s) per node left idle"
