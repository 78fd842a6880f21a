"""The module graph, type-only imports included: what import-linter's contracts cannot say."""

from __future__ import annotations

import ast
from pathlib import Path

import grimp
import pytest
from kit.paths import REPO

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


def test_the_plugin_face_serves_only_from_below_it():
    """What plugins import never reaches up into the agent, the linter or the command line, not even
    lazily through ``importlib``, where import-linter cannot see it."""
    below = ("hacfg.plugin", "hacfg.restart", "hacfg.plan", "hacfg.scenario")
    served_from = {*hacfg.plugin._MODULE_OF.values(), *hacfg.plugin._MODULES.values()}
    assert "hacfg.restart.policy" in served_from
    assert sorted(module for module in served_from if not module.startswith(below)) == []
    plugin_folder = Path(hacfg.plugin.__file__).parent
    assert [path.name for path in sorted(plugin_folder.glob("*.py")) if "hacfg.agent" in path.read_text()] == []


@pytest.mark.parametrize(
    "path, allowed",
    [
        ("hacfg/agent/process/warm_server.py", set()),
        # torch only once the script imported torch.distributed: the flight recorder of the running job
        ("hacfg/agent/culprit/hook.py", {"torch"}),
        ("hacfg/agent/culprit/site/sitecustomize.py", set()),
    ],
)
def test_what_runs_in_the_users_interpreter_imports_the_standard_library_alone(path, allowed):
    """The warm server and the evidence hook run inside the user's interpreter before their script:
    a third-party or hacfg import there would be imported into every attempt (import-linter's
    contract names hacfg's rooms; this names everything else)."""
    import sys

    tree = ast.parse((REPO / path).read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module and not node.level}
    assert imported and sorted(imported - sys.stdlib_module_names - {"__future__"}) == sorted(allowed)
