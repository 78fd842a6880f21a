"""Every rule against its fixtures: inline `# expect:` comments say exactly what must fire."""

from __future__ import annotations

import pytest

from conftest import REPO
from hacfg.lint import engine as lint
from hacfg.lint.settings import Settings
from hacfg.testing import assert_fixture, check_rule_catalogue, fixtures_for

FIXTURES = REPO / "tests" / "rules"


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
