"""The lint engine as a library: rule selection, suppressions, the fail threshold and fixes."""

from __future__ import annotations

import pytest

from hacfg.lint import engine as lint
from hacfg.lint import fix
from hacfg.lint.settings import Settings
from hacfg.plugin import Rule, rule


def test_selection_by_id_prefix_ignore_and_per_file(tmp_path):
    settings = Settings(select=("HA0",), ignore=("HA01",), per_file_ignores={"legacy/*.json": ("HA007",)}, root=tmp_path)
    ids = ["HA001", "HA007", "HA011", "HA100", "ASC101"]
    assert settings.enabled_rules(ids, str(tmp_path / "ha.yaml")) == {"HA001", "HA007"}
    assert settings.enabled_rules(ids, str(tmp_path / "legacy" / "job.json")) == {"HA001"}
    assert Settings().enabled_rules(ids, "x.yaml") == set(ids)


def test_suppressions_on_the_line_above_and_for_the_file():
    text = (
        "restart:\n"
        "  max: 3  # hacfg: disable=HA001,ha017 -- checkpoints live elsewhere\n"
        "  # hacfg: disable=HA009\n"
        "\n"
        "  unconditional: true\n"
        "# hacfg: disable-file=HA011\n"
    )
    found = lint.suppressions_in(text)
    assert [(s.line, s.comment_line, s.ids, s.reason) for s in found.items] == [
        (2, 2, ("HA001", "HA017"), "checkpoints live elsewhere"),
        (5, 3, ("HA009",), ""),
        (0, 6, ("HA011",), ""),
    ]


def finding(rule_id, line, severity="error", **extra):
    return lint.Finding(rule_id, severity, "ha.yaml", line, 1, line, 2, "", "message", **extra)


def test_suppressions_match_findings_and_report_what_they_left_unused():
    found = lint.suppressions_in("a: 1  # hacfg: disable=HA001 -- why\n# hacfg: disable-file=HA011,XX999\n")
    assert found.match(finding("HA001", 1)) == "why"
    assert found.match(finding("HA001", 2)) is None  # only on its own line
    assert found.match(finding("HA011", 7)) == ""  # anywhere in the file
    assert list(found.leftovers(lint.registry())) == [(2, 1, "unknown rule 'XX999' in suppression comment", "error")]


@pytest.mark.parametrize(
    ("severities", "threshold", "fails"),
    [((), "info", False), (("info",), "warning", False), (("warning",), "warning", True), (("info", "error"), "error", True)],
)
def test_the_fail_threshold(severities, threshold, fails):
    report = lint.Report([finding("HA001", 1, severity) for severity in severities])
    assert report.fails(threshold) is fails


def test_a_suppressed_finding_does_not_fail_the_run():
    assert not lint.Report([finding("HA001", 1, suppressed="")]).fails("info")


def edit(line, column, end_column, replacement, **extra):
    return lint.Finding("HA007", "error", "ha.yaml", line, column, line, end_column, "", "m", lint.Fix((), replacement, ""), **extra)


def test_fixes_replace_each_span_and_keep_the_first_of_overlapping_edits():
    text = 'a: 3\nb: "True"\n'
    edits = [
        edit(1, 4, 5, '"3"'),
        edit(2, 4, 10, '"true"'),
        edit(2, 5, 9, "yes"),  # overlaps the edit before
        edit(1, 1, 2, "z", suppressed=""),
    ]
    assert fix.apply(text, edits) == 'a: "3"\nb: "true"\n'


def test_fixes_of_a_report_name_only_the_files_they_change(tmp_path):
    body = tmp_path / "job.json"
    body.write_text('{"kind": "job", "metadata": {"name": "x", "annotations": {"fault-tolerance/hang-retry": true}}}\n')
    clean = tmp_path / "ha.yaml"
    clean.write_text("version: 1\nscenario: single-node\n")
    changed = fix.fixes(lint.lint_paths([body, clean], Settings()))
    assert [(c.path, c.count) for c in changed] == [(str(body), 1)]
    changed[0].write()
    assert '"fault-tolerance/hang-retry": "true"' in body.read_text()
    assert fix.fixes(lint.lint_paths([body], Settings())) == []


