"""Test lint rules the way linters test theirs: fixture files that mark expected findings inline.

A fixture is a real scenario file or request body (YAML, so it can hold comments)::

    restart:
      max: 3  # expect: HA001
    # expect-next: HA003
    scenario: multi-node

:func:`assert_fixture` lints it and asserts that exactly those ``(rule, line)`` pairs come out,
no more and no fewer. By default only the rules named in the file's expectations run, the rule
whose folder holds the fixture (``fixtures/HA001/near_miss.yaml``), and the ``HA1xx`` parse and
model errors; ``# hacfg-test: select=ALL`` (or a list of IDs) chooses otherwise.

:func:`check_rule_catalogue` is the check any rule plugin can reuse: every rule has an ID in
its declared range, help text, and under ``FIXTURES/<RULE_ID>/`` at least one fixture where it
fires and one near miss where it does not.

Installed as a pytest plugin: the ``hacfg_lint_fixture`` fixture is ``assert_fixture``, and
``hacfg_plugin(module)`` registers a plugin in the test's own process, for one test.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from hacfg.plugin.ruletypes import RULE_ID

if TYPE_CHECKING:
    from hacfg.lint.engine import Finding
    from hacfg.plugin.ruletypes import Rule

FIXTURE_SUFFIXES = (".yaml", ".yml", ".json")
_EXPECT = re.compile(r"#\s*expect(-next)?:\s*([A-Za-z0-9_, ]+)")
_SELECT = re.compile(r"#\s*hacfg-test:\s*select=([A-Za-z0-9_, ]+)")


def expected_findings(text: str) -> set[tuple[str, int]]:
    """``(rule, line)`` pairs marked in ``text`` by ``# expect:`` and ``# expect-next:`` comments."""
    lines = text.splitlines()
    expected: set[tuple[str, int]] = set()
    for index, line in enumerate(lines):
        for match in _EXPECT.finditer(line):
            target = index + 1
            if match.group(1):  # expect-next: the next line that is not blank or a comment
                target = next(
                    (
                        i + 1
                        for i in range(index + 1, len(lines))
                        if lines[i].strip() and not lines[i].lstrip().startswith("#")
                    ),
                    len(lines) + 1,
                )
            expected.update(
                (rule_id.strip().upper(), target) for rule_id in match.group(2).split(",") if rule_id.strip()
            )
    return expected


def lint_fixture(
    path: str | Path, *, select: Iterable[str] | None = None, platform: str | None = None
) -> list[Finding]:
    """The findings for one fixture file, with only the selected rules running."""
    from hacfg.lint import engine as lint
    from hacfg.lint.settings import Settings

    path = Path(path)
    text = path.read_text(encoding="utf-8", errors="replace")
    if select is None:
        select = _selected(path, text)
    settings = Settings(select=tuple(select), root=path.parent)
    return lint.lint_file(path, settings, lint.registry(), platform=platform)


def _selected(path: Path, text: str) -> set[str]:
    directive = _SELECT.search(text)
    if directive:
        return {part.strip().upper() for part in directive.group(1).split(",") if part.strip()}
    select = {rule for rule, _ in expected_findings(text)} | {"HA100", "HA101", "HA102"}
    if RULE_ID.fullmatch(path.parent.name):  # a rule's own fixture folder: that rule always runs
        select.add(path.parent.name)
    return select


def assert_fixture(
    path: str | Path, *, select: Iterable[str] | None = None, platform: str | None = None
) -> list[Finding]:
    """Assert that linting ``path`` yields exactly the findings its comments expect."""
    path = Path(path)
    findings = [f for f in lint_fixture(path, select=select, platform=platform) if f.suppressed is None]
    actual = {(f.rule, f.line) for f in findings}
    expected = expected_findings(path.read_text(encoding="utf-8", errors="replace"))
    missing = sorted(expected - actual, key=lambda p: (p[1], p[0]))
    unexpected = [f"{f.rule} line {f.line}: {f.message}" for f in findings if (f.rule, f.line) not in expected]
    if missing or unexpected:
        lines = [f"{path}: findings differ from the # expect: comments"]
        lines += [f"  missing    {rule} line {line}" for rule, line in missing]
        lines += [f"  unexpected {item}" for item in unexpected]
        raise AssertionError("\n".join(lines))
    return findings


def fixtures_for(folder: str | Path) -> list[Path]:
    return sorted(p for p in Path(folder).rglob("*") if p.suffix in FIXTURE_SUFFIXES and p.is_file())


def check_rule_catalogue(rules: Iterable[Rule], fixtures: str | Path, *, id_pattern: str) -> None:
    """Every rule: ID in range, help text, a fixture that fires it and a near miss that does not."""
    problems = []
    for rule in rules:
        if not re.fullmatch(id_pattern, rule.id):
            problems.append(f"{rule.id}: ID outside the declared range {id_pattern}")
        if len(rule.help.strip().splitlines()) < 3:
            problems.append(f"{rule.id}: help text is missing or only one line (explain what, why, example, fix)")
        files = fixtures_for(Path(fixtures) / rule.id)
        fires = [f for f in files if any(r == rule.id for r, _ in expected_findings(f.read_text(errors="replace")))]
        if not fires:
            problems.append(f"{rule.id}: no fixture under {Path(fixtures) / rule.id} expects it to fire")
        if len(fires) == len(files):
            problems.append(
                f"{rule.id}: no near-miss fixture (one where it must not fire) under {Path(fixtures) / rule.id}"
            )
    if problems:
        raise AssertionError("\n".join(problems))


@pytest.fixture
def hacfg_lint_fixture() -> Callable[..., list[Finding]]:
    """``hacfg_lint_fixture(path)`` asserts the file's ``# expect:`` findings, exactly."""
    return assert_fixture


@pytest.fixture
def hacfg_plugin() -> Iterator[Callable[..., None]]:
    """``hacfg_plugin(module_or_object, name=None)`` registers a plugin in this process for one test.

    The plugin manager starts afresh (every installed plugin, then the ones registered here),
    and is reset again after the test, so no plugin leaks into the next one.
    """
    from hacfg.plugin import manager as plugin_manager

    plugin_manager.reset()

    def register(plugin: object, name: str | None = None) -> None:
        plugin_name = name or str(getattr(plugin, "__name__", type(plugin).__name__))
        plugin_manager.get().add(plugin, plugin_manager.PluginInfo(plugin_name, plugin_name, "(test)"))

    yield register
    plugin_manager.reset()
