"""The module graph, type-only imports included: what import-linter's contracts cannot say."""

from __future__ import annotations

import ast
from pathlib import Path

import grimp
import pytest

import hacfg.plugin


def test_no_module_imports_itself_through_others():
    graph = grimp.build_graph("hacfg")
    cycles = {
        tuple(sorted((module, imported)))
        for module in graph.modules
        for imported in graph.find_modules_directly_imported_by(module)
        if graph.find_shortest_chain(importer=imported, imported=module)
    }
    assert cycles == set()


def test_the_plugin_api_serves_exactly_its_names_from_where_they_are_defined():
    exported = set(hacfg.plugin.__all__)
    assert {"hookimpl", "rule", "ScenarioContext", "JobContext", "Target", "Precheck", "CheckpointLayout"} <= exported
    for name in exported:
        assert getattr(hacfg.plugin, name) is not None, name
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        hacfg.plugin.Nope  # noqa: B018


def test_the_plugin_face_names_for_the_type_checker_what_it_serves_at_run_time():
    tree = ast.parse(Path(hacfg.plugin.__file__).read_text())
    checked = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
        for statement in node.body
        if isinstance(statement, ast.ImportFrom)
        for alias in statement.names
    }
    assert checked == set(hacfg.plugin.__all__)