def test_a_rule_reads_the_kinds_it_has_checks_for():
    @rule("TST101", "body-only", "info", kind="job")
    def body_only(ctx):
        """Reads request bodies only.

        Made with kind="job".
        It has no scenario check.
        """
        return []

    assert isinstance(body_only, Rule) and body_only.kinds == ("job",)
    body_only.scenario(lambda ctx: [])
    assert body_only.kinds == ("scenario", "job")
    assert body_only.summary == "Reads request bodies only."
    with pytest.raises(ValueError, match="capital letters then at least three digits"):
        rule("tst1", "bad-id", "info")


TYPO_AND_RISKS = """\
version: 1
scenario: multi-node
job: {name: llama, nodes: 4, accelerator: gpu}
restart:
  maks: 3
  on_hang: true
hang:
  timeout: 2m
  detekt: true
"""


def lint_text(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return [(f.rule, f.line, f.column, f.end_column) for f in lint.lint_file(path, Settings(root=tmp_path), lint.registry())]


def test_a_typo_hides_no_risk_and_every_finding_keeps_its_place(tmp_path):
    typo = lint_text(tmp_path, "ha.yaml", TYPO_AND_RISKS)
    fixed = lint_text(tmp_path, "fixed.ha.yaml", TYPO_AND_RISKS.replace("maks", "max").replace("detekt", "detect"))
    assert [f for f in typo if f[0] == "HA101"] == [("HA101", 5, 3, 7), ("HA101", 9, 3, 9)]
    risks = [f for f in typo if f[0] != "HA101"]
    # the risks the file has once the typos are fixed, placed at the same lines; what the misspelled
    # restart.max would have said is said at the scenario, as for any restart budget the file leaves out
    assert {r for r, *_ in risks} == {r for r, *_ in fixed} >= {"HA001", "HA016", "HA017"}
    assert ("HA016", 8, 12, 14) in risks and ("HA016", 8, 12, 14) in fixed


def test_a_bad_value_leaves_its_section_unjudged_and_the_rest_judged(tmp_path):
    text = TYPO_AND_RISKS.replace("maks: 3", "max: 500")
    found = lint_text(tmp_path, "ha.yaml", text)
    assert ("HA102", 5, 8, 11) in found
    # restart is judged by a default it does not have (auto restart off): nothing said about it...
    assert not [f for f in found if f[0] == "HA005"]
    # ...while hang, which is valid, still is
    assert ("HA016", 8, 12, 14) in found


def test_a_file_missing_what_every_scenario_needs_is_not_judged(tmp_path):
    text = "version: 2\nscenario: multi-nod\nrestart: {maks: 3}\n"
    assert [r for r, *_ in lint_text(tmp_path, "ha.yaml", text)] == ["HA102", "HA102", "HA101"]


def test_the_unknown_key_fix_renames_it_to_the_key_it_meant_keeping_quotes(tmp_path):
    body = '{"version": 1, "scenario": "single-node", "restart": {"maks": 2}, "hang": {"detekt": true, "detect": 1}}\n'
    path = tmp_path / "j.ha.json"
    path.write_text(body)
    findings = lint.lint_file(path, Settings(root=tmp_path), lint.registry())
    unknown = [f for f in findings if f.rule == "HA101"]
    assert [(f.logical_path, f.fix is not None) for f in unknown] == [("restart.maks", True), ("hang.detekt", False)]
    assert unknown[0].fix.description == "Rename 'maks' to 'max'"
    assert fix.apply(body, unknown) == body.replace('"maks"', '"max"')  # a duplicate "detect" would not parse
